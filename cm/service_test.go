package cm

import (
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm/cmtest"
	"github.com/ipoibd/ipoibd/ib"
)

// chanMADs is an ib.MADService over a channel the test fills.
type chanMADs struct {
	in     chan ib.MAD
	sent   int
	closed int
}

func (c *chanMADs) Send(to ib.MADAddr, mad []byte) error { c.sent++; return nil }
func (c *chanMADs) Recv() <-chan ib.MAD                  { return c.in }
func (c *chanMADs) Close() error {
	if c.closed++; c.closed == 1 {
		close(c.in)
	}
	return nil
}

// EngineService: received MADs reach the Engine only through Wake and Poll, on
// the caller's goroutine; beyond the queue's bound they are counted, never
// queued without limit; Close closes the transport once.
func TestEngineServiceQueue(t *testing.T) {
	// from returns the k-th MAD's sender: one source, or each its own.
	one := func(int) ib.GID { return ib.GID{15: 2} }
	many := func(k int) ib.GID { return ib.GID{13: byte(k >> 8), 14: byte(k), 15: 2} }
	lastOther := func(k int) ib.GID {
		if k == maxQueuedMADs-1 {
			return ib.GID{15: 3}
		}
		return one(k)
	}
	for _, tc := range []struct {
		name    string
		mads    int
		from    func(int) ib.GID
		handled uint64
		dropped uint64
		refused uint64
	}{
		{"one", 1, one, 1, 0, 0},
		{"a full queue", maxQueuedMADs, many, maxQueuedMADs, 0, 0},
		{"beyond the bound", maxQueuedMADs + 7, many, maxQueuedMADs, 7, 0},
		// Past half the queue, a source holding a quarter of it is refused.
		{"one source floods", maxQueuedMADs, one, maxQueuedMADs/2 + 1, 0, maxQueuedMADs/2 - 1},
		// Another source finds room behind the flood.
		{"a newcomer behind a flood", maxQueuedMADs, lastOther, maxQueuedMADs/2 + 2, 0, maxQueuedMADs/2 - 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &chanMADs{in: make(chan ib.MAD, tc.mads)}
			m := NewEngineService(EngineConfig{GID: ib.GID{15: 1}, PKey: ib.DefaultPKey, Event: func(Event) {}}, tr)
			// Malformed MADs (all zeros): the Engine counts each one it is given.
			for k := range tc.mads {
				tr.in <- ib.MAD{From: ib.MADAddr{GID: tc.from(k), QPN: ib.QP1}}
			}
			_ = tr.Close() // the receiver queues everything, then ends
			<-m.done
			if got := m.Stats.Received; got != 0 {
				t.Fatalf("the Engine saw %d MADs before Poll", got)
			}
			select {
			case <-m.Wake():
			default:
				t.Fatal("Wake not signalled with MADs queued")
			}
			m.Poll(time.Now())
			if m.Stats.Received != tc.handled || m.Stats.Malformed != tc.handled {
				t.Errorf("received %d malformed %d, want %d", m.Stats.Received, m.Stats.Malformed, tc.handled)
			}
			if v, ok := cmtest.CounterOf(m.Counters(), "mad_drop_queue_full"); !ok || v != tc.dropped {
				t.Errorf("mad_drop_queue_full = %d (%v), want %d", v, ok, tc.dropped)
			}
			if v, ok := cmtest.CounterOf(m.Counters(), "mad_drop_source_share"); !ok || v != tc.refused {
				t.Errorf("mad_drop_source_share = %d (%v), want %d", v, ok, tc.refused)
			}
			m.Poll(time.Now()) // nothing left
			if m.Stats.Received != tc.handled {
				t.Errorf("a second Poll handled %d more", m.Stats.Received-tc.handled)
			}
			if err := m.Close(); err != nil || tr.closed != 2 {
				t.Errorf("Close: %v, transport closed %d times (the test's and Close's)", err, tr.closed)
			}
			if err := m.Close(); err != nil || tr.closed != 2 {
				t.Errorf("second Close: %v, transport closed %d times", err, tr.closed)
			}
		})
	}
}
