package softib

import (
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
)

// cq is a completion queue: a fixed ring filled by the device (receive
// goroutine, posting goroutines, timers) and drained by its consumer.
type cq struct {
	mu      sync.Mutex
	ring    []ib.Completion
	head    int // next to poll
	n       int // entries in the ring
	ready   chan struct{}
	closed  bool
	dev     *Device
	handler atomic.Pointer[func()] // ib.CQHandler: run by the receive goroutine
}

func newCQ(dev *Device, size int) *cq {
	if size < 1 {
		size = 1
	}
	return &cq{ring: make([]ib.Completion, size), ready: make(chan struct{}, 1), dev: dev}
}

// push adds one completion. A full CQ is an overrun: the completion is lost
// and counted, as a real adapter would raise a CQ error.
func (c *cq) push(wc *ib.Completion) {
	c.mu.Lock()
	if c.closed || c.n == len(c.ring) {
		c.mu.Unlock()
		c.dev.count(dropCQOverrun)
		return
	}
	c.ring[(c.head+c.n)%len(c.ring)] = *wc
	c.n++
	c.mu.Unlock()
}

// signal wakes the consumer; the device calls it once per batch of pushes.
func (c *cq) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// SetHandler implements ib.CQHandler.
func (c *cq) SetHandler(f func()) { c.handler.Store(&f) }

// runHandler runs the consumer's handler, if it set one. Only the receive
// goroutine calls it, with no lock held: the handler posts receives and
// sends.
func (c *cq) runHandler() {
	if h := c.handler.Load(); h != nil {
		(*h)()
	}
}

// signalUnlessHandled wakes a consumer that did not set a handler.
func (c *cq) signalUnlessHandled() {
	if c.handler.Load() == nil {
		c.signal()
	}
}

func (c *cq) Poll(wc []ib.Completion) int {
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

func (c *cq) Ready() <-chan struct{} { return c.ready }

func (c *cq) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

// recvQueue is a queue of posted receive buffers, used both as a QP's own
// receive queue and as an SRQ.
type recvQueue struct {
	mu      sync.Mutex
	ring    []ib.RecvWR
	head, n int
	limit   int // SRQ low watermark; 0 = disarmed
	limitCh chan struct{}
	closed  bool
	// lifo: take the buffer posted last first (a shared receive queue).
	// Its consumer posts a buffer again right after it drained it, so
	// that buffer is still in the CPU's caches; taken in posting order,
	// 256 buffers of 68 KiB walk 17 MB and every message lands in cold
	// memory. A QP's own receive queue stays in order, as verbs
	// consumers expect of one.
	lifo bool
}

func newRecvQueue(depth int, lifo bool) *recvQueue {
	if depth < 1 {
		depth = 1
	}
	return &recvQueue{ring: make([]ib.RecvWR, depth), limitCh: make(chan struct{}, 1), lifo: lifo}
}

func (q *recvQueue) post(wrs []ib.RecvWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, ib.ErrClosed
	}
	for i := range wrs {
		if _, err := wrs[i].SGE.Bytes(); err != nil {
			return i, err
		}
		if q.n == len(q.ring) {
			return i, ib.ErrQueueFull
		}
		q.ring[(q.head+q.n)%len(q.ring)] = wrs[i]
		q.n++
	}
	return len(wrs), nil
}

// take removes the oldest posted buffer (the newest if lifo); low: half
// the ring or less is left posted.
func (q *recvQueue) take() (wr ib.RecvWR, ok, low bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 || q.closed {
		return ib.RecvWR{}, false, true
	}
	if q.lifo {
		top := (q.head + q.n - 1) % len(q.ring)
		wr = q.ring[top]
		q.ring[top] = ib.RecvWR{}
	} else {
		wr = q.ring[q.head]
		q.ring[q.head] = ib.RecvWR{}
		q.head = (q.head + 1) % len(q.ring)
	}
	q.n--
	if q.limit > 0 && q.n < q.limit {
		q.limit = 0 // one signal per Arm, as verbs does
		select {
		case q.limitCh <- struct{}{}:
		default:
		}
	}
	return wr, true, 2*q.n <= len(q.ring)
}

// untake puts a buffer back where take took it (a message that did not
// land).
func (q *recvQueue) untake(wr ib.RecvWR) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == len(q.ring) {
		return
	}
	if q.lifo {
		q.ring[(q.head+q.n)%len(q.ring)] = wr
		q.n++
		return
	}
	q.head = (q.head - 1 + len(q.ring)) % len(q.ring)
	q.ring[q.head] = wr
	q.n++
}

// drain removes every posted buffer (for flushing on close or error).
func (q *recvQueue) drain(fn func(ib.RecvWR)) {
	q.mu.Lock()
	wrs := make([]ib.RecvWR, 0, q.n)
	for q.n > 0 {
		wrs = append(wrs, q.ring[q.head])
		q.ring[q.head] = ib.RecvWR{}
		q.head = (q.head + 1) % len(q.ring)
		q.n--
	}
	q.mu.Unlock()
	for _, wr := range wrs {
		fn(wr)
	}
}

func (q *recvQueue) posted() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// srq is a shared receive queue.
type srq struct {
	q   *recvQueue
	dev *Device
}

func (s *srq) PostRecv(wrs []ib.RecvWR) (int, error) { return s.q.post(wrs) }
func (s *srq) LimitReached() <-chan struct{}         { return s.q.limitCh }
func (s *srq) Posted() int                           { return s.q.posted() }

func (s *srq) Arm(limit int) {
	s.q.mu.Lock()
	s.q.limit = limit
	below := s.q.n < limit
	s.q.mu.Unlock()
	if below {
		select {
		case s.q.limitCh <- struct{}{}:
		default:
		}
	}
}

func (s *srq) Close() error {
	s.q.mu.Lock()
	s.q.closed = true
	s.q.mu.Unlock()
	return nil
}
