//go:build rdma

package verbs

/*
#include <stdlib.h>
#include <infiniband/verbs.h>

// The adapter's view of the QP state, or -errno.
static int ipoibd_qp_state(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
	return rc ? -rc : (int)a.qp_state;
}
*/
import "C"

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
)

// qp is a queue pair. It implements ib.QP.
type qp struct {
	dev    *Device
	qp     *C.struct_ibv_qp
	num    ib.QPN
	typ    ib.QPType
	sendCQ *cq
	recvCQ *cq
	srq    *srq       // or nil
	rq     *recvQueue // own receive queue; nil with an SRQ
	pkey   atomic.Uint32

	maxSend    int        // send queue depth granted (ibv_create_qp's cap.max_send_wr)
	maxInline  int        // sends of at most this many octets go inline (0: none)
	sendMu     sync.Mutex // serialises sends: send, stage, sendClosed
	send       *wrTable
	stage      *sendStage
	sendClosed bool

	sendStats, recvStats queueStats
	asyncErrors          atomic.Uint64

	mu     sync.Mutex // Modify, State, Close, multicast
	state  ib.QPState // last state set (the adapter may have moved to ERROR since)
	closed bool
	groups map[ib.GID]attachment // attached multicast GIDs (as sent on the wire)

	// lastWQE is closed when IBV_EVENT_QP_LAST_WQE_REACHED names the QP
	// (made for QPs on an SRQ only; drain.go).
	lastWQE     chan struct{}
	lastWQEOnce sync.Once
}

// inlineWanted is the largest UD send asked to go inline: an IPoIB TCP ACK
// (4 + 20 + 32 octets) or a default ping (4 + 84) fits, with room for
// IPv6's longer header. Connected QPs ask for none: inline data makes
// every send queue entry larger (on mlx5 a connection's 256 entries from
// 16 to 48 KiB of pinned memory), and there may be thousands of them; the
// UD QP is one per interface.
const inlineWanted = 128

var qpTypes = map[ib.QPType]C.enum_ibv_qp_type{ib.RC: C.IBV_QPT_RC, ib.UC: C.IBV_QPT_UC, ib.UD: C.IBV_QPT_UD}

// CreateQP makes a queue pair in the Reset state on the given CQs and SRQ.
func (d *Device) CreateQP(attr ib.QPAttr) (ib.QP, error) {
	qt, ok := qpTypes[attr.Type]
	if !ok {
		return nil, fmt.Errorf("verbs: QP type %v", attr.Type)
	}
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq.dev != d || rcq.dev != d {
		return nil, errForeignCQ
	}
	var s *srq
	if attr.SRQ != nil {
		if s, ok = attr.SRQ.(*srq); !ok || s.dev != d {
			return nil, errForeignSRQ
		}
	}
	if d.closed.Load() {
		return nil, ib.ErrClosed
	}
	q := &qp{dev: d, typ: attr.Type, sendCQ: scq, recvCQ: rcq, srq: s}
	if s != nil {
		q.lastWQE = make(chan struct{})
	}
	if !q.hold() {
		return nil, ib.ErrClosed
	}
	var ia C.struct_ibv_qp_init_attr
	ia.send_cq, ia.recv_cq, ia.qp_type = scq.cq, rcq.cq, qt
	ia.cap.max_send_wr = C.uint32_t(min(max(attr.MaxSend, 1), d.limits.maxQPWR))
	ia.cap.max_send_sge = 1
	if s != nil {
		ia.srq = s.srq
	} else {
		ia.cap.max_recv_wr = C.uint32_t(min(max(attr.MaxRecv, 1), d.limits.maxQPWR))
		ia.cap.max_recv_sge = 1
	}
	// Small UD sends (TCP ACKs, pings, ARP) go inline: the adapter takes
	// the octets with the work request instead of reading them from
	// memory afterwards. An adapter that offers no inline data refuses
	// the QP; it is made again without.
	asked := 0
	if attr.Type == ib.UD {
		asked = inlineWanted
	}
	ia.cap.max_inline_data = C.uint32_t(asked)
	h, err := C.ibv_create_qp(d.pd, &ia)
	if h == nil && asked > 0 {
		asked, ia.cap.max_inline_data = 0, 0
		h, err = C.ibv_create_qp(d.pd, &ia)
	}
	if h == nil {
		q.unhold()
		return nil, verbError("ibv_create_qp "+attr.Type.String(), cgoErrno(err))
	}
	q.qp, q.num = h, ib.QPN(h.qp_num)
	// ia.cap now holds the depths and the inline size the adapter granted
	// (which may exceed what was asked: rxe grants its entry's size).
	q.maxSend = int(ia.cap.max_send_wr)
	q.maxInline = min(int(ia.cap.max_inline_data), asked)
	if err := q.setup(int(ia.cap.max_send_wr), int(ia.cap.max_recv_wr)); err != nil {
		q.destroy()
		return nil, err
	}
	if !d.track(func() { d.qps[q] = struct{}{}; d.qpByNum[uint32(q.num)] = q }) {
		q.destroy()
		return nil, ib.ErrClosed
	}
	if s != nil {
		s.cq.CompareAndSwap(nil, rcq)
	}
	return q, nil
}

// hold counts the QP as a user of its CQs and SRQ, which refuse to close
// while it exists.
func (q *qp) hold() bool {
	if !q.sendCQ.use() {
		return false
	}
	if !q.recvCQ.use() {
		q.sendCQ.users.Add(-1)
		return false
	}
	if q.srq != nil && !q.srq.use() {
		q.sendCQ.users.Add(-1)
		q.recvCQ.users.Add(-1)
		return false
	}
	return true
}

func (q *qp) unhold() {
	q.sendCQ.users.Add(-1)
	q.recvCQ.users.Add(-1)
	if q.srq != nil {
		q.srq.users.Add(-1)
	}
}

// setup makes the work request tables and staging memory.
func (q *qp) setup(maxSend, maxRecv int) error {
	var err error
	if q.stage, err = newSendStage(); err != nil {
		return err
	}
	q.send = newWRTable(maxSend, wrOwner{qpn: q.num, stats: &q.sendStats})
	if err := q.dev.reg.add(q.send); err != nil {
		return err
	}
	if q.srq != nil {
		return nil
	}
	t := newWRTable(maxRecv, wrOwner{recv: true, ud: q.typ == ib.UD, qpn: q.num, stats: &q.recvStats, pkey: &q.pkey})
	if err := q.dev.reg.add(t); err != nil {
		return err
	}
	q.rq, err = newRecvQueue(q.dev, q.qp, nil, t)
	if err != nil {
		q.dev.reg.remove(t)
	}
	return err
}

// destroy undoes a CreateQP that failed half-way.
func (q *qp) destroy() {
	C.ibv_destroy_qp(q.qp)
	if q.send != nil {
		q.dev.reg.remove(q.send)
	}
	if q.stage != nil {
		C.free(unsafe.Pointer(q.stage))
	}
	if q.rq != nil {
		q.dev.reg.remove(q.rq.close())
	}
	q.unhold()
}

func (q *qp) Num() ib.QPN     { return q.num }
func (q *qp) Type() ib.QPType { return q.typ }
func (q *qp) MaxSend() int    { return q.maxSend }

// State returns the adapter's view of the state (it moves a QP to ERROR
// on its own when a transport error ends the connection).
func (q *qp) State() ib.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return q.state
	}
	return q.queryStateLocked()
}

func (q *qp) queryStateLocked() ib.QPState {
	rc := C.ipoibd_qp_state(q.qp)
	switch rc {
	case C.IBV_QPS_RESET:
		q.state = ib.StateReset
	case C.IBV_QPS_INIT:
		q.state = ib.StateInit
	case C.IBV_QPS_RTR:
		q.state = ib.StateRTR
	case C.IBV_QPS_RTS, C.IBV_QPS_SQD:
		q.state = ib.StateRTS
	case C.IBV_QPS_SQE, C.IBV_QPS_ERR:
		q.state = ib.StateError
	}
	return q.state
}

// PostRecv queues receive buffers on the QP's own receive queue.
func (q *qp) PostRecv(wrs []ib.RecvWR) (int, error) {
	if q.rq == nil {
		return 0, errHasSRQ
	}
	return q.rq.post(wrs)
}

// Close destroys the QP. Outstanding work completes as flushed: the QP
// moves to ERROR, what the adapter completed is taken off the CQs before
// the QP goes (some providers discard a destroyed QP's completions), and
// the provider completes whatever is left. A QP on an SRQ is destroyed
// only after its IBV_EVENT_QP_LAST_WQE_REACHED (or lastWQETimeout): Close
// returns once it is in ERROR and its completions so far are taken, and
// the destroy finishes in the background (drain.go). The SRQ, the CQs and
// the device wait for it when they close.
func (q *qp) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.sendMu.Lock()
	q.sendClosed = true
	q.sendMu.Unlock()
	var recvTab *wrTable
	if q.rq != nil {
		recvTab = q.rq.close()
	}
	st := q.queryStateLocked()
	if st != ib.StateReset && st != ib.StateError {
		_ = q.moveTo(C.IBV_QPS_ERR)
	}
	q.state = ib.StateError
	// The kernel refuses to destroy a QP that is still attached to a group.
	q.detachAllLocked()
	q.sendCQ.drain()
	q.recvCQ.drain()
	await := awaitsLastWQE(q.srq != nil, st != ib.StateReset, q.dev.closed.Load())
	if await {
		q.dev.destroys.add()
	}
	q.mu.Unlock()
	if !await {
		return q.destroyClosed(recvTab)
	}
	go func() {
		defer q.dev.destroys.done()
		if !waitLastWQE(q.lastWQE, lastWQETimeout) {
			q.dev.ctr.lastWQETimeouts.Add(1)
			slog.Warn("verbs: no LAST_WQE_REACHED event for a closed QP on the SRQ; destroying it anyway",
				"device", q.dev.cfg.Device, "qpn", q.num, "waited", lastWQETimeout)
		}
		if err := q.destroyClosed(nil); err != nil {
			slog.Warn("verbs: destroying a closed QP", "device", q.dev.cfg.Device, "qpn", q.num, "err", err)
		}
	}()
	return nil
}

// reachedLastWQE records the QP's IBV_EVENT_QP_LAST_WQE_REACHED.
func (q *qp) reachedLastWQE() {
	if q.lastWQE == nil {
		return
	}
	q.lastWQEOnce.Do(func() { close(q.lastWQE) })
}

// destroyClosed destroys a closed QP, after taking what its CQs hold, and
// completes as flushed what its own queues still had.
func (q *qp) destroyClosed(recvTab *wrTable) error {
	q.mu.Lock()
	q.sendCQ.drain()
	q.recvCQ.drain()
	rc := C.ibv_destroy_qp(q.qp)
	q.mu.Unlock()

	q.sendCQ.retire(q.send)
	if recvTab != nil {
		q.recvCQ.retire(recvTab)
	}
	C.free(unsafe.Pointer(q.stage))
	q.stage = nil
	q.unhold()
	q.dev.untrack(func() {
		delete(q.dev.qps, q)
		if q.dev.qpByNum[uint32(q.num)] == q {
			delete(q.dev.qpByNum, uint32(q.num))
		}
	})
	if rc != 0 {
		return verbError(fmt.Sprintf("ibv_destroy_qp %v", q.num), errnoValue(rc))
	}
	return nil
}

// Counters returns what the provider counted for this QP. Receives through
// an SRQ are counted on the SRQ, not here.
func (q *qp) Counters() []ib.Counter {
	out := append(q.sendStats.counters("send_"), q.recvStats.counters("recv_")...)
	return append(out, ib.Counter{Name: "async_errors", Value: q.asyncErrors.Load()})
}

// QPCounterNames names the counters every QP reports (ib.QPCounterNamer),
// in the order of qp.Counters.
func (d *Device) QPCounterNames() []string {
	var q qp
	var names []string
	for _, c := range q.Counters() {
		names = append(names, c.Name)
	}
	return names
}
