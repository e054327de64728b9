// Package ibqueue is the queue machinery the software providers share:
// softib (production) and ib/ibtest (tests) keep their work requests and
// completions in the same rings, so a fix to one is a fix to both. It
// holds the completion queue (CQ), the receive queue that serves both as
// a QP's own and as a shared receive queue (RecvQueue), the QP state
// transitions every provider allows (CheckModify), the registered memory
// region (MR), QP1's queue of received MADs (MADs, MADQueue) and the drop
// causes both count under the same names (Drop).
//
// Nothing here allocates per packet: the rings are fixed at creation and
// a completion is copied into its slot.
package ibqueue

import (
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
)

// CQ is a completion queue: a fixed ring filled by its provider (receive
// goroutine, posting goroutines, timers) and drained by its consumer. It
// implements ib.CQ and ib.CQHandler.
type CQ struct {
	mu      sync.Mutex
	ring    []ib.Completion
	head    int // next to poll
	n       int // entries in the ring
	ready   chan struct{}
	closed  bool
	overrun *atomic.Uint64         // counts completions lost to a full ring
	handler atomic.Pointer[func()] // ib.CQHandler: run by the provider's receive goroutine
}

var (
	_ ib.CQ        = (*CQ)(nil)
	_ ib.CQHandler = (*CQ)(nil)
)

// NewCQ makes a CQ of size entries (at least one); overruns counts the
// completions lost because the ring was full or the CQ closed.
func NewCQ(size int, overruns *atomic.Uint64) *CQ {
	return &CQ{ring: make([]ib.Completion, max(size, 1)), ready: make(chan struct{}, 1), overrun: overruns}
}

// Push adds one completion. A full CQ is an overrun: the completion is
// lost and counted, as a real adapter would raise a CQ error.
func (c *CQ) Push(wc *ib.Completion) {
	c.mu.Lock()
	if c.closed || c.n == len(c.ring) {
		c.mu.Unlock()
		c.overrun.Add(1)
		return
	}
	c.ring[(c.head+c.n)%len(c.ring)] = *wc
	c.n++
	c.mu.Unlock()
}

// Signal wakes the consumer; providers call it once per batch of pushes.
func (c *CQ) Signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// SetHandler implements ib.CQHandler.
func (c *CQ) SetHandler(f func()) { c.handler.Store(&f) }

// RunHandler runs the consumer's handler, if it set one. Only the
// provider's receive goroutine calls it, with no lock held: the handler
// posts receives and sends.
func (c *CQ) RunHandler() {
	if h := c.handler.Load(); h != nil {
		(*h)()
	}
}

// SignalUnlessHandled wakes a consumer that did not set a handler.
func (c *CQ) SignalUnlessHandled() {
	if c.handler.Load() == nil {
		c.Signal()
	}
}

// Poll implements ib.CQ.
func (c *CQ) Poll(wc []ib.Completion) int {
	c.mu.Lock()
	k := 0
	for k < len(wc) && c.n > 0 {
		wc[k] = c.ring[c.head]
		c.head = (c.head + 1) % len(c.ring)
		c.n--
		k++
	}
	c.mu.Unlock()
	return k
}

// Ready implements ib.CQ.
func (c *CQ) Ready() <-chan struct{} { return c.ready }

// Close implements ib.CQ: completions pushed from now on are overruns.
func (c *CQ) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}
