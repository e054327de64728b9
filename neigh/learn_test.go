package neigh

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

func addr(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 0, byte(k >> 8), byte(k)})
}

// node returns a distinct fabric node (UD source) per k.
func node(k int) ib.LinkAddr { return link(ib.QPN(0x100+k), byte(k), ib.FlagRC) }

// TestLearnIsBounded floods the table from many nodes: candidates never
// exceed MaxCandidates, the oldest go first, and no entry (so no path and
// no route) is made.
func TestLearnIsBounded(t *testing.T) {
	now := time.Unix(0, 0)
	tab := NewTable(8, 100)
	tab.MaxCandidates = 4
	var got []Learned
	for k := range 6 {
		n := node(k)
		got = append(got, tab.Learn(addr(k), n, n.GID, now))
	}
	want := []Learned{LearnedNew, LearnedNew, LearnedNew, LearnedNew, LearnedEvicted, LearnedEvicted}
	for k := range want {
		if got[k] != want[k] {
			t.Fatalf("Learn results %v, want %v", got, want)
		}
	}
	if n := tab.NumCandidates(); n != 4 {
		t.Fatalf("%d candidates, want 4", n)
	}
	if len(tab.All()) != 0 || tab.Lookup(addr(5)) != nil {
		t.Fatal("learning made entries the datapath sees")
	}
	// The two oldest were evicted: using them finds nothing to promote.
	for k, promoted := range []bool{false, false, true, true, true, true} {
		e, a := tab.Create(addr(k), now)
		if got := a.Has(ActResolved); got != promoted {
			t.Errorf("address %d: promoted %v, want %v", k, got, promoted)
		}
		if promoted && (e.State != Stale || e.Link != node(k) || !a.Has(ActProbe) || !e.ProbeUnicast()) {
			t.Errorf("address %d promoted to %v at %v (action %b), want Stale at %v with a unicast probe", k, e.State, e.Link, a, node(k))
		}
		if !promoted && e.State != Incomplete {
			t.Errorf("address %d: state %v, want Incomplete", k, e.State)
		}
	}
	if n := tab.NumCandidates(); n != 0 {
		t.Errorf("%d candidates left after all were used", n)
	}
}

// TestLearnChurnKeepsEntries: a flood of candidates never displaces an
// entry in use, and the map behind them stays at the bound.
func TestLearnChurnKeepsEntries(t *testing.T) {
	now := time.Unix(0, 0)
	tab := NewTable(8, 100)
	tab.MaxCandidates = 16
	used, _ := tab.Create(addr(9999), now)
	used.Heard(node(1), now)
	for k := range 10000 {
		n := node(k % 200) // many nodes, each within its budget
		now = now.Add(time.Second / LearnRate)
		tab.Learn(addr(k), n, n.GID, now)
	}
	if tab.Get(addr(9999)) != used || tab.NumCandidates() != 16 || len(tab.candIndex) != 16 || len(tab.cands) != 16 {
		t.Fatalf("after the flood: entry %v, %d candidates (%d indexed, ring %d)", tab.Get(addr(9999)), tab.NumCandidates(), len(tab.candIndex), len(tab.cands))
	}
	// The newest survive.
	for _, c := range tab.Candidates() {
		if k := int(c.IP.As4()[2])<<8 | int(c.IP.As4()[3]); k < 10000-16 {
			t.Errorf("candidate %v survived; only the 16 newest should", c.IP)
		}
	}
}

// TestLearnRateLimitsEachNode: one node teaches LearnBurst at once and
// LearnRate a second after that; another node is not held back by it.
func TestLearnRateLimitsEachNode(t *testing.T) {
	now := time.Unix(0, 0)
	tab := NewTable(8, 100)
	attacker, other := node(1), node(2)
	learned := func(from ib.LinkAddr, first, n int) int {
		ok := 0
		for k := range n {
			if tab.Learn(addr(first+k), from, from.GID, now) != LearnedLimited {
				ok++
			}
		}
		return ok
	}
	if got := learned(attacker, 0, 100); got != LearnBurst {
		t.Errorf("a burst of 100 taught %d, want %d", got, LearnBurst)
	}
	if got := learned(other, 1000, 3); got != 3 {
		t.Errorf("another node taught %d of 3 while the first was limited", got)
	}
	now = now.Add(time.Second)
	if got := learned(attacker, 200, 100); got != LearnRate {
		t.Errorf("a second later %d, want %d", got, LearnRate)
	}
}

// TestCandidateTTL: a candidate too old to believe is not promoted, and
// learning the same address again refreshes it in place.
func TestCandidateTTL(t *testing.T) {
	now := time.Unix(0, 0)
	tab := NewTable(8, 100)
	n, m := node(1), node(2)
	tab.Learn(addr(1), n, n.GID, now)
	tab.Learn(addr(2), n, n.GID, now)
	if r := tab.Learn(addr(2), m, m.GID, now.Add(CandidateTTL/2)); r != LearnedRefreshed {
		t.Errorf("learning again: %v, want refreshed", r)
	}
	now = now.Add(CandidateTTL)
	if e, a := tab.Create(addr(1), now); a != 0 || e.State != Incomplete {
		t.Errorf("stale candidate promoted: %v %b", e.State, a)
	}
	if e, a := tab.Create(addr(2), now); !a.Has(ActResolved) || e.Link != m {
		t.Errorf("refreshed candidate: %v at %v (%b), want promoted at %v", e.State, e.Link, a, m)
	}
}

// BenchmarkLearn is the cost of one solicitation's learning in a full
// table: it must not allocate.
func BenchmarkLearn(b *testing.B) {
	now := time.Unix(0, 0)
	tab := NewTable(8, 100)
	for k := range DefaultMaxCandidates * 2 {
		n := node(k)
		tab.Learn(addr(k), n, n.GID, now)
	}
	b.ReportAllocs()
	for k := range b.N {
		n := node(k % 64)
		now = now.Add(time.Second)
		tab.Learn(addr(k%60000), n, n.GID, now)
	}
}

// FuzzLearn runs random learning, use and time against a small table and
// checks its bookkeeping: candidates within the bound, the index and the
// ring agreeing, a candidate never beside an entry for the same address.
func FuzzLearn(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 200, 201})
	f.Fuzz(func(t *testing.T, ops []byte) {
		now := time.Unix(0, 0)
		tab := NewTable(2, 8)
		tab.MaxCandidates = 5
		for _, op := range ops {
			ip, n := addr(int(op%16)), node(int(op/16%4))
			switch op % 4 {
			case 0, 1:
				if tab.Get(ip) == nil {
					tab.Learn(ip, n, n.GID, now)
				}
			case 2:
				if e, _ := tab.Create(ip, now); e != nil && op&0x80 != 0 {
					tab.Delete(e)
				}
			case 3:
				now = now.Add(time.Duration(op) * 100 * time.Millisecond)
			}
			live := 0
			for k, c := range tab.cands {
				if !c.ip.IsValid() {
					continue
				}
				live++
				if i, ok := tab.candIndex[c.ip]; !ok || int(i) != k {
					t.Fatalf("candidate %v in slot %d indexed at %d (%v)", c.ip, k, i, ok)
				}
				if tab.Get(c.ip) != nil {
					t.Fatalf("%v is both an entry and a candidate", c.ip)
				}
			}
			if live != len(tab.candIndex) || live > tab.MaxCandidates || len(tab.cands) > tab.MaxCandidates {
				t.Fatalf("%d live candidates, %d indexed, ring %d, bound %d", live, len(tab.candIndex), len(tab.cands), tab.MaxCandidates)
			}
			if len(tab.budgets) > maxSources {
				t.Fatalf("%d budgets", len(tab.budgets))
			}
		}
	})
}
