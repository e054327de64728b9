package ibqueue

import (
	"sync"

	"github.com/ipoibd/ipoibd/ib"
)

// RecvQueue is a ring of posted receive buffers, used both as a QP's own
// receive queue and as a shared receive queue: it implements ib.SRQ.
type RecvQueue struct {
	mu      sync.Mutex
	ring    []ib.RecvWR
	head, n int
	limit   int // SRQ low watermark; 0 = disarmed
	limitCh chan struct{}
	closed  bool
	lifo    bool
}

var _ ib.SRQ = (*RecvQueue)(nil)

// NewRecvQueue makes a queue of depth buffers (at least one) whose low
// watermark is limit (0: none; see ib.SRQ). With lifo, Take takes the
// buffer posted last first: softib's shared receive queue does, because
// its consumer posts a buffer again right after draining it, so that
// buffer is still in the CPU's caches (taken in posting order, 256
// buffers of 68 KiB walk 17 MB and every message lands in cold memory). A
// QP's own receive queue stays in order, as verbs consumers expect.
func NewRecvQueue(depth, limit int, lifo bool) *RecvQueue {
	return &RecvQueue{ring: make([]ib.RecvWR, max(depth, 1)), limit: limit, limitCh: make(chan struct{}, 1), lifo: lifo}
}

// PostRecv queues receive buffers after checking that each lies in its
// memory region; it returns how many were queued.
func (q *RecvQueue) PostRecv(wrs []ib.RecvWR) (int, error) {
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

// Take removes the oldest posted buffer (the newest if lifo), signalling
// the limit once when the count falls below it; low: half the ring or
// less is left posted.
func (q *RecvQueue) Take() (wr ib.RecvWR, ok, low bool) {
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
		q.signalLimit()
	}
	return wr, true, 2*q.n <= len(q.ring)
}

func (q *RecvQueue) signalLimit() {
	select {
	case q.limitCh <- struct{}{}:
	default:
	}
}

// Untake puts a buffer back where Take took it (a message that did not
// land).
func (q *RecvQueue) Untake(wr ib.RecvWR) {
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

// Drain removes every posted buffer, oldest first, and passes each to fn
// with no lock held (for flushing on close or error).
func (q *RecvQueue) Drain(fn func(ib.RecvWR)) {
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

// Posted implements ib.SRQ.
func (q *RecvQueue) Posted() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// LimitReached implements ib.SRQ.
func (q *RecvQueue) LimitReached() <-chan struct{} { return q.limitCh }

// Arm implements ib.SRQ: it signals at once when fewer than limit are
// posted already.
func (q *RecvQueue) Arm(limit int) {
	q.mu.Lock()
	q.limit = limit
	below := q.n < limit
	q.mu.Unlock()
	if below {
		q.signalLimit()
	}
}

// Close implements ib.SRQ: posting fails from now on and Take finds
// nothing. The buffers still posted are dropped (the QPs that use a
// shared queue, closed first, flushed what they held).
func (q *RecvQueue) Close() error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	return nil
}
