package softib

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// TestSendRingGrowsToDepth: the ring starts small, doubles while the queue
// deepens, keeps the posting order across growth and wrap-around, and
// refuses the post past MaxSend.
func TestSendRingGrowsToDepth(t *testing.T) {
	for _, depth := range []int{1, 5, 8, 9, 256} {
		r := requester{depth: depth}
		if r.push(sendEntry{}); len(r.sq) != min(depth, initialSendRing) {
			t.Errorf("depth %d: one post made a ring of %d, want %d", depth, len(r.sq), min(depth, initialSendRing))
		}
		r.pop()
		next, want := uint64(0), uint64(0)
		// Wrap the ring before it grows: two in, one out, repeatedly.
		for r.n < depth {
			for range 2 {
				if r.n < depth {
					if !r.push(sendEntry{wr: ib.SendWR{ID: next}}) {
						t.Fatalf("depth %d: push %d refused with %d queued", depth, next, r.n)
					}
					next++
				}
			}
			if r.n == depth {
				break
			}
			if got := r.pop().wr.ID; got != want {
				t.Fatalf("depth %d: popped %d, want %d", depth, got, want)
			}
			want++
		}
		if r.push(sendEntry{}) {
			t.Errorf("depth %d: push beyond MaxSend accepted", depth)
		}
		if len(r.sq) != depth {
			t.Errorf("depth %d: full ring of %d entries", depth, len(r.sq))
		}
		for r.n > 0 {
			if got := r.pop().wr.ID; got != want {
				t.Fatalf("depth %d: popped %d, want %d", depth, got, want)
			}
			want++
		}
		if want != next {
			t.Errorf("depth %d: %d posted, %d popped", depth, next, want)
		}
	}
}
