package softib

import (
	"net/netip"
	"sync"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// maxOutstanding bounds the packets an RC requester has in flight before
// it waits for ACKs (there is no end-to-end credit in IPoIB).
const maxOutstanding = 1024

// sendEntry is a posted send and the PSNs its packets use.
type sendEntry struct {
	wr    ib.SendWR
	buf   []byte
	first wire.PSN
	npkts uint32
}

// requester is the sending half of a QP: a ring of posted sends, the next
// PSN to assign, how far they were transmitted and how far acknowledged.
type requester struct {
	sq      []sendEntry // ring; grows on demand up to depth
	depth   int         // MaxSend
	head, n int
	next    wire.PSN // PSN for the next posted message
	sent    wire.PSN // next PSN to transmit
	hi      wire.PSN // one past the highest PSN ever transmitted (sent goes back on retries)
	acked   wire.PSN // oldest unacknowledged PSN: [acked, hi) is outstanding
	retries uint8
	rnrs    uint8
	rnrWait bool // waiting out an RNR NAK timer
	timer   *time.Timer
}

func (r *requester) start(psn wire.PSN) {
	if r.n == 0 {
		r.next, r.sent, r.hi, r.acked = psn, psn, psn, psn
	}
}

func (r *requester) push(e sendEntry) bool {
	if r.n == len(r.sq) && !r.grow() {
		return false
	}
	r.sq[(r.head+r.n)%len(r.sq)] = e
	r.n++
	return true
}

func (r *requester) pop() sendEntry {
	e := r.sq[r.head]
	r.sq[r.head] = sendEntry{}
	r.head = (r.head + 1) % len(r.sq)
	r.n--
	return e
}

// initialSendRing is the send ring a QP starts with. Most connections of
// a large cluster idle with a message or two in flight; the ring doubles up
// to MaxSend only on the ones that are busy, so idle connections stay small.
const initialSendRing = 8

// grow doubles a full ring, up to depth, keeping the entries in order.
func (r *requester) grow() bool {
	size := min(max(2*len(r.sq), initialSendRing), r.depth)
	if size <= len(r.sq) {
		return false
	}
	sq := make([]sendEntry, size)
	for i := range r.n {
		sq[i] = *r.at(i)
	}
	r.sq, r.head = sq, 0
	return true
}

func (r *requester) at(i int) *sendEntry { return &r.sq[(r.head+i)%len(r.sq)] }

func (r *requester) stopTimer() {
	if r.timer != nil {
		r.timer.Stop()
	}
}

var txPool = sync.Pool{New: func() any { return new(txMsg) }}

// PostSend queues sends and transmits what the window allows right away,
// in the caller's goroutine: no hand-off on the way out.
func (q *qp) PostSend(wrs []ib.SendWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != ib.StateRTS {
		return 0, ib.ErrBadState
	}
	if q.typ == ib.UD {
		return q.postUD(wrs)
	}
	posted := 0
	for i := range wrs {
		buf, err := wrs[i].SGE.Bytes()
		if err != nil {
			return posted, err
		}
		npkts := uint32(1)
		if len(buf) > q.pmtu {
			npkts = uint32((len(buf) + q.pmtu - 1) / q.pmtu)
		}
		e := sendEntry{wr: wrs[i], buf: buf, first: q.req.next, npkts: npkts}
		if !q.req.push(e) {
			if posted == 0 {
				return 0, ib.ErrQueueFull
			}
			break
		}
		q.req.next = q.req.next.Add(npkts)
		posted++
	}
	q.pump()
	return posted, nil
}

// pump transmits packets from req.sent up to the window, a message at a
// time, each message as one or more GSO trains. q.mu is held.
func (q *qp) pump() {
	r := &q.req
	if r.rnrWait || q.state != ib.StateRTS {
		return
	}
	tx := txPool.Get().(*txMsg)
	defer txPool.Put(tx)
	for i := 0; i < r.n; i++ {
		e := r.at(i)
		end := e.first.Add(e.npkts)
		if wire.Compare(r.sent, end) >= 0 {
			continue
		}
		if q.typ == ib.RC && wire.Distance(r.acked, r.sent) >= maxOutstanding {
			break
		}
		for wire.Compare(r.sent, end) < 0 {
			k := q.sendTrain(tx, i, r.sent)
			if k == 0 {
				break
			}
			r.sent = r.sent.Add(k)
		}
	}
	if wire.Compare(r.sent, r.hi) > 0 {
		r.hi = r.sent
	}
	if q.typ == ib.UC {
		// UC has no acknowledgements: a message is done once it left.
		for r.n > 0 && wire.Compare(r.sent, r.sq[r.head].first.Add(r.sq[r.head].npkts)) >= 0 {
			e := r.pop()
			q.ctr.txMessages.Add(1)
			q.sendCQ.Push(&ib.Completion{ID: e.wr.ID, Status: ib.WCSuccess, Opcode: ib.WCSend, QPN: q.num})
		}
		r.acked = r.sent
		q.sendCQ.Signal()
		return
	}
	if wire.Compare(r.acked, r.sent) != 0 {
		q.armTimer(q.timeout)
	}
}

// sendTrain sends packets from psn on, in message i of the send queue and
// those after it, as one GSO train, and returns how many it sent. A train
// holds packets of one length but for a shorter last one, as GSO wants: the
// full packets of a large message, or many small messages of one size (TCP
// segments of one MSS), which would otherwise cost a send each.
func (q *qp) sendTrain(tx *txMsg, i int, psn wire.PSN) uint32 {
	r := &q.req
	limit := uint32(maxTrainSegments)
	if q.typ == ib.RC {
		limit = min(limit, uint32(max(1, maxOutstanding-int(wire.Distance(r.acked, psn)))))
	}
	maxBytes := q.dev.fab.maxUDPPayload()
	tx.reset()
	count, segLen := uint32(0), 0
	for ; i < r.n && count < limit; i++ {
		e := r.at(i)
		idx := wire.Distance(e.first, psn.Add(count)) // packet index inside the message
		for idx < e.npkts {
			off := int(idx) * q.pmtu
			payload := e.buf[off:min(off+q.pmtu, len(e.buf))]
			// BTH, payload, pad, ICRC (and the link's LRH, GRH, VCRC): the same for every SEND
			l := wire.PacketLen(wire.OpRCSendOnly, len(payload)) + q.dev.linkOverhead(&q.route)
			if count > 0 && (l > segLen || tx.bytes+l > maxBytes) {
				return q.sendTrainNow(tx, count, segLen)
			}
			first, last := idx == 0, idx == e.npkts-1
			bth := wire.BTH{
				Opcode: sendOpcode(q.typ, first, last),
				PKey:   q.pkey,
				DestQP: q.destQPN,
				PSN:    psn.Add(count),
				AckReq: q.typ == ib.RC && last,
				SE:     last,
			}
			q.dev.frame(tx, int(count), &bth, nil, payload, q.destAddr, &q.route)
			count++
			idx++
			if count == 1 {
				segLen = l
			}
			if l < segLen || count == limit {
				return q.sendTrainNow(tx, count, segLen)
			}
		}
	}
	return q.sendTrainNow(tx, count, segLen)
}

// sendTrainNow sends the count packets framed in tx.
func (q *qp) sendTrainNow(tx *txMsg, count uint32, segLen int) uint32 {
	if count == 0 {
		return 0
	}
	err := q.dev.fab.send(tx, q.destAddr, trainSegSize(count, segLen))
	q.dev.countTx(tx, err)
	q.ctr.txPackets.Add(uint64(count))
	q.ctr.txBytes.Add(uint64(tx.bytes))
	return count
}

// trainSegSize is the GSO segment size for a train of count packets (0 for
// a single datagram, which needs no segmentation).
func trainSegSize(count uint32, segLen int) int {
	if count <= 1 {
		return 0
	}
	return segLen
}

// postUD sends the datagrams at once; UD completes on transmission.
// Consecutive datagrams of one size to one unicast destination (the
// segments of a TCP super-packet) leave as one GSO train: one syscall
// instead of one each.
func (q *qp) postUD(wrs []ib.SendWR) (int, error) {
	tx := txPool.Get().(*txMsg)
	defer txPool.Put(tx)
	mtu := q.dev.port.ActiveMTU.Bytes()
	for i := 0; i < len(wrs); {
		wr := &wrs[i]
		buf, err := wr.SGE.Bytes()
		if err != nil {
			return i, err
		}
		dest, ok := wr.AH.(*ah)
		switch {
		case !ok:
			q.completeUD(wrs[i:i+1], ib.WCLocalQPError)
			i++
			continue
		case len(buf) > mtu:
			q.completeUD(wrs[i:i+1], ib.WCLocalLengthError)
			i++
			continue
		}
		tx.reset()
		q.frameUD(tx, 0, wr, dest, buf)
		segLen := tx.bytes
		count, payload := 1, len(buf)
		if !dest.multicast && len(buf) > 0 {
			limit := min(maxTrainSegments, q.dev.fab.maxUDPPayload()/segLen)
			count, payload = q.extendTrain(tx, wrs[i:], dest, len(buf), mtu, limit)
		}
		err = q.dev.fab.send(tx, dest.to, trainSegSize(uint32(count), segLen))
		q.dev.countTx(tx, err)
		q.ctr.txPackets.Add(uint64(count))
		q.ctr.txBytes.Add(uint64(payload))
		q.ctr.txMessages.Add(uint64(count))
		q.completeUD(wrs[i:i+count], ib.WCSuccess)
		i += count
	}
	q.sendCQ.Signal()
	return len(wrs), nil
}

// extendTrain frames, behind wrs[0] (already in tx), the work requests
// that can share its GSO train: same destination, QPN and Q_Key, and the
// same length as the first but for a shorter last one. It returns the
// train's datagram count and payload octets.
func (q *qp) extendTrain(tx *txMsg, wrs []ib.SendWR, dest *ah, size, mtu, limit int) (count, payload int) {
	count, payload = 1, size
	for count < len(wrs) && count < limit {
		wr := &wrs[count]
		next, ok := wr.AH.(*ah)
		if !ok || next.to != dest.to || next.route != dest.route || wr.RemoteQPN != wrs[0].RemoteQPN || wr.RemoteQKey != wrs[0].RemoteQKey {
			break
		}
		buf, err := wr.SGE.Bytes()
		if err != nil || len(buf) == 0 || len(buf) > size || len(buf) > mtu {
			break
		}
		q.frameUD(tx, count, wr, next, buf)
		count++
		payload += len(buf)
		if len(buf) < size {
			break // GSO: only the last datagram may be shorter
		}
	}
	return count, payload
}

// frameUD adds one UD SEND Only packet to tx as its seg-th datagram.
func (q *qp) frameUD(tx *txMsg, seg int, wr *ib.SendWR, dest *ah, buf []byte) {
	bth := wire.BTH{Opcode: wire.OpUDSendOnly, PKey: q.pkey, DestQP: wr.RemoteQPN & ib.QPNMask, PSN: q.req.next, SE: true}
	if dest.multicast {
		bth.DestQP = ib.MulticastQPN
	}
	q.req.next = q.req.next.Add(1)
	deth := wire.DETH{QKey: wr.RemoteQKey, SrcQP: q.num}
	q.dev.frame(tx, seg, &bth, &deth, buf, dest.to, &dest.route)
}

// completeUD completes wrs with status.
func (q *qp) completeUD(wrs []ib.SendWR, status ib.WCStatus) {
	for k := range wrs {
		q.sendCQ.Push(&ib.Completion{ID: wrs[k].ID, Status: status, Opcode: ib.WCSend, QPN: q.num})
	}
}

func (d *Device) countTx(tx *txMsg, err error) {
	if err != nil {
		d.count(dropTxError)
		return
	}
	d.ctr.txSends.Add(1)
	d.ctr.txPackets.Add(uint64(tx.segments))
	d.ctr.txBytes.Add(uint64(tx.bytes))
}

// sendOpcode is the SEND opcode for a packet's place in its message.
func sendOpcode(t ib.QPType, first, last bool) wire.Opcode {
	var op wire.Opcode
	switch {
	case first && last:
		op = wire.OpRCSendOnly
	case first:
		op = wire.OpRCSendFirst
	case last:
		op = wire.OpRCSendLast
	default:
		op = wire.OpRCSendMiddle
	}
	if t == ib.UC {
		op |= 0x20 // the UC opcodes are the RC ones in the UC transport range
	}
	return op
}

// armTimer (re)starts the QP's retransmission timer. q.mu is held.
func (q *qp) armTimer(d time.Duration) {
	if d <= 0 {
		return
	}
	if q.req.timer == nil {
		q.req.timer = time.AfterFunc(d, q.onTimer)
		return
	}
	q.req.timer.Reset(d)
}

// onTimer fires after an ACK timeout, or when an RNR wait is over.
func (q *qp) onTimer() {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := &q.req
	if q.state != ib.StateRTS {
		return
	}
	if r.rnrWait {
		r.rnrWait = false
		q.pump()
		return
	}
	if wire.Compare(r.acked, r.sent) == 0 {
		return // everything was acknowledged meanwhile
	}
	q.ctr.timeouts.Add(1)
	if r.retries >= q.retryCnt {
		q.fail(ib.WCRetryExceeded)
		return
	}
	r.retries++
	q.retransmitFrom(r.acked)
}

// retransmitFrom goes back to psn and sends again from there (go-back-N).
func (q *qp) retransmitFrom(psn wire.PSN) {
	q.ctr.retransmits.Add(uint64(wire.Distance(psn, q.req.sent)))
	q.req.sent = psn
	q.pump()
}

// onAck handles an ACK or NAK for this requester (receive goroutine), as
// the IBA requester does: only a response from the peer for a PSN it has
// outstanding, [acked, hi), means anything; others are stale (or forged)
// and ignored. An RNR NAK or a sequence NAK only delays the QP; a fatal
// NAK fails it.
func (q *qp) onAck(pkey ib.PKey, psn wire.PSN, aeth wire.AETH, src, dst netip.Addr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r := &q.req
	if q.state != ib.StateRTS || q.typ != ib.RC {
		q.dev.count(dropQPState)
		return
	}
	if !q.pkey.Accepts(pkey) {
		q.dev.count(dropPKey) // another partition on the same port
		return
	}
	if !q.fromPeer(src, dst) {
		return
	}
	if !r.outstanding(psn) {
		q.dev.count(dropStaleAck)
		return
	}
	switch aeth.Kind() {
	case wire.AckKindACK:
		q.ackThrough(psn)
		if r.rnrWait {
			// The RNR timer runs the QP until it fires; an ACK for what
			// came before the NAKed packet must not stop it.
			return
		}
	case wire.AckKindRNRNAK:
		// A responder sends an RNR NAK only for the first packet of a
		// message (it had no receive buffer for it).
		if !r.startsMessage(psn) {
			q.dev.count(dropStaleAck)
			return
		}
		q.ctr.rnrNAKsRcvd.Add(1)
		q.ackThrough(psn.Prev()) // everything before psn arrived
		if q.rnrRetry != 7 && r.rnrs >= q.rnrRetry {
			q.fail(ib.WCRNRRetryExceeded)
			return
		}
		r.rnrs++
		r.sent = psn
		r.rnrWait = true
		q.armTimer(aeth.RNRTimer())
		return
	case wire.AckKindNAK:
		switch aeth.NAKCode() {
		case wire.NAKPSNSequenceError:
			q.ctr.seqNAKsRcvd.Add(1)
			q.ackThrough(psn.Prev())
			q.retransmitFrom(psn)
			return
		case wire.NAKInvalidRequest:
			q.fail(ib.WCRemoteInvalidRequest)
		case wire.NAKRemoteAccessError:
			q.fail(ib.WCRemoteAccessError)
		case wire.NAKRemoteOperational:
			q.fail(ib.WCRemoteOperationalError)
		default:
			q.dev.count(dropMalformed) // a reserved code (or RD's): means nothing here
		}
		return
	default:
		q.dev.count(dropMalformed) // the parser refuses the reserved kind
		return
	}
	if wire.Compare(r.acked, r.sent) == 0 {
		r.stopTimer()
	} else {
		q.armTimer(q.timeout)
	}
	q.pump()
}

// outstanding reports whether psn was transmitted and not yet
// acknowledged.
func (r *requester) outstanding(psn wire.PSN) bool {
	return wire.Compare(psn, r.acked) >= 0 && wire.Compare(psn, r.hi) < 0
}

// startsMessage reports whether psn is the first PSN of a posted message.
func (r *requester) startsMessage(psn wire.PSN) bool {
	for i := 0; i < r.n; i++ {
		switch c := wire.Compare(r.at(i).first, psn); {
		case c == 0:
			return true
		case c > 0:
			return false
		}
	}
	return false
}

// ackThrough completes every message whose last packet is at or before
// psn.
func (q *qp) ackThrough(psn wire.PSN) {
	r := &q.req
	next := psn.Add(1)
	if wire.Compare(next, r.acked) <= 0 {
		return
	}
	r.acked = next
	r.retries, r.rnrs = 0, 0 // progress
	if wire.Compare(r.sent, next) < 0 {
		// An ACK for packets sent before a go-back: no need to send
		// them again.
		r.sent = next
	}
	completed := false
	for r.n > 0 {
		if e := r.at(0); wire.Compare(e.first.Add(e.npkts), next) > 0 {
			break
		}
		e := r.pop()
		q.ctr.txMessages.Add(1)
		q.sendCQ.Push(&ib.Completion{ID: e.wr.ID, Status: ib.WCSuccess, Opcode: ib.WCSend, QPN: q.num})
		completed = true
	}
	if completed {
		q.sendCQ.Signal()
	}
}
