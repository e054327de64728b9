package verbs

import (
	"errors"
	"testing"
)

func TestWRIDRoundTrip(t *testing.T) {
	for _, c := range []struct {
		slot  uint32
		gen   uint16
		entry uint32
	}{{0, 0, 0}, {1, 1, 1}, {maxTables - 1, 0xffff, 0xffffffff}, {0x1234, 0xbeef, 0xcafe}} {
		id := makeWRID(c.slot, c.gen, c.entry)
		s, g, e := splitWRID(id)
		if s != c.slot || g != c.gen || e != c.entry {
			t.Errorf("split(make(%d, %d, %d)) = %d, %d, %d", c.slot, c.gen, c.entry, s, g, e)
		}
	}
}

func TestTableAllocTakeRelease(t *testing.T) {
	var r registry
	tab := newWRTable(2, wrOwner{recv: true})
	if err := r.add(tab); err != nil {
		t.Fatal(err)
	}
	buf := []byte("datagram")
	tab.mu.Lock()
	a, ok1 := tab.allocLocked(100, buf)
	b, ok2 := tab.allocLocked(200, nil)
	_, ok3 := tab.allocLocked(300, nil)
	tab.mu.Unlock()
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("alloc on a 2-deep table: %v %v %v, want true true false", ok1, ok2, ok3)
	}
	if n := tab.outstanding(); n != 2 {
		t.Fatalf("outstanding = %d, want 2", n)
	}

	got, entry := r.lookup(a)
	if got != tab {
		t.Fatal("lookup did not find the table")
	}
	tab.mu.Lock()
	e, ok := tab.takeLocked(entry)
	_, again := tab.takeLocked(entry)
	tab.releaseLocked(b) // the adapter refused b
	tab.mu.Unlock()
	if !ok || e.id != 100 || string(e.buf) != "datagram" {
		t.Fatalf("take = %+v, %v", e, ok)
	}
	if again {
		t.Fatal("an entry completed twice")
	}
	if n := tab.outstanding(); n != 0 {
		t.Fatalf("outstanding after take and release = %d", n)
	}
}

func TestTableRetireFlushesOutstanding(t *testing.T) {
	tab := newWRTable(4, wrOwner{})
	tab.mu.Lock()
	var ids []uint64
	for id := uint64(1); id <= 3; id++ {
		wrid, _ := tab.allocLocked(id, nil)
		ids = append(ids, wrid)
	}
	_, _, e1 := splitWRID(ids[1])
	tab.takeLocked(e1) // 2 completed normally
	var flushed []uint64
	tab.retireLocked(func(e wrEntry) { flushed = append(flushed, e.id) })
	_, ok := tab.allocLocked(9, nil)
	_, _, e0 := splitWRID(ids[0])
	_, late := tab.takeLocked(e0)
	tab.mu.Unlock()
	if len(flushed) != 2 || flushed[0] != 1 || flushed[1] != 3 {
		t.Fatalf("flushed %v, want [1 3]", flushed)
	}
	if ok || late {
		t.Fatal("a retired table still hands out or completes entries")
	}
	if n := tab.outstanding(); n != 0 {
		t.Fatalf("outstanding on a retired table = %d", n)
	}
}

func TestRegistryStaleGeneration(t *testing.T) {
	var r registry
	old := newWRTable(1, wrOwner{})
	if err := r.add(old); err != nil {
		t.Fatal(err)
	}
	old.mu.Lock()
	stale, _ := old.allocLocked(1, nil)
	old.mu.Unlock()
	r.remove(old)
	if got, _ := r.lookup(stale); got != nil {
		t.Fatal("lookup found a removed table")
	}
	fresh := newWRTable(1, wrOwner{})
	if err := r.add(fresh); err != nil {
		t.Fatal(err)
	}
	if fresh.slot != old.slot || fresh.gen == old.gen {
		t.Fatalf("slot reuse: old %d/%d, fresh %d/%d; want the same slot, a new generation", old.slot, old.gen, fresh.slot, fresh.gen)
	}
	if got, _ := r.lookup(stale); got != nil {
		t.Fatal("a completion of the old table was taken for the new one")
	}
	fresh.mu.Lock()
	cur, _ := fresh.allocLocked(2, nil)
	fresh.mu.Unlock()
	if got, _ := r.lookup(cur); got != fresh {
		t.Fatal("lookup missed the new table")
	}
	r.remove(fresh)
	r.remove(fresh) // twice is harmless
	if len(r.free) != 1 {
		t.Fatalf("free slots = %v, want one", r.free)
	}
}

func TestRegistryFull(t *testing.T) {
	var r registry
	tabs := make([]*wrTable, maxTables)
	for i := range tabs {
		tabs[i] = &wrTable{}
		if err := r.add(tabs[i]); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	if err := r.add(&wrTable{}); !errors.Is(err, errTooManyQueues) {
		t.Fatalf("add beyond %d tables: %v", maxTables, err)
	}
	r.remove(tabs[12345])
	if err := r.add(&wrTable{}); err != nil {
		t.Fatalf("add after a remove: %v", err)
	}
	var empty registry
	if got, _ := empty.lookup(makeWRID(300, 1, 0)); got != nil {
		t.Fatal("lookup of a slot never used")
	}
}
