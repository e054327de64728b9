package ibqueue

import (
	"errors"
	"sync"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/madqueue"
)

// MADLen is the size of every management datagram.
const MADLen = 256

// ErrMADsOpen is Open's error while a MAD service is open on the device.
var ErrMADsOpen = errors.New("the MAD service is already open")

// MADs is the receive side of a device's QP1: the one MAD service open at
// a time and the MADs that come for it. The zero value has none open.
type MADs struct {
	mu  sync.Mutex
	cur *MADQueue
}

// MADQueue is the bounded queue of received MADs that an open MAD service
// reads (ib.MADService's Recv); the provider embeds it in its service,
// which adds Send.
type MADQueue struct {
	owner  *MADs
	recv   chan ib.MAD
	mu     sync.Mutex
	shares *madqueue.Shares // who may still join recv; nil: anyone; under mu
	closed bool
}

// MADResult is what became of a MAD handed to Deliver.
type MADResult int

// Deliver's results.
const (
	MADQueued    MADResult = iota
	MADNoService           // no MAD service is open
	MADClosed              // the service was closing
	MADMalformed           // not MADLen octets
	MADOverShare           // its source has had its share of the queue (madqueue)
	MADQueueFull           // the queue is full
)

// Open opens the MAD service's queue of depth MADs; with fair, each
// source gets a fair share of it (package madqueue). It fails with
// ErrMADsOpen while one is open.
func (m *MADs) Open(depth int, fair bool) (*MADQueue, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur != nil {
		return nil, ErrMADsOpen
	}
	q := &MADQueue{owner: m, recv: make(chan ib.MAD, depth)}
	if fair {
		q.shares = madqueue.New(depth)
	}
	m.cur = q
	return q, nil
}

// Current returns the open queue, or nil.
func (m *MADs) Current() *MADQueue {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur
}

// Deliver hands a received MAD to the open service and says what became
// of it; the provider counts every result but MADQueued as a drop.
func (m *MADs) Deliver(from ib.MADAddr, b []byte) MADResult {
	q := m.Current()
	if q == nil {
		return MADNoService
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.closed:
		return MADClosed
	case len(b) != MADLen:
		return MADMalformed
	case q.shares != nil && !q.shares.Admit(from, len(q.recv)):
		return MADOverShare
	}
	mad := ib.MAD{From: from}
	copy(mad.Data[:], b)
	select {
	case q.recv <- mad:
		return MADQueued
	default:
		return MADQueueFull
	}
}

// Recv implements ib.MADService's Recv.
func (q *MADQueue) Recv() <-chan ib.MAD { return q.recv }

// Requeue puts a MAD read from Recv back at the end of the queue, past
// the fair-share rule, and reports whether there was room (for a test
// that looks at the queue and leaves it as it was).
func (q *MADQueue) Requeue(m ib.MAD) bool {
	select {
	case q.recv <- m:
		return true
	default:
		return false
	}
}

// Closed reports whether Close was called.
func (q *MADQueue) Closed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// Close closes the Recv channel and lets the device open a service again.
func (q *MADQueue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.recv)
		q.owner.mu.Lock()
		if q.owner.cur == q {
			q.owner.cur = nil
		}
		q.owner.mu.Unlock()
	}
	return nil
}
