package softib

import (
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// QPNs are unpredictable: no two in a row are neighbours (a connection QP
// was the UD QPN + 1), none is reserved (0, 1, multicast), none repeats
// among live QPs, and a freed one is not handed out again soon. 10,000 of
// them come quickly.
func TestQPNsUnpredictable(t *testing.T) {
	h := newHost(t, "127.0.0.1", testutil.Port(14840))
	const n = 10000
	start := time.Now()
	qps := make([]ib.QP, 0, n)
	seen := map[ib.QPN]bool{}
	neighbours := 0
	for i := range n {
		q, err := h.dev.CreateQP(ib.QPAttr{Type: ib.RC, SendCQ: h.scq, RecvCQ: h.rcq, MaxSend: 1, MaxRecv: 1})
		if err != nil {
			t.Fatal(err)
		}
		num := q.Num()
		if num < 2 || num >= ib.MulticastQPN {
			t.Fatalf("QPN %#x", num)
		}
		if seen[num] {
			t.Fatalf("QPN %#x handed out twice", num)
		}
		seen[num] = true
		if i > 0 {
			if d := int(num) - int(qps[i-1].Num()); d >= -16 && d <= 16 {
				neighbours++
			}
		}
		qps = append(qps, q)
	}
	t.Logf("%d QPs in %v", n, time.Since(start))
	// Two random draws land within 16 of each other with odds 33/2^24.
	if neighbours > 1 {
		t.Errorf("%d of %d QPNs are within 16 of the one before", neighbours, n)
	}
	// Free a thousand and allocate a thousand: none comes back.
	freed := map[ib.QPN]bool{}
	for _, q := range qps[:1000] {
		freed[q.Num()] = true
		q.Close()
	}
	for range 1000 {
		q, err := h.dev.CreateQP(ib.QPAttr{Type: ib.UD, SendCQ: h.scq, RecvCQ: h.rcq, MaxSend: 1, MaxRecv: 1})
		if err != nil {
			t.Fatal(err)
		}
		if freed[q.Num()] {
			t.Fatalf("freed QPN %#x handed out again at once", q.Num())
		}
		if seen[q.Num()] && !freed[q.Num()] {
			t.Fatalf("live QPN %#x handed out again", q.Num())
		}
	}
}

// The allocator skips reserved, live and quarantined numbers, and the
// quarantine forgets the oldest once full.
func TestQPNAllocatorSkips(t *testing.T) {
	var a qpnAllocator
	var live qpTable
	for range 1000 {
		n := a.alloc(live.has)
		if n < 2 || n == ib.MulticastQPN || live.has(n) {
			t.Fatalf("QPN %#x", n)
		}
		live.put(&qp{num: n})
	}
	if got := len(live.all()); got != 1000 {
		t.Fatalf("table holds %d QPs, want 1000", got)
	}
	for i := range qpnQuarantine + 10 {
		a.release(ib.QPN(0x100 + i))
	}
	if a.n != qpnQuarantine || len(a.isFree) != qpnQuarantine {
		t.Fatalf("quarantine holds %d (%d in the set), want %d", a.n, len(a.isFree), qpnQuarantine)
	}
	if _, ok := a.isFree[0x100]; ok {
		t.Error("the oldest freed QPN is still quarantined")
	}
	if _, ok := a.isFree[ib.QPN(0x100+qpnQuarantine+9)]; !ok {
		t.Error("the newest freed QPN is not quarantined")
	}
}
