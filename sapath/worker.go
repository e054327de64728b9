package sapath

import (
	"sync"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/sa"
)

// Querier asks the SA for the path to dgid in partition pkey;
// *umadsa.Client is one. A call may block for the client's timeouts.
type Querier interface {
	PathRecord(dgid ib.GID, pkey ib.PKey) (sa.PathRecord, error)
}

// Result is the answer to one query, for Cache.Done.
type Result struct {
	DGID   ib.GID
	Record sa.PathRecord
	Err    error
}

// Worker runs queries on its own goroutine, one at a time (the SA client
// asks one question at a time anyway), so that the event loop owning the
// Cache never waits for the SA.
type Worker struct {
	q    Querier
	pkey ib.PKey

	mu    sync.Mutex
	queue []ib.GID
	wake  chan struct{} // capacity one: work was queued
	stop  chan struct{}
	out   chan Result
	done  chan struct{}
	once  sync.Once
}

// NewWorker starts a worker asking q about paths in partition pkey.
func NewWorker(q Querier, pkey ib.PKey) *Worker {
	w := &Worker{q: q, pkey: pkey, wake: make(chan struct{}, 1), stop: make(chan struct{}),
		out: make(chan Result), done: make(chan struct{})}
	go w.run()
	return w
}

// Ask queues queries; it never blocks.
func (w *Worker) Ask(dgids ...ib.GID) {
	if len(dgids) == 0 {
		return
	}
	w.mu.Lock()
	w.queue = append(w.queue, dgids...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Results delivers the answers, in the order asked.
func (w *Worker) Results() <-chan Result { return w.out }

// Close stops the worker; it returns once a query under way has ended
// (up to the SA client's timeouts). Queries still queued are dropped.
func (w *Worker) Close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *Worker) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		w.mu.Lock()
		var g ib.GID
		n := len(w.queue)
		if n > 0 {
			g = w.queue[0]
			w.queue = w.queue[1:]
		}
		w.mu.Unlock()
		if n == 0 {
			select {
			case <-w.wake:
				continue
			case <-w.stop:
				return
			}
		}
		rec, err := w.q.PathRecord(g, w.pkey)
		select {
		case w.out <- Result{DGID: g, Record: rec, Err: err}:
		case <-w.stop:
			return
		}
	}
}
