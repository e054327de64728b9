package ibtest

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibqueue"
)

// qp is one queue pair. Its lock is taken by posting goroutines and by its
// device's delivery goroutine (receives and RC outcomes).
type qp struct {
	num            ib.QPN
	typ            ib.QPType
	dev            *Device
	depth          int // MaxSend granted: RC messages awaiting their outcome
	sendCQ, recvCQ *cq
	srq            *srq               // nil: recv is the QP's own
	recv           *ibqueue.RecvQueue // where receives come from: the SRQ's or the QP's own
	ctr            [numQPCounters]atomic.Uint64

	mu    sync.Mutex
	state ib.QPState
	pkey  ib.PKey
	qkey  ib.QKey

	// Connected QPs: the peer named in RTR, the RNR retry count of RTS.
	destGID  ib.GID
	destQPN  ib.QPN
	rnrRetry uint8

	sent    []sendEntry // RC: posted, outcome not yet known, oldest first
	nextSeq uint64      // RC: sequence number of the next message; never reset
	stalled []*packet   // RC responder: messages waiting for a receive buffer
}

// sendEntry is an RC send awaiting the peer's outcome.
type sendEntry struct {
	id  uint64
	seq uint64
}

type qpCounter int

const (
	qpTxMessages qpCounter = iota
	qpTxBytes
	qpRxMessages
	qpRxBytes
	qpRNRWaits
	numQPCounters
)

var qpCounterNames = [numQPCounters]string{
	qpTxMessages: "tx_messages",
	qpTxBytes:    "tx_bytes",
	qpRxMessages: "rx_messages",
	qpRxBytes:    "rx_bytes",
	qpRNRWaits:   "rnr_waits",
}

func (q *qp) Num() ib.QPN     { return q.num }
func (q *qp) MaxSend() int    { return q.depth }
func (q *qp) Type() ib.QPType { return q.typ }

func (q *qp) Counters() []ib.Counter {
	out := make([]ib.Counter, numQPCounters)
	for k := range numQPCounters {
		out[k] = ib.Counter{Name: qpCounterNames[k], Value: q.ctr[k].Load()}
	}
	return out
}

// Modify performs the verbs state transitions Reset→Init→RTR→RTS and the
// move to Error (or back to Reset) from any state.
func (q *qp) Modify(m ib.QPModify) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	err := ibqueue.CheckModify("ibtest", q.num, q.typ, q.state, &m)
	if err != nil {
		return err
	}
	switch m.State {
	case ib.StateInit:
		if !m.PKey.Valid() || !q.dev.inTable(m.PKey) {
			return errorf("modify QP %v to INIT: P_Key %v is not in the port's table %v", q.num, m.PKey, q.dev.port.PKeys)
		}
		q.pkey, q.qkey = m.PKey, m.QKey
	case ib.StateRTR:
		if q.typ != ib.UD {
			if m.DestGID == (ib.GID{}) || m.DestGID.IsMulticast() {
				return errorf("modify QP %v to RTR: destination GID %v", q.num, m.DestGID)
			}
			q.destGID, q.destQPN = m.DestGID, m.DestQPN
		}
	case ib.StateRTS:
		q.rnrRetry = min(m.RNRRetry, 7)
	case ib.StateError, ib.StateReset:
		q.fail(ib.WCFlushError)
		if m.State == ib.StateReset {
			q.state, q.sent = ib.StateReset, q.sent[:0]
		}
		return nil
	}
	q.state = m.State
	return nil
}

// State returns the QP's state.
func (q *qp) State() ib.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

// PostSend sends at once. UD and UC sends complete as they leave; an RC
// send completes when its outcome comes back from the peer.
func (q *qp) PostSend(wrs []ib.SendWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != ib.StateRTS {
		return 0, ib.ErrBadState
	}
	defer q.sendCQ.Signal()
	for i := range wrs {
		wr := &wrs[i]
		buf, err := wr.SGE.Bytes()
		if err != nil {
			return i, err
		}
		if q.typ == ib.UD {
			q.sendUD(wr, buf)
			continue
		}
		if len(buf) > MaxMessage {
			return i, errorf("QP %v: a message of %d octets, more than %d", q.num, len(buf), MaxMessage)
		}
		p := &packet{kind: kindUC, sgid: q.dev.port.GID, dgid: q.destGID, srcQPN: q.num, dstQPN: q.destQPN,
			pkey: q.pkey, data: slices.Clone(buf)}
		if q.typ == ib.RC {
			if len(q.sent) >= q.depth {
				if i == 0 {
					return 0, ib.ErrQueueFull
				}
				return i, nil
			}
			p.kind, p.from, p.seq, p.rnrRetry = kindRC, q, q.nextSeq, q.rnrRetry
			q.sent = append(q.sent, sendEntry{id: wr.ID, seq: q.nextSeq})
			q.nextSeq++
		}
		q.countTx(len(buf))
		q.dev.fab.send(p)
		if q.typ == ib.UC {
			q.sendCQ.Push(&ib.Completion{ID: wr.ID, Status: ib.WCSuccess, Opcode: ib.WCSend, QPN: q.num})
		}
	}
	return len(wrs), nil
}

func (q *qp) countTx(n int) {
	q.ctr[qpTxMessages].Add(1)
	q.ctr[qpTxBytes].Add(uint64(n))
	q.dev.count(txMessages)
	q.dev.ctr[txBytes].Add(uint64(n))
}

// sendUD sends one datagram. q.mu is held.
func (q *qp) sendUD(wr *ib.SendWR, buf []byte) {
	status := ib.WCSuccess
	dest, ok := wr.AH.(*ah)
	switch {
	case !ok || dest.dev != q.dev:
		status = ib.WCLocalQPError
	case len(buf) > q.dev.port.ActiveMTU.Bytes():
		status = ib.WCLocalLengthError
	default:
		p := &packet{kind: kindUD, sgid: q.dev.port.GID, dgid: dest.attr.DestGID, srcQPN: q.num,
			dstQPN: wr.RemoteQPN & ib.QPNMask, pkey: q.pkey, qkey: wr.RemoteQKey, data: slices.Clone(buf)}
		if p.dgid.IsMulticast() {
			p.dstQPN = ib.MulticastQPN
		}
		q.dev.route(p, dest.attr.Path)
		q.countTx(len(buf))
		q.dev.fab.send(p)
	}
	q.sendCQ.Push(&ib.Completion{ID: wr.ID, Status: status, Opcode: ib.WCSend, QPN: q.num})
}

// acked completes the RC sends up to seq with the peer's outcome
// (delivery goroutine). An outcome for a message no longer outstanding
// (flushed, or from before a Reset) means nothing.
func (q *qp) acked(seq uint64, status ib.WCStatus) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != ib.StateRTS || !slices.ContainsFunc(q.sent, func(e sendEntry) bool { return e.seq == seq }) {
		return
	}
	if status != ib.WCSuccess {
		q.fail(status)
		return
	}
	k := 0
	for k < len(q.sent) && q.sent[k].seq <= seq {
		q.sendCQ.Push(&ib.Completion{ID: q.sent[k].id, Status: ib.WCSuccess, Opcode: ib.WCSend, QPN: q.num})
		k++
	}
	q.sent = slices.Delete(q.sent, 0, k)
	q.dev.touch(q.sendCQ)
}

// PostRecv queues receive buffers on the QP's own receive queue.
func (q *qp) PostRecv(wrs []ib.RecvWR) (int, error) {
	if q.srq != nil {
		return 0, errorf("QP %v receives from an SRQ", q.num)
	}
	if q.State() == ib.StateError {
		return 0, ib.ErrBadState
	}
	n, err := q.recv.PostRecv(wrs)
	if n > 0 {
		q.dev.kick()
	}
	return n, err
}

func (q *qp) takeRecv() (ib.RecvWR, bool) {
	wr, ok, _ := q.recv.Take()
	return wr, ok
}

// receiving reports whether the QP takes traffic now: in RTR or RTS, of
// its own partition. What it does not take is counted. q.mu is held.
func (q *qp) receiving(pkey ib.PKey) bool {
	cause, ok := ibqueue.Admit(q.state, q.pkey, pkey)
	if !ok {
		q.dev.count(cause)
	}
	return ok
}

// recvUD lands a datagram in the next posted buffer behind a GRH, as
// verbs does (delivery goroutine).
func (q *qp) recvUD(p *packet) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.dev
	if !q.receiving(p.pkey) {
		return
	}
	if p.qkey != q.qkey {
		d.count(ibqueue.DropQKey)
		return
	}
	wr, buf, ok := q.takeFor(ib.GRHLen + len(p.data))
	if !ok {
		return
	}
	sgid := p.sgid
	if p.slid != 0 && !p.grh {
		sgid = ib.GID{} // no GRH: the LID is all the fabric shows
		clear(buf[:ib.GRHLen])
	} else {
		writeGRH(buf[:ib.GRHLen], len(p.data), p.sgid, p.dgid)
	}
	copy(buf[ib.GRHLen:], p.data)
	q.ctr[qpRxMessages].Add(1)
	q.ctr[qpRxBytes].Add(uint64(len(p.data)))
	q.recvCQ.Push(&ib.Completion{
		ID: wr.ID, Status: ib.WCSuccess, Opcode: ib.WCRecv, QPN: q.num,
		ByteLen: uint32(ib.GRHLen + len(p.data)),
		SrcQPN:  p.srcQPN, SrcGID: sgid, PKey: p.pkey,
		SrcLID: p.slid, SL: p.sl, GRH: p.slid != 0 && p.grh,
	})
	d.touch(q.recvCQ)
}

// writeGRH fills the 40-octet global route header area of a UD receive:
// IP version 6, payload length, next header IBA transport, hop limit, and
// the source and destination GIDs.
func writeGRH(b []byte, payloadLen int, sgid, dgid ib.GID) {
	clear(b[:8])
	b[0] = 0x60
	b[4], b[5] = byte(payloadLen>>8), byte(payloadLen)
	b[6] = 0x1b
	b[7] = 64
	copy(b[8:24], sgid[:])
	copy(b[24:40], dgid[:])
}

// recvConnected takes an RC or UC message (delivery goroutine). An RC
// message the QP cannot take fails its sender as a real requester would
// after its retries.
func (q *qp) recvConnected(p *packet) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.dev
	if !q.receiving(p.pkey) {
		p.nack(ib.WCRetryExceeded)
		return
	}
	if p.sgid != q.destGID {
		d.count(ibqueue.DropWrongSource)
		p.nack(ib.WCRetryExceeded)
		return
	}
	if q.typ == ib.UC {
		q.recvUC(p)
		return
	}
	if len(q.stalled) > 0 {
		q.stalled = append(q.stalled, p) // behind those waiting: RC keeps order
		return
	}
	if !q.landRC(p) {
		q.stallRC(p)
	}
}

// recvUC lands a UC message, or loses it when there is no room.
func (q *qp) recvUC(p *packet) {
	if wr, buf, ok := q.takeFor(len(p.data)); ok {
		q.complete(wr, copy(buf, p.data))
	}
}

// takeFor takes the receive buffer a message of n octets lands in; it
// counts the message dropped when none is posted or the next is too
// small (which stays posted). q.mu is held.
func (q *qp) takeFor(n int) (ib.RecvWR, []byte, bool) {
	wr, ok := q.takeRecv()
	if !ok {
		q.dev.count(ibqueue.DropNoRecv)
		return wr, nil, false
	}
	buf, _ := wr.SGE.Bytes() // checked when posted
	if len(buf) < n {
		q.recv.Untake(wr)
		q.dev.count(ibqueue.DropTooLong)
		return wr, nil, false
	}
	return wr, buf, true
}

// landRC lands an RC message and tells its sender; it reports false when
// no receive buffer is posted. q.mu is held.
func (q *qp) landRC(p *packet) bool {
	wr, ok := q.takeRecv()
	if !ok {
		return false
	}
	buf, _ := wr.SGE.Bytes()
	if len(buf) < len(p.data) {
		q.dev.count(ibqueue.DropTooLong)
		q.recvCQ.Push(&ib.Completion{ID: wr.ID, Status: ib.WCLocalLengthError, Opcode: ib.WCRecv, QPN: q.num})
		p.nack(ib.WCRemoteInvalidRequest)
		q.fail(ib.WCFlushError)
		return true
	}
	q.complete(wr, copy(buf, p.data))
	p.ack(ib.WCSuccess)
	return true
}

func (q *qp) complete(wr ib.RecvWR, n int) {
	q.ctr[qpRxMessages].Add(1)
	q.ctr[qpRxBytes].Add(uint64(n))
	q.recvCQ.Push(&ib.Completion{ID: wr.ID, Status: ib.WCSuccess, Opcode: ib.WCRecv, QPN: q.num, ByteLen: uint32(n)})
	q.dev.touch(q.recvCQ)
}

// stallRC keeps an RC message that found no receive buffer for a retry,
// or fails its sender when its RNR retries are used up. q.mu is held.
func (q *qp) stallRC(p *packet) {
	if p.rnrRetry != 7 {
		if p.rnrs >= p.rnrRetry {
			p.nack(ib.WCRNRRetryExceeded)
			return
		}
		p.rnrs++
	}
	q.ctr[qpRNRWaits].Add(1)
	q.stalled = append(q.stalled, p)
	q.dev.stall(q)
}

// retryStalled lands the messages waiting for receive buffers, in order
// (delivery goroutine).
func (q *qp) retryStalled() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != ib.StateRTR && q.state != ib.StateRTS {
		return // fail answered them
	}
	for len(q.stalled) > 0 {
		p := q.stalled[0]
		q.stalled[0] = nil
		q.stalled = q.stalled[1:]
		if !q.landRC(p) {
			rest := q.stalled
			q.stalled = nil
			q.stallRC(p)
			q.stalled = append(q.stalled, rest...)
			return
		}
	}
	q.stalled = nil
}

// destroy flushes the QP (Close, and its device's Close).
func (q *qp) destroy() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.fail(ib.WCFlushError)
}

// Close destroys the QP: outstanding work completes as flushed.
func (q *qp) Close() error {
	q.destroy()
	q.dev.removeQP(q)
	return nil
}

// fail moves the QP to Error: the oldest RC send completes with status,
// every other posted request with a flush error; messages waiting for a
// receive buffer fail their sender. q.mu is held.
func (q *qp) fail(status ib.WCStatus) {
	if q.state == ib.StateError {
		return
	}
	q.state = ib.StateError
	for k, e := range q.sent {
		st := ib.WCFlushError
		if k == 0 {
			st = status
		}
		q.sendCQ.Push(&ib.Completion{ID: e.id, Status: st, Opcode: ib.WCSend, QPN: q.num})
	}
	q.sent = q.sent[:0]
	q.sendCQ.Signal()
	for _, p := range q.stalled {
		p.nack(ib.WCRetryExceeded)
	}
	q.stalled = nil
	if q.srq == nil {
		q.recv.Drain(func(wr ib.RecvWR) {
			q.recvCQ.Push(&ib.Completion{ID: wr.ID, Status: ib.WCFlushError, Opcode: ib.WCRecv, QPN: q.num})
		})
	}
	q.recvCQ.Signal()
}
