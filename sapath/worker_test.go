package sapath

import (
	"errors"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/sa"
)

// gateSA answers a query only when the test sends on its gate, so the
// test decides when the SA is slow.
type gateSA struct {
	gate  chan struct{}
	asked chan ib.GID
}

func (g *gateSA) PathRecord(dgid ib.GID, pkey ib.PKey) (sa.PathRecord, error) {
	g.asked <- dgid
	<-g.gate
	if dgid == peer3 {
		return sa.PathRecord{}, errors.New("no answer")
	}
	r := recFor(dgid, 3)
	r.PKey = pkey
	return r, nil
}

func recv(t *testing.T, c <-chan Result) Result {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no result")
	}
	return Result{}
}

// The worker asks in order, one at a time, while Ask never waits; Close
// waits for the query under way and drops the rest.
func TestWorker(t *testing.T) {
	q := &gateSA{gate: make(chan struct{}), asked: make(chan ib.GID, 4)}
	w := NewWorker(q, 0x8001)
	w.Ask(peer, peer3)
	w.Ask(peer2) // returns at once though the SA has not answered
	if g := <-q.asked; g != peer {
		t.Fatalf("asked %v first", g)
	}
	q.gate <- struct{}{}
	if r := recv(t, w.Results()); r.DGID != peer || r.Err != nil || r.Record.PKey != 0x8001 {
		t.Errorf("first result %+v", r)
	}
	<-q.asked
	q.gate <- struct{}{}
	if r := recv(t, w.Results()); r.DGID != peer3 || r.Err == nil {
		t.Errorf("second result %+v, want peer3's error", r)
	}
	if g := <-q.asked; g != peer2 {
		t.Fatalf("asked %v third", g)
	}
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	q.gate <- struct{}{} // the query under way ends; its result is not wanted
	<-closed
	w.Ask(peer) // after Close: queued, never asked
	select {
	case g := <-q.asked:
		t.Errorf("asked %v after Close", g)
	default:
	}
	w.Close() // twice is fine
}
