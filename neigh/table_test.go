package neigh

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

func TestTable(t *testing.T) {
	now := time.Now()
	tab := NewTable(2, 3)
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	if tab.Lookup(a) != nil {
		t.Fatal("empty table found an entry")
	}
	ea, act := tab.Create(a, now)
	if again, _ := tab.Create(a, now); ea == nil || act != 0 || ea.State != Incomplete || tab.Lookup(a) != ea || again != ea {
		t.Fatalf("Create: %+v, %v", ea, act)
	}
	// The datapath sees a published path; nil until then.
	if ea.Path() != nil {
		t.Fatal("new entry has a path")
	}
	link := ib.LinkAddr{Flags: ib.FlagRC, QPN: 0x123, GID: ib.GIDFromAddr(netip.MustParseAddr("10.1.0.1"))}
	ea.Link, ea.State = link, Reachable
	ea.SetPath(&Path{Link: link, MTU: 2044})
	if p := tab.Lookup(a).Path(); p == nil || p.MTU != 2044 {
		t.Fatalf("published path %+v", p)
	}
	// Pending queues are bounded.
	for k, want := range []bool{true, true, false} {
		if got := tab.Queue(ea, Pending{Slot: uint32(k)}); got != want {
			t.Errorf("Queue #%d = %v, want %v", k, got, want)
		}
	}
	// ByLink ignores the flags and skips unresolved entries.
	eb, _ := tab.Create(b, now)
	other := link
	other.Flags = 0
	if got := tab.ByLink(other); len(got) != 1 || got[0] != ea {
		t.Errorf("ByLink = %v", got)
	}
	// Off-link destinations resolve to their next hop's entry.
	far := netip.MustParseAddr("172.16.0.9")
	if !tab.SetVia(far, ea) || tab.Lookup(far) != ea || tab.Get(far) != nil {
		t.Errorf("SetVia: lookup %v, get %v", tab.Lookup(far), tab.Get(far))
	}
	tab.ClearVia()
	if tab.Lookup(far) != nil {
		t.Error("ClearVia kept the next hop")
	}
	tab.SetVia(far, ea)
	// The table is bounded.
	if e, _ := tab.Create(netip.MustParseAddr("10.0.0.3"), now); e == nil {
		t.Fatal("third entry refused")
	}
	if e, _ := tab.Create(netip.MustParseAddr("10.0.0.4"), now); e != nil {
		t.Error("fourth entry accepted beyond MaxEntries 3")
	}
	// Delete hands back the queue, unpublishes, and drops next hops through it.
	if p := tab.Delete(ea); len(p) != 2 {
		t.Errorf("Delete returned %d pending, want 2", len(p))
	}
	if tab.Lookup(a) != nil || tab.Lookup(far) != nil || ea.Path() != nil {
		t.Error("deleted entry still visible")
	}
	if tab.Delete(ea) != nil || tab.Lookup(b) != eb || len(tab.All()) != 2 {
		t.Errorf("after delete: all %d", len(tab.All()))
	}
}

func BenchmarkLookup(b *testing.B) {
	tab := NewTable(8, 1024)
	now := time.Now()
	for i := range 1000 {
		tab.Create(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), now)
	}
	dst := netip.AddrFrom4([4]byte{10, 0, 1, 200})
	b.ReportAllocs()
	for range b.N {
		if tab.Lookup(dst) == nil {
			b.Fatal("missing")
		}
	}
}
