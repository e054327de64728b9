package softib

import (
	"net/netip"
	"sync"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibqueue"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// qp is one queue pair. Its lock is taken by posting goroutines (sends), by
// the device's receive goroutine (incoming data and ACKs) and by its timer.
type qp struct {
	dev    *Device
	num    ib.QPN
	typ    ib.QPType
	sendCQ *cq
	recvCQ *cq
	srq    *srq
	rq     *ibqueue.RecvQueue // own receive queue when there is no SRQ
	recv   *ibqueue.RecvQueue // where receives come from: the SRQ's or rq
	ctr    qpCounters

	mu    sync.Mutex
	state ib.QPState
	pkey  ib.PKey
	qkey  ib.QKey

	// Connected QPs: the remote end and the path.
	destGID  ib.GID
	destAddr netip.Addr
	destQPN  ib.QPN
	route    ibRoute // InfiniBand link: the path's LRH and GRH
	pmtu     int
	minRNR   uint8
	timeout  time.Duration // 0: ACK timeout disabled
	retryCnt uint8
	rnrRetry uint8

	req  requester
	resp responder
}

func (d *Device) newQP(num ib.QPN, attr ib.QPAttr) *qp {
	q := &qp{dev: d, num: num, typ: attr.Type, state: ib.StateReset}
	if c, ok := attr.SendCQ.(*cq); ok {
		q.sendCQ = c
	}
	if c, ok := attr.RecvCQ.(*cq); ok {
		q.recvCQ = c
	}
	if s, ok := attr.SRQ.(*srq); ok {
		q.srq, q.recv = s, s.RecvQueue
	} else {
		q.rq = ibqueue.NewRecvQueue(attr.MaxRecv, 0, false)
		q.recv = q.rq
	}
	q.req.depth = max(attr.MaxSend, 1)
	return q
}

func (q *qp) Num() ib.QPN            { return q.num }
func (q *qp) Type() ib.QPType        { return q.typ }
func (q *qp) Counters() []ib.Counter { return q.ctr.snapshot() }

// MaxSend is the depth asked for, at least 1: the ring grows to it on
// demand. (No field of its own: a QP is kept per connection.)
func (q *qp) MaxSend() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.req.depth
}

func (q *qp) State() ib.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

// Modify performs the verbs state transitions Reset→Init→RTR→RTS and the
// move to Error (or back to Reset) from any state.
func (q *qp) Modify(m ib.QPModify) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := ibqueue.CheckModify("softib", q.num, q.typ, q.state, &m); err != nil {
		return err
	}
	switch m.State {
	case ib.StateInit:
		pkey, ok := q.dev.tableKey(m.PKey)
		if !ok {
			return errorf("modify QP %v to INIT: P_Key %v is not in the port's table %v", q.num, m.PKey, q.dev.port.PKeys)
		}
		q.pkey, q.qkey = pkey, m.QKey
	case ib.StateRTR:
		if q.typ != ib.UD {
			a := m.DestGID.Addr()
			if q.dev.ibp != nil {
				if !wire.IsUnicastLID(m.Path.DLID) {
					return errorf("modify QP %v to RTR: destination LID %#x is not a unicast LID", q.num, m.Path.DLID)
				}
				q.route, a = q.dev.route(m.Path, m.DestGID), q.dev.ibp.cfg.Forwarder.Addr()
			} else if !a.IsValid() || a.Is4() != q.dev.fab.v4 || m.DestGID.IsMulticast() {
				return errorf("modify QP %v to RTR: destination GID %v is not reachable on this underlay", q.num, m.DestGID)
			}
			q.destGID, q.destAddr, q.destQPN = m.DestGID, a, m.DestQPN
			q.pmtu = min(m.PathMTU, q.dev.port.ActiveMTU).Bytes()
			q.minRNR = m.MinRNRTmr & 31
			q.resp.epsn = wire.PSN(m.RecvPSN) & wire.PSNMask
		}
	case ib.StateRTS:
		q.timeout = wire.LocalACKTimeout(m.Timeout)
		q.retryCnt, q.rnrRetry = min(m.RetryCount, 7), min(m.RNRRetry, 7)
		q.req.start(wire.PSN(m.SendPSN) & wire.PSNMask)
	case ib.StateError:
		q.fail(ib.WCFlushError)
		return nil
	case ib.StateReset:
		q.fail(ib.WCFlushError)
		q.state = ib.StateReset
		q.req = requester{sq: q.req.sq, depth: q.req.depth}
		q.resp = responder{}
		return nil
	}
	q.state = m.State
	return nil
}

// PostRecv queues receive buffers on the QP's own receive queue.
func (q *qp) PostRecv(wrs []ib.RecvWR) (int, error) {
	if q.rq == nil {
		return 0, errorf("QP %v receives from an SRQ", q.num)
	}
	q.mu.Lock()
	st := q.state
	q.mu.Unlock()
	if st == ib.StateError {
		return 0, ib.ErrBadState
	}
	return q.rq.PostRecv(wrs)
}

// takeRecv returns the next receive buffer for this QP.
func (q *qp) takeRecv() (ib.RecvWR, bool) {
	wr, ok, low := q.recv.Take()
	if low {
		q.dev.recvLow.Store(true)
	}
	return wr, ok
}

// Close destroys the QP: outstanding work completes as flushed.
func (q *qp) Close() error {
	q.destroy()
	q.dev.removeQP(q)
	return nil
}

func (q *qp) destroy() {
	q.mu.Lock()
	q.fail(ib.WCFlushError)
	q.mu.Unlock()
}

// fail moves the QP to Error: the oldest send completes with status (unless
// it is a plain flush), every other posted request with a flush error.
// q.mu is held.
func (q *qp) fail(status ib.WCStatus) {
	if q.state == ib.StateError {
		return
	}
	q.state = ib.StateError
	q.req.stopTimer()
	first := true
	for q.req.n > 0 {
		e := q.req.pop()
		st := ib.WCFlushError
		if first {
			st = status
			first = false
		}
		q.sendCQ.Push(&ib.Completion{ID: e.wr.ID, Status: st, Opcode: ib.WCSend, QPN: q.num})
	}
	q.sendCQ.Signal()
	if q.resp.haveCur {
		q.recvCQ.Push(&ib.Completion{ID: q.resp.cur.ID, Status: ib.WCFlushError, Opcode: ib.WCRecv, QPN: q.num})
		q.resp.haveCur = false
	}
	if q.rq != nil {
		q.rq.Drain(func(wr ib.RecvWR) {
			q.recvCQ.Push(&ib.Completion{ID: wr.ID, Status: ib.WCFlushError, Opcode: ib.WCRecv, QPN: q.num})
		})
	}
	q.recvCQ.Signal()
}
