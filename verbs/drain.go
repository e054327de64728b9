package verbs

import (
	"sync"
	"time"
)

// A QP on a shared receive queue may hold one of the SRQ's receives it
// took for a message still arriving. Once the QP is in ERROR the adapter
// completes that receive as flushed and then reports
// IBV_EVENT_QP_LAST_WQE_REACHED: the QP will take nothing more from the
// SRQ. Destroying the QP before that lets some providers (mlx5) discard
// the completions still to come, and the receive never comes back to the
// SRQ's owner. So Close moves such a QP to ERROR, takes what has completed
// and returns; the QP is destroyed in the background once the event came,
// or after lastWQETimeout without it (counted: qp_last_wqe_timeouts).

// lastWQETimeout bounds the wait for IBV_EVENT_QP_LAST_WQE_REACHED.
const lastWQETimeout = time.Second

// awaitsLastWQE says whether closing a QP waits for its LAST_WQE_REACHED:
// only one on an SRQ that left RESET (one that never did took no receive),
// and not while the device closes (its event reader is about to stop).
func awaitsLastWQE(onSRQ, leftReset, deviceClosing bool) bool {
	return onSRQ && leftReset && !deviceClosing
}

// waitLastWQE waits for reached to be closed, at most timeout; false if
// the time ran out.
func waitLastWQE(reached <-chan struct{}, timeout time.Duration) bool {
	select {
	case <-reached:
		return true
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-reached:
		return true
	case <-t.C:
		return false
	}
}

// inflight counts work running in the background (QP destroys waiting for
// their last WQE); wait returns once none is left. Unlike a
// sync.WaitGroup, add may be called while another goroutine waits.
type inflight struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0
}

func (f *inflight) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.zero = make(chan struct{})
	}
	f.n++
}

func (f *inflight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		close(f.zero)
	}
}

// wait returns when nothing is in flight.
func (f *inflight) wait() {
	for {
		f.mu.Lock()
		n, z := f.n, f.zero
		f.mu.Unlock()
		if n == 0 {
			return
		}
		<-z
	}
}

// pending is how many are in flight.
func (f *inflight) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}
