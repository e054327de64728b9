package ipoib

import "testing"

// freeCount is how many slots p holds.
func (p *pool) freeCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// newTestSlots is the transmit side of slots without a slab, split among
// queues.
func newTestSlots(queues int) *slots {
	s := &slots{ring: ring{lay: primaryLayout}}
	s.init(queues)
	return s
}

// TestSharedSlotFreedWithLastSend: a transmit slot shared by n sends goes
// back to its pool with the n-th free, not before, and is then an
// ordinary slot again (one free returns it); the budget gets every send
// back.
func TestSharedSlotFreedWithLastSend(t *testing.T) {
	for _, n := range []int{1, 2, 45, 119} {
		s := newTestSlots(1)
		slot, _ := s.get(&s.tx[0])
		if got := s.share(slot, n); got != n {
			t.Fatalf("n=%d: share gave room for %d sends", n, got)
		}
		for k := 1; k < n; k++ {
			s.free(slot)
			if got := s.tx[0].freeCount(); got != numTx-1 {
				t.Fatalf("n=%d: after %d of %d frees the pool holds %d slots, want %d", n, k, n, got, numTx-1)
			}
		}
		s.free(slot)
		if got := s.inflight.Load(); got != 0 {
			t.Fatalf("n=%d: %d sends still counted in flight after the last free", n, got)
		}
		if got := s.tx[0].freeCount(); got != numTx {
			t.Fatalf("n=%d: after the last free the pool holds %d slots, want %d", n, got, numTx)
		}
		again, _ := s.get(&s.tx[0])
		s.free(again)
		if got := s.tx[0].freeCount(); got != numTx {
			t.Fatalf("n=%d: an unshared slot after a shared one: the pool holds %d slots after its free, want %d", n, got, numTx)
		}
	}
}

// TestSendsBoundedByGrantedDepth: the sends the transmit slots make (one a
// slot taken, one for each packed beyond the first) never exceed the
// smallest send queue depth a QP was granted, packed or not, whichever
// reader takes them; without room no slot is handed out, and room comes
// back with the completions. Each case fails without the bound: a QP
// granted fewer work requests than asked would refuse posts (tx_drop_post).
func TestSendsBoundedByGrantedDepth(t *testing.T) {
	for _, tc := range []struct {
		name    string
		granted []int // QP.MaxSend of the QPs created, in order
		per     int   // sends a super-packet asks a slot to carry
		want    int   // the budget
	}{
		{"as asked", []int{connSendDepth}, 45, connSendDepth},
		{"a device grants 100", []int{100}, 45, 100},
		{"one QP of several granted fewer", []int{connSendDepth, 64, connSendDepth}, 45, 64},
		{"granted more than asked", []int{4 * connSendDepth}, 45, connSendDepth},
		{"granted fewer, one send a slot", []int{40}, 1, 40},
		{"granted fewer than the readers", []int{0}, 45, 3}, // 2 readers: one each and one more
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSlots(2)
			for _, g := range tc.granted {
				s.bound(g)
			}
			var held []uint32
			sends := 0
			for q := 0; ; q = 1 - q { // both readers, in turn
				slot, ok := s.get(&s.tx[q])
				if !ok {
					break
				}
				held = append(held, slot)
				sends += s.share(slot, tc.per)
			}
			if sends != tc.want {
				t.Fatalf("%d sends in flight when no slot was handed out, want %d", sends, tc.want)
			}
			if got := s.inflight.Load(); int(got) != sends {
				t.Fatalf("inflight %d, want the %d sends", got, sends)
			}
			// One completion gives room for one send back, to either
			// reader, and wakes both.
			s.free(held[0])
			for q := range s.tx {
				select {
				case <-s.tx[q].refilled:
				default:
					t.Errorf("reader %d not woken when the budget got room", q)
				}
			}
			slot, ok := s.get(&s.tx[1])
			if !ok {
				t.Fatal("no slot after a completion")
			}
			if n := s.share(slot, tc.per); n != 1 {
				t.Fatalf("after one completion a slot carries %d sends, want 1", n)
			}
			if _, ok := s.get(&s.tx[0]); ok {
				t.Fatal("a slot handed out beyond the budget")
			}
		})
	}
}
