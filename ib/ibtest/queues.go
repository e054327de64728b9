package ibtest

import (
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
)

// cq is a completion queue: a fixed ring filled by the device and drained
// by its consumer.
type cq struct {
	mu      sync.Mutex
	ring    []ib.Completion
	head, n int
	ready   chan struct{}
	closed  bool
	dev     *Device
	handler atomic.Pointer[func()] // ib.CQHandler: run by the delivery goroutine
}

var _ ib.CQHandler = (*cq)(nil)

func newCQ(dev *Device, size int) *cq {
	return &cq{ring: make([]ib.Completion, max(size, 1)), ready: make(chan struct{}, 1), dev: dev}
}

// push adds one completion. A full CQ is an overrun: the completion is
// lost and counted, as an adapter would raise a CQ error.
func (c *cq) push(wc ib.Completion) {
	c.mu.Lock()
	if c.closed || c.n == len(c.ring) {
		c.mu.Unlock()
		c.dev.count(dropCQOverrun)
		return
	}
	c.ring[(c.head+c.n)%len(c.ring)] = wc
	c.n++
	c.mu.Unlock()
}

// signal wakes the consumer.
func (c *cq) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// SetHandler implements ib.CQHandler.
func (c *cq) SetHandler(f func()) { c.handler.Store(&f) }

func (c *cq) runHandler() {
	if h := c.handler.Load(); h != nil {
		(*h)()
	}
}

func (c *cq) signalUnlessHandled() {
	if c.handler.Load() == nil {
		c.signal()
	}
}

func (c *cq) Poll(wc []ib.Completion) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for k < len(wc) && c.n > 0 {
		wc[k] = c.ring[c.head]
		c.head = (c.head + 1) % len(c.ring)
		c.n--
		k++
	}
	return k
}

func (c *cq) Ready() <-chan struct{} { return c.ready }

func (c *cq) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

// recvQueue is a FIFO of posted receive buffers: a QP's own receive queue
// or an SRQ.
type recvQueue struct {
	mu      sync.Mutex
	ring    []ib.RecvWR
	head, n int
	limit   int // SRQ low watermark; 0 = disarmed
	limitCh chan struct{}
	closed  bool
}

func newRecvQueue(depth int) *recvQueue {
	return &recvQueue{ring: make([]ib.RecvWR, max(depth, 1)), limitCh: make(chan struct{}, 1)}
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

// take removes the oldest posted buffer, signalling the limit once when
// the count falls below it.
func (q *recvQueue) take() (ib.RecvWR, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 || q.closed {
		return ib.RecvWR{}, false
	}
	wr := q.ring[q.head]
	q.ring[q.head] = ib.RecvWR{}
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	if q.limit > 0 && q.n < q.limit {
		q.limit = 0 // one signal per Arm, as verbs does
		select {
		case q.limitCh <- struct{}{}:
		default:
		}
	}
	return wr, true
}

// untake puts a buffer back at the head (a message that did not land).
func (q *recvQueue) untake(wr ib.RecvWR) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == len(q.ring) {
		return
	}
	q.head = (q.head - 1 + len(q.ring)) % len(q.ring)
	q.ring[q.head] = wr
	q.n++
}

// drain removes every posted buffer.
func (q *recvQueue) drain() []ib.RecvWR {
	q.mu.Lock()
	defer q.mu.Unlock()
	wrs := make([]ib.RecvWR, 0, q.n)
	for q.n > 0 {
		wrs = append(wrs, q.ring[q.head])
		q.ring[q.head] = ib.RecvWR{}
		q.head = (q.head + 1) % len(q.ring)
		q.n--
	}
	return wrs
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

func (s *srq) PostRecv(wrs []ib.RecvWR) (int, error) {
	n, err := s.q.post(wrs)
	if n > 0 {
		s.dev.kick()
	}
	return n, err
}

func (s *srq) LimitReached() <-chan struct{} { return s.q.limitCh }
func (s *srq) Posted() int                   { return s.q.posted() }

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

// Close destroys the SRQ; its posted buffers are dropped (their QPs, closed
// first, flushed what they held).
func (s *srq) Close() error {
	s.q.mu.Lock()
	s.q.closed = true
	s.q.mu.Unlock()
	return nil
}
