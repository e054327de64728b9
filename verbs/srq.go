//go:build rdma

package verbs

/*
#include <infiniband/verbs.h>
*/
import "C"

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
)

// srq is a shared receive queue. It implements ib.SRQ.
type srq struct {
	dev     *Device
	srq     *C.struct_ibv_srq
	rq      *recvQueue
	stats   queueStats
	maxWR   int
	limitCh chan struct{}
	users   atomic.Int32       // QPs created on it
	cq      atomic.Pointer[cq] // a receive CQ of its QPs: where Close flushes

	mu     sync.Mutex
	closed bool
}

// CreateSRQ makes a shared receive queue and arms its limit. The limit
// event arrives on the device's async event goroutine.
func (d *Device) CreateSRQ(attr ib.SRQAttr) (ib.SRQ, error) {
	if attr.MaxWR < 1 {
		return nil, fmt.Errorf("verbs: SRQ depth %d", attr.MaxWR)
	}
	if d.closed.Load() {
		return nil, ib.ErrClosed
	}
	var ia C.struct_ibv_srq_init_attr
	ia.attr.max_wr = C.uint32_t(min(attr.MaxWR, max(d.limits.maxSRQWR, 1)))
	ia.attr.max_sge = 1
	h, err := C.ibv_create_srq(d.pd, &ia)
	if h == nil {
		return nil, verbError(fmt.Sprintf("ibv_create_srq %d entries", ia.attr.max_wr), cgoErrno(err))
	}
	s := &srq{dev: d, srq: h, maxWR: int(ia.attr.max_wr), limitCh: make(chan struct{}, 1)}
	t := newWRTable(s.maxWR, wrOwner{recv: true, stats: &s.stats})
	if err := d.reg.add(t); err != nil {
		C.ibv_destroy_srq(h)
		return nil, err
	}
	if s.rq, err = newRecvQueue(d, nil, h, t); err != nil {
		d.reg.remove(t)
		C.ibv_destroy_srq(h)
		return nil, err
	}
	if !d.track(func() { d.srqs[h] = s }) {
		s.destroy()
		return nil, ib.ErrClosed
	}
	if attr.Limit > 0 {
		s.armAdapter(attr.Limit)
	}
	return s, nil
}

// PostRecv queues receive buffers.
func (s *srq) PostRecv(wrs []ib.RecvWR) (int, error) { return s.rq.post(wrs) }

// LimitReached is signalled when the posted count fell below the limit.
func (s *srq) LimitReached() <-chan struct{} { return s.limitCh }

// Posted returns the receives posted and not yet completed (the CQ poll
// path frees their entries).
func (s *srq) Posted() int { return s.rq.outstanding() }

// Arm sets a new limit; verbs disarms the limit each time it fires. If the
// queue is already below the limit the signal comes at once, since the
// adapter only checks when it consumes a receive.
func (s *srq) Arm(limit int) {
	limit = min(max(limit, 0), s.maxWR)
	s.armAdapter(limit)
	if limit > 0 && s.Posted() < limit {
		s.signalLimit()
	}
}

func (s *srq) armAdapter(limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	var a C.struct_ibv_srq_attr
	a.srq_limit = C.uint32_t(min(limit, s.maxWR))
	if rc := C.ibv_modify_srq(s.srq, &a, C.IBV_SRQ_LIMIT); rc != 0 {
		s.dev.ctr.armErrors.Add(1)
		slog.Warn("verbs: arming the SRQ limit failed", "device", s.dev.cfg.Device, "limit", limit, "err", errnoValue(rc))
	}
}

func (s *srq) signalLimit() {
	select {
	case s.limitCh <- struct{}{}:
	default:
	}
}

// use counts a QP created on the SRQ; false once it is closed.
func (s *srq) use() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.users.Add(1)
	return true
}

// Close destroys the SRQ; its QPs must be closed first (Close waits for
// the destroys a QP's Close left running). Posted buffers complete as
// flushed on the receive CQ its QPs used, if that is still open.
func (s *srq) Close() error {
	s.dev.destroys.wait() // QPs closed on it whose destroy is under way
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	if n := s.users.Load(); n > 0 {
		s.mu.Unlock()
		return fmt.Errorf("verbs: SRQ still used by %d QP(s); close them first", n)
	}
	s.closed = true
	s.mu.Unlock()
	s.dev.untrack(func() { delete(s.dev.srqs, s.srq) })
	return s.destroy()
}

func (s *srq) destroy() error {
	t := s.rq.close()
	rc := C.ibv_destroy_srq(s.srq)
	if c := s.cq.Load(); c != nil {
		c.retire(t)
	} else {
		t.mu.Lock()
		t.retireLocked(func(e wrEntry) { t.flushCompletion(e) })
		t.mu.Unlock()
		s.dev.reg.remove(t)
	}
	if rc != 0 {
		return verbError("ibv_destroy_srq", errnoValue(rc))
	}
	return nil
}
