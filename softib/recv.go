package softib

import (
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibqueue"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// responder is the receiving half of a connected QP.
type responder struct {
	epsn    wire.PSN // next expected PSN
	msn     uint32
	cur     ib.RecvWR
	curBuf  []byte
	curLen  int
	haveCur bool
	nakSent bool // a sequence NAK for epsn is out; do not repeat it per packet
	ackOwed bool
}

// datagram handles one IB packet from the fabric (receive goroutine).
func (d *Device) datagram(b []byte, src netip.AddrPort, dst netip.Addr, seg int) {
	if im := d.impair.Load(); im != nil {
		im.pass(d, b, src, dst, seg)
		return
	}
	d.receive(b, src, dst, seg)
}

// receive checks and delivers one IB packet, packet seg of a GRO train.
func (d *Device) receive(b []byte, srcAP netip.AddrPort, dst netip.Addr, seg int) {
	if d.ibp != nil {
		d.receiveIB(b, srcAP)
		return
	}
	d.rxCount.add(len(b))
	p := &d.rxPkt
	if err := wire.ParsePacket(b, p); err != nil {
		d.count(dropMalformed)
		return
	}
	// The IPv4 ID guessed first: 0 for a lone datagram (softib's and
	// Linux's unconnected DF sends), the previous one + 1 inside a train.
	hint := uint16(0)
	if seg > 0 {
		hint = d.rxID + 1
	}
	id, ok := d.rxPath.of(srcAP, netip.AddrPortFrom(dst, d.fab.port)).Check(b, hint)
	if !ok {
		d.count(dropBadICRC)
		return
	}
	d.rxID = id
	src := srcAP.Addr()
	if !d.portAccepts(p.BTH.PKey) {
		d.count(dropPKey)
		return
	}
	if p.BTH.DestQP == ib.MulticastQPN {
		d.multicast(p, src, dst)
		return
	}
	d.deliver(p, src, dst)
}

// deliver hands a checked unicast packet to its QP.
func (d *Device) deliver(p *wire.Packet, src, dst netip.Addr) {
	q, ok := d.qps.get(p.BTH.DestQP)
	if !ok {
		d.count(dropUnknownQP)
		return
	}
	switch {
	case q == d.gsi:
		d.recvMAD(p, src)
	case q.typ == ib.UD && p.BTH.Opcode.Transport() == ib.UD:
		q.recvUD(p, src)
	case p.BTH.Opcode == wire.OpRCAck && q.typ == ib.RC:
		q.onAck(p.BTH.PKey, p.BTH.PSN, p.AETH, src, dst)
	case p.BTH.Opcode.Transport() == q.typ:
		q.recvConnected(p, src, dst)
	default:
		d.count(dropMalformed) // transport does not match the QP
	}
}

// recvMAD passes a datagram for QP1 to the MAD service, if one is open.
func (d *Device) recvMAD(p *wire.Packet, src netip.Addr) {
	if p.BTH.Opcode != wire.OpUDSendOnly || p.DETH.QKey != ib.GSIQKey {
		d.count(dropQKey)
		return
	}
	from := ib.MADAddr{GID: ib.GIDFromAddr(src), QPN: p.DETH.SrcQP, PKey: p.BTH.PKey}
	if d.ibp != nil {
		// As ib_umad reports it: the way back to the sender (its LID,
		// the SL, the bits of our LID it was sent to), its GID and GRH
		// fields only if the MAD came with a GRH.
		s := &d.rxFrom
		from = ib.MADAddr{QPN: p.DETH.SrcQP, PKey: p.BTH.PKey, Path: ib.Path{
			DLID: s.slid, SL: s.sl, SrcPathBits: uint8(s.dlid & d.ibp.addr.Load().mask)}}
		if s.grh {
			from.GID = s.sgid
			from.Path.GRH, from.Path.TrafficClass, from.Path.FlowLabel, from.Path.HopLimit = true, s.tclass, s.flow, s.hopLimit
		}
	}
	switch d.mads.Deliver(from, p.Payload) {
	case ibqueue.MADQueued:
	case ibqueue.MADNoService, ibqueue.MADQueueFull:
		d.count(dropNoRecv)
	case ibqueue.MADOverShare:
		d.count(dropSourceShare)
	default: // closing, or not a MAD
		d.count(dropMalformed)
	}
}

// multicast delivers a datagram to every QP attached to its group.
func (d *Device) multicast(p *wire.Packet, src, dst netip.Addr) {
	members := (*d.groups.Load())[dst]
	if len(members) == 0 || p.BTH.Opcode != wire.OpUDSendOnly {
		d.count(dropNotMember)
		return
	}
	for _, q := range members {
		q.recvUD(p, src)
	}
}

// receiving reports whether the QP takes a packet now: in RTR or RTS, and
// of its own partition (the port's table may hold others). A packet it
// does not take is counted. q.mu is held.
func (q *qp) receiving(pkey ib.PKey) bool {
	cause, ok := ibqueue.Admit(q.state, q.pkey, pkey)
	switch {
	case ok:
	case cause == ibqueue.DropPKey:
		q.dev.count(dropPKey)
	default:
		q.dev.count(dropQPState)
	}
	return ok
}

// recvUD lands a datagram in the next posted buffer, behind a GRH as verbs
// does.
func (q *qp) recvUD(p *wire.Packet, src netip.Addr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.dev
	if !q.receiving(p.BTH.PKey) {
		return
	}
	if p.DETH.QKey != q.qkey {
		d.count(dropQKey)
		return
	}
	wr, ok := q.takeRecv()
	if !ok {
		d.count(dropNoRecv)
		return
	}
	buf, _ := wr.SGE.Bytes() // checked when posted
	if len(buf) < ib.GRHLen+len(p.Payload) {
		q.recv.Untake(wr)
		d.count(dropTooLong)
		return
	}
	wc := ib.Completion{
		ID: wr.ID, Status: ib.WCSuccess, Opcode: ib.WCRecv, QPN: q.num,
		ByteLen: uint32(ib.GRHLen + len(p.Payload)),
		SrcQPN:  p.DETH.SrcQP, PKey: p.BTH.PKey,
	}
	if d.ibp != nil {
		// As verbs reports it: the source LID and SL always, the GRH
		// (and so a source GID) only if the packet carried one.
		s := &d.rxFrom
		wc.SrcLID, wc.SL, wc.GRH = s.slid, s.sl, s.grh
		if s.grh {
			wc.SrcGID = s.sgid
			writeGRH(buf[:ib.GRHLen], len(p.Payload), s.sgid, d.port.GID)
		} else {
			clear(buf[:ib.GRHLen])
		}
	} else {
		wc.SrcGID = ib.GIDFromAddr(src)
		writeGRH(buf[:ib.GRHLen], len(p.Payload), wc.SrcGID, d.port.GID)
	}
	copy(buf[ib.GRHLen:], p.Payload)
	q.ctr.rxPackets.Add(1)
	q.ctr.rxMessages.Add(1)
	q.ctr.rxBytes.Add(uint64(len(p.Payload)))
	q.recvCQ.Push(&wc)
	d.touch(q.recvCQ)
}

// writeGRH fills the 40-octet global route header area of a UD receive.
func writeGRH(b []byte, payloadLen int, sgid, dgid ib.GID) {
	clear(b[:8])
	b[0] = 0x60 // IP version 6
	b[4], b[5] = byte(payloadLen>>8), byte(payloadLen)
	b[6] = 0x1b // next header: IBA transport
	b[7] = 64
	copy(b[8:24], sgid[:])
	copy(b[24:40], dgid[:])
}

// fromPeer is rxe's check_addr: a connected QP takes packets only from its
// peer's underlay address to ours. q.mu is held.
// On an InfiniBand link the check is the LRH's: the packet's SLID is the
// LID the QP's path leads to.
func (q *qp) fromPeer(src, dst netip.Addr) bool {
	if q.dev.ibp != nil {
		if q.dev.rxFrom.slid == q.route.dlid {
			return true
		}
	} else if src == q.destAddr && dst == q.dev.fab.local {
		return true
	}
	q.dev.count(dropWrongSource)
	return false
}

// recvConnected handles RC and UC data packets.
func (q *qp) recvConnected(p *wire.Packet, src, dst netip.Addr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.dev
	if !q.receiving(p.BTH.PKey) {
		return
	}
	if !q.fromPeer(src, dst) {
		return
	}
	q.ctr.rxPackets.Add(1)
	if q.typ == ib.UC {
		q.recvUC(p)
		return
	}
	r := &q.resp
	switch c := wire.Compare(p.BTH.PSN, r.epsn); {
	case c < 0:
		// A duplicate: the ACK for it was lost. Acknowledge again.
		q.ctr.duplicates.Add(1)
		q.oweAck()
		return
	case c > 0:
		d.count(dropPSN)
		if !r.nakSent && wire.Distance(r.epsn, p.BTH.PSN) < wire.PSNWindow {
			r.nakSent = true
			q.ctr.seqNAKsSent.Add(1)
			d.sendAck(q, r.epsn, wire.NAK(wire.NAKPSNSequenceError, r.msn))
		}
		return
	}
	pos := p.BTH.Opcode.Position()
	if pos == wire.PosFirst || pos == wire.PosOnly {
		if r.haveCur {
			q.protocolError()
			return
		}
		wr, ok := q.takeRecv()
		if !ok {
			q.ctr.rnrNAKsSent.Add(1)
			d.sendAck(q, p.BTH.PSN, wire.RNRNAK(q.minRNR, r.msn))
			return
		}
		buf, _ := wr.SGE.Bytes()
		r.cur, r.curBuf, r.curLen, r.haveCur = wr, buf, 0, true
	} else if !r.haveCur {
		q.protocolError()
		return
	}
	if r.curLen+len(p.Payload) > len(r.curBuf) {
		d.count(dropTooLong)
		q.recvCQ.Push(&ib.Completion{ID: r.cur.ID, Status: ib.WCLocalLengthError, Opcode: ib.WCRecv, QPN: q.num})
		r.haveCur = false
		d.sendAck(q, p.BTH.PSN, wire.NAK(wire.NAKInvalidRequest, r.msn))
		q.fail(ib.WCFlushError)
		return
	}
	copy(r.curBuf[r.curLen:], p.Payload)
	r.curLen += len(p.Payload)
	q.ctr.rxBytes.Add(uint64(len(p.Payload)))
	r.epsn = r.epsn.Add(1)
	r.nakSent = false
	if pos == wire.PosLast || pos == wire.PosOnly {
		r.msn = (r.msn + 1) & uint32(wire.PSNMask)
		q.complete()
	}
	q.oweAck()
}

// complete finishes the message being received.
func (q *qp) complete() {
	r := &q.resp
	q.ctr.rxMessages.Add(1)
	q.recvCQ.Push(&ib.Completion{ID: r.cur.ID, Status: ib.WCSuccess, Opcode: ib.WCRecv, QPN: q.num, ByteLen: uint32(r.curLen)})
	r.haveCur = false
	q.dev.touch(q.recvCQ)
}

// protocolError answers an opcode out of sequence: NAK invalid request and
// error, as the IBA requires of a responder.
func (q *qp) protocolError() {
	q.dev.count(dropMalformed)
	q.dev.sendAck(q, q.resp.epsn, wire.NAK(wire.NAKInvalidRequest, q.resp.msn))
	q.fail(ib.WCFlushError)
}

// recvUC reassembles UC messages; a message with a missing packet is
// dropped whole and its buffer reused.
// ucDuplicateWindow is how far behind the expected PSN a UC packet is
// taken for a duplicate rather than for the sender having moved on.
const ucDuplicateWindow = 1 << 16

func (q *qp) recvUC(p *wire.Packet) {
	r := &q.resp
	d := q.dev
	if behind := wire.Distance(p.BTH.PSN, r.epsn); behind >= 1 && behind <= ucDuplicateWindow {
		// Just behind what we expect: a duplicate or an overtaken packet.
		// Taking it would deliver an old message late or break the
		// current one. Anything further off is a resync after loss, which
		// UC must accept (it has no other way to catch up).
		q.ctr.duplicates.Add(1)
		d.count(dropPSN)
		return
	}
	pos := p.BTH.Opcode.Position()
	if p.BTH.PSN != r.epsn || pos == wire.PosFirst || pos == wire.PosOnly {
		if r.haveCur {
			// A packet went missing (or a new message began early): the
			// partial message is dropped and its buffer reused.
			q.recv.Untake(r.cur)
			r.haveCur = false
			d.count(dropUCIncomplete)
		}
	}
	r.epsn = p.BTH.PSN.Add(1)
	if pos == wire.PosFirst || pos == wire.PosOnly {
		wr, ok := q.takeRecv()
		if !ok {
			d.count(dropNoRecv)
			return
		}
		buf, _ := wr.SGE.Bytes()
		r.cur, r.curBuf, r.curLen, r.haveCur = wr, buf, 0, true
	} else if !r.haveCur {
		d.count(dropUCIncomplete)
		return
	}
	if r.curLen+len(p.Payload) > len(r.curBuf) {
		d.count(dropTooLong)
		q.recv.Untake(r.cur)
		r.haveCur = false
		return
	}
	copy(r.curBuf[r.curLen:], p.Payload)
	r.curLen += len(p.Payload)
	q.ctr.rxBytes.Add(uint64(len(p.Payload)))
	if pos == wire.PosLast || pos == wire.PosOnly {
		q.complete()
	}
}

// oweAck queues an ACK to be sent at the end of this receive batch, so a
// whole GRO train is acknowledged once.
func (q *qp) oweAck() {
	if !q.resp.ackOwed {
		q.resp.ackOwed = true
		q.dev.acks = append(q.dev.acks, q)
	}
}

// touch remembers a CQ to signal at the end of the batch.
func (d *Device) touch(c *cq) {
	for _, t := range d.touched {
		if t == c {
			return
		}
	}
	d.touched = append(d.touched, c)
}

// endTrain runs the consumers that run here (ib.CQHandler) after a train
// that left a receive queue half empty or less: they take the completions
// and post the buffers again. A batch holds up to 16 trains of up to 64
// messages, and a shared receive queue of 256 buffers ran dry within one
// batch of 1460-octet TCP segments (RNR NAKs, go-back-N retransmissions)
// once the sender kept more than 256 messages in flight. Only then: a
// consumer run after each train of a multi-packet message would see one
// completion at a time and coalesce none. The ACKs wait for the batch's end.
func (d *Device) endTrain() {
	d.rxCount.publish(&d.ctr)
	if !d.recvLow.Load() {
		return
	}
	d.recvLow.Store(false)
	for _, c := range d.touched {
		c.RunHandler()
	}
}

// endBatch sends the coalesced ACKs and wakes the consumers of every CQ
// that got completions (receive goroutine).
func (d *Device) endBatch() {
	if im := d.impair.Load(); im != nil {
		im.flush(d)
	}
	d.rxCount.publish(&d.ctr)
	// A consumer that runs here (ib.CQHandler) goes first: the data reaches
	// it without waiting for the ACK sends (a send through veth runs the
	// peer's receive path inline, ~100 µs on these VMs).
	for _, c := range d.touched {
		c.RunHandler()
	}
	for i, q := range d.acks {
		q.mu.Lock()
		if q.resp.ackOwed && q.state != ib.StateError {
			q.resp.ackOwed = false
			d.sendAck(q, q.resp.epsn.Prev(), wire.ACK(q.resp.msn))
		}
		q.mu.Unlock()
		d.acks[i] = nil
	}
	d.acks = d.acks[:0]
	// Consumers on their own goroutines are woken after the ACKs: a woken
	// goroutine waits in this P's run queue while the ACK send runs, and
	// the ACKs are what keeps the sender's window open (waking first cut
	// BenchmarkRC64KNetns from ~13 to ~2.6 Gbit/s).
	for i, c := range d.touched {
		c.SignalUnlessHandled()
		d.touched[i] = nil
	}
	d.touched = d.touched[:0]
}

// sendAck sends an ACK or NAK on a connected QP (receive goroutine; q.mu
// is held).
func (d *Device) sendAck(q *qp, psn wire.PSN, aeth wire.AETH) {
	bth := wire.BTH{Opcode: wire.OpRCAck, PKey: q.pkey, DestQP: q.destQPN, PSN: psn}
	tx := &d.ackTx
	tx.reset()
	d.frameAck(tx, &bth, aeth, q.destAddr, &q.route)
	err := d.fab.send(tx, q.destAddr, 0)
	d.countTx(tx, err)
	q.ctr.acksSent.Add(1)
}
