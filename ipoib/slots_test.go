package ipoib

import "testing"

// freeCount is how many slots p holds.
func (p *pool) freeCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}

// TestSharedSlotFreedWithLastSend: a transmit slot shared by n sends goes
// back to its pool with the n-th free, not before, and is then an
// ordinary slot again (one free returns it).
func TestSharedSlotFreedWithLastSend(t *testing.T) {
	for _, n := range []int{1, 2, 45, 119} {
		s := &slots{tx: make([]pool, 1), txPer: numTx, packedPer: numPackedTx}
		s.tx[0].init(0, numTx)
		slot, _ := s.tx[0].tryGet()
		if got := s.share(&s.tx[0], slot, n); got != n {
			t.Fatalf("n=%d: share gave room for %d sends", n, got)
		}
		for k := 1; k < n; k++ {
			s.free(slot)
			if got := s.tx[0].freeCount(); got != numTx-1 {
				t.Fatalf("n=%d: after %d of %d frees the pool holds %d slots, want %d", n, k, n, got, numTx-1)
			}
		}
		s.free(slot)
		if got := s.tx[0].packed.Load(); got != 0 {
			t.Fatalf("n=%d: %d packed sends still counted in flight after the last free", n, got)
		}
		if got := s.tx[0].freeCount(); got != numTx {
			t.Fatalf("n=%d: after the last free the pool holds %d slots, want %d", n, got, numTx)
		}
		again, _ := s.tx[0].tryGet()
		s.free(again)
		if got := s.tx[0].freeCount(); got != numTx {
			t.Fatalf("n=%d: an unshared slot after a shared one: the pool holds %d slots after its free, want %d", n, got, numTx)
		}
	}
}

// TestShareBoundedBySendQueue: the sends packed beyond one a slot never
// exceed the pool's share of numPackedTx (the send queue's room for them);
// without room a slot carries one send, and room comes back with the
// completions.
func TestShareBoundedBySendQueue(t *testing.T) {
	s := &slots{tx: make([]pool, 2), txPer: numTx / 2, packedPer: numPackedTx / 2}
	s.tx[0].init(0, numTx/2)
	s.tx[1].init(numTx/2, numTx/2)
	p := &s.tx[1]
	var held []uint32
	total := 0
	for {
		slot, _ := p.tryGet()
		n := s.share(p, slot, 45)
		held = append(held, slot)
		total += n - 1
		if n == 1 {
			break
		}
	}
	if total != numPackedTx/2 {
		t.Fatalf("%d sends packed beyond one a slot, want the pool's share %d", total, numPackedTx/2)
	}
	// One completion of a shared slot gives one send of room back.
	s.free(held[0])
	slot, _ := p.tryGet()
	if n := s.share(p, slot, 45); n != 2 {
		t.Fatalf("after one completion a slot may carry %d sends, want 2", n)
	}
	if got := s.tx[0].packed.Load(); got != 0 {
		t.Fatalf("the other pool counts %d packed sends, want 0", got)
	}
}
