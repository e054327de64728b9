package ibqueue

import (
	"slices"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// A receive queue reports itself low once half its buffers or more are
// taken, and empty is low too.
func TestRecvQueueLow(t *testing.T) {
	q := NewRecvQueue(8, 0, false)
	for k := range q.ring { // as post leaves them, without memory to check
		q.ring[k] = ib.RecvWR{ID: uint64(k)}
	}
	q.n = len(q.ring)
	for k, want := range []bool{false, false, false, true, true, true, true, true} {
		wr, ok, low := q.Take()
		if !ok || wr.ID != uint64(k) {
			t.Fatalf("take %d: %v, %v", k, wr.ID, ok)
		}
		if low != want {
			t.Errorf("take %d leaves %d of 8 posted: low %v, want %v", k, 7-k, low, want)
		}
	}
	if _, ok, low := q.Take(); ok || !low {
		t.Errorf("empty queue: ok %v low %v, want false, true", ok, low)
	}
}

// A QP's own receive queue hands out buffers in posting order; a shared
// one the last posted first (its warm buffer), and either takes back a
// buffer that did not land where it came from. The ring wraps here.
func TestRecvQueueOrder(t *testing.T) {
	for _, tc := range []struct {
		lifo bool
		want []uint64 // take, take, untake the second, then take until empty
	}{
		{false, []uint64{0, 1, 1, 2, 3}},
		{true, []uint64{3, 2, 2, 1, 0}},
	} {
		q := NewRecvQueue(6, 0, tc.lifo)
		q.head = 4
		for k := range 4 { // as post leaves them, without memory to check
			q.ring[(q.head+k)%len(q.ring)] = ib.RecvWR{ID: uint64(k)}
		}
		q.n = 4
		var got []uint64
		for k := 0; ; k++ {
			wr, ok, _ := q.Take()
			if !ok {
				break
			}
			got = append(got, wr.ID)
			if k == 1 {
				q.Untake(wr)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("lifo %v: taken %v, want %v", tc.lifo, got, tc.want)
		}
	}
}
