//go:build rdma

package verbs

/*
#include <errno.h>
#include <stdlib.h>
#include <infiniband/verbs.h>

#define IPOIBD_POLL_BATCH 64

struct ipoibd_cq_events {
	int events; // completion events taken and acknowledged (0 or 1)
	int err;    // errno of ibv_get_cq_event other than EAGAIN
};

// Takes the event pending on the CQ's own channel, if any, and
// acknowledges it. A CQ raises one event per arm and is not armed again
// before this returns, so one read finds all there is.
static struct ipoibd_cq_events ipoibd_cq_events(struct ibv_comp_channel *ch, struct ibv_cq *cq) {
	struct ipoibd_cq_events r = {0, 0};
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0) {
		r.events = 1;
		ibv_ack_cq_events(cq, 1);
	} else if (errno != EAGAIN && errno != EWOULDBLOCK) {
		r.err = errno ? errno : EIO;
	}
	return r;
}
*/
import "C"

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
)

const pollBatch = C.IPOIBD_POLL_BATCH

// cq is a completion queue with its own completion channel. It implements
// ib.CQ.
type cq struct {
	dev   *Device
	cq    *C.struct_ibv_cq
	ch    *C.struct_ibv_comp_channel
	wcs   *[pollBatch]C.struct_ibv_wc // C memory ibv_poll_cq fills
	ready chan struct{}
	// handler, if set, is run instead of signalling ready (ib.CQHandler).
	handler atomic.Pointer[func()]
	// armed: the CQ raises an event for its next completion, or one is
	// on its way to drainEvents. Without a handler the CQ is armed only
	// when its consumer asks (Ready).
	armed atomic.Bool
	taken atomic.Uint64 // polls that found completions (runHandler's busy poll)
	watch *fdWatcher
	users atomic.Int32 // QPs created on it

	mu      sync.Mutex // one poller at a time: wcs, pending
	closed  bool
	pending []ib.Completion // taken off the adapter or synthesised when a QP closed
}

// CreateCQ makes a completion queue and the goroutine that turns its
// completion events into Ready signals.
func (d *Device) CreateCQ(size int) (ib.CQ, error) {
	if d.closed.Load() {
		return nil, ib.ErrClosed
	}
	size = min(max(size, 1), max(d.limits.maxCQE, 1))
	c := &cq{dev: d, ready: make(chan struct{}, 1)}
	ch, err := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return nil, verbError("ibv_create_comp_channel", cgoErrno(err))
	}
	c.ch = ch
	h, err := C.ibv_create_cq(d.ctx, C.int(size), nil, ch, 0)
	if h == nil {
		c.destroy()
		return nil, verbError(fmt.Sprintf("ibv_create_cq %d entries", size), cgoErrno(err))
	}
	c.cq = h
	if rc := C.ibv_req_notify_cq(h, 0); rc != 0 {
		c.destroy()
		return nil, verbError("ibv_req_notify_cq", errnoValue(rc))
	}
	c.armed.Store(true)
	c.wcs = (*[pollBatch]C.struct_ibv_wc)(C.malloc(C.size_t(pollBatch) * C.sizeof_struct_ibv_wc))
	if c.watch, err = watchFD(int(ch.fd), d.cfg.Device+" CQ events", c.drainEvents); err != nil {
		c.destroy()
		return nil, err
	}
	if !d.track(func() { d.cqs[c] = struct{}{} }) {
		c.destroy()
		return nil, ib.ErrClosed
	}
	return c, nil
}

// drainEvents runs on the watcher's goroutine when the channel is
// readable. A CQ with a handler is drained and armed again at once
// (runHandler); one without is armed again when its consumer next waits
// (Ready).
func (c *cq) drainEvents() (stop bool) {
	r := C.ipoibd_cq_events(c.ch, c.cq)
	if r.err != 0 {
		c.dev.ctr.notifyErrors.Add(1)
	}
	c.dev.ctr.cqEvents.Add(uint64(r.events))
	if r.events > 0 || r.err != 0 {
		if h := c.handler.Load(); h != nil {
			c.runHandler(*h) // ib.CQHandler: the consumer drains here, no wake-up
		} else {
			c.armed.Store(false) // before the signal: the woken consumer's Ready arms
			c.signal()
		}
	}
	if r.err != 0 {
		slog.Error("verbs: reading CQ events failed; its consumer is no longer woken", "device", c.dev.cfg.Device, "err", errnoValue(r.err))
		return true
	}
	return false
}

// runHandler has the handler drain the CQ and arms it again. With
// Config.BusyPoll it first goes on polling for that long after the last
// completion it found: while completions keep coming, none of them costs an
// event and a wake-up. The handler runs once more after the arm, for what
// came between its last poll and the arm (an event comes only for later
// completions).
func (c *cq) runHandler(f func()) {
	f()
	if d := c.dev.cfg.BusyPoll; d > 0 {
		seen := c.taken.Load()
		for until := time.Now().Add(d); time.Now().Before(until); {
			runtime.Gosched() // the TUN readers may need this P
			f()
			if n := c.taken.Load(); n != seen {
				seen, until = n, time.Now().Add(d)
				c.dev.ctr.busyPollHits.Add(1)
			}
		}
	}
	c.arm()
	f()
}

func (c *cq) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// SetHandler implements ib.CQHandler: f runs on the CQ's event goroutine
// after each completion event, instead of a signal on Ready.
func (c *cq) SetHandler(f func()) { c.handler.Store(&f) }

// Ready returns the channel signalled after completions were added. A CQ
// without a handler (the send CQ) raises its event only when a consumer
// is about to wait: Ready arms it and signals at once, so that completions
// added before the arm are polled rather than waited for. A send that
// nobody waits for then costs no event: no thread wake-up and three system
// calls fewer (rxe) per send.
func (c *cq) Ready() <-chan struct{} {
	if c.handler.Load() == nil && c.armed.CompareAndSwap(false, true) {
		c.arm()
		c.signal()
	}
	return c.ready
}

// arm asks for an event at the CQ's next completion. If that fails, armed
// is cleared again: the consumer's next Ready retries (it polls in
// between), where a CQ left unarmed would never wake it.
func (c *cq) arm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if rc := C.ibv_req_notify_cq(c.cq, 0); rc != 0 {
		c.dev.ctr.notifyErrors.Add(1)
		c.armed.Store(false)
	}
}

// Poll moves up to len(wc) completions into wc: first those set aside when
// a QP closed, then the adapter's, in batches through the C array.
func (c *cq) Poll(wc []ib.Completion) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0
	}
	k := 0
	if len(c.pending) > 0 {
		k = copy(wc, c.pending)
		c.pending = c.pending[:copy(c.pending, c.pending[k:])]
	}
	for k < len(wc) {
		want := min(len(wc)-k, pollBatch)
		n := int(C.ibv_poll_cq(c.cq, C.int(want), &c.wcs[0]))
		if n < 0 {
			c.dev.ctr.pollErrors.Add(1)
			break
		}
		for i := range n {
			if c.convert(&c.wcs[i], &wc[k]) {
				k++
			}
		}
		if n < want {
			break
		}
	}
	if k > 0 {
		c.taken.Add(1)
	}
	return k
}

// convert fills out from one verbs completion; false for a stale one (of
// a QP that closed or reset), which is dropped.
func (c *cq) convert(w *C.struct_ibv_wc, out *ib.Completion) bool {
	raw := rawWC{
		wrID:      uint64(w.wr_id),
		status:    uint32(w.status),
		byteLen:   uint32(w.byte_len),
		qpNum:     uint32(w.qp_num),
		srcQP:     uint32(w.src_qp),
		pkeyIndex: uint16(w.pkey_index),
		slid:      uint16(w.slid),
		sl:        uint8(w.sl),
		grh:       w.wc_flags&C.IBV_WC_GRH != 0,
	}
	if !c.dev.reg.complete(&raw, c.dev.pkeyTable(), out) {
		c.dev.ctr.stale.Add(1)
		return false
	}
	switch out.Status {
	case ib.WCSuccess:
	case ib.WCFlushError:
		c.dev.ctr.flushed.Add(1)
	default:
		c.dev.ctr.bad.Add(1)
	}
	return true
}

// drainLocked moves everything the adapter completed into pending, so that
// destroying a QP (which lets some providers discard its completions)
// loses nothing. c.mu is held.
func (c *cq) drainLocked() {
	for {
		n := int(C.ibv_poll_cq(c.cq, pollBatch, &c.wcs[0]))
		if n <= 0 {
			return
		}
		for i := range n {
			var wc ib.Completion
			if c.convert(&c.wcs[i], &wc) {
				c.pending = append(c.pending, wc)
			}
		}
	}
}

// drain sets aside what the adapter completed so far (before a QP is
// destroyed).
func (c *cq) drain() {
	c.mu.Lock()
	n := len(c.pending)
	if !c.closed {
		c.drainLocked()
	}
	more := len(c.pending) > n
	c.mu.Unlock()
	if more {
		c.signal() // the consumer may have seen the event that brought them
	}
}

// retire ends a work queue's table after its QP was destroyed or reset:
// what the adapter completed is collected first, every request still
// outstanding completes as flushed, and later completions naming the table
// are stale.
func (c *cq) retire(t *wrTable) {
	c.mu.Lock()
	if !c.closed {
		c.drainLocked()
	}
	t.mu.Lock()
	t.retireLocked(func(e wrEntry) {
		wc := t.flushCompletion(e)
		c.dev.ctr.flushed.Add(1)
		if !c.closed {
			c.pending = append(c.pending, wc)
		}
	})
	t.mu.Unlock()
	c.dev.reg.remove(t)
	n := len(c.pending)
	c.mu.Unlock()
	if n > 0 {
		c.signal()
	}
}

// use counts a QP created on the CQ; false once it is closed.
func (c *cq) use() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.users.Add(1)
	return true
}

// Close destroys the CQ; its QPs must be closed first (Close waits for
// the destroys a QP's Close left running).
func (c *cq) Close() error {
	c.dev.destroys.wait()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	if n := c.users.Load(); n > 0 {
		c.mu.Unlock()
		return fmt.Errorf("verbs: CQ still used by %d QP(s); close them first", n)
	}
	c.closed = true
	c.pending = nil
	c.mu.Unlock()
	c.dev.untrack(func() { delete(c.dev.cqs, c) })
	return c.destroy()
}

// destroy stops the event goroutine, then frees the CQ before its channel
// (a channel cannot go while a CQ uses it).
func (c *cq) destroy() error {
	var err error
	if c.watch != nil {
		c.watch.stop()
		c.watch = nil
	}
	if c.cq != nil {
		if rc := C.ibv_destroy_cq(c.cq); rc != 0 {
			err = verbError("ibv_destroy_cq", errnoValue(rc))
		}
		c.cq = nil
	}
	if c.ch != nil {
		if rc := C.ibv_destroy_comp_channel(c.ch); rc != 0 && err == nil {
			err = verbError("ibv_destroy_comp_channel", errnoValue(rc))
		}
		c.ch = nil
	}
	if c.wcs != nil {
		C.free(unsafe.Pointer(c.wcs))
		c.wcs = nil
	}
	return err
}
