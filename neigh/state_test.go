package neigh

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

func link(qpn ib.QPN, last byte, flags ib.LinkFlags) ib.LinkAddr {
	return ib.LinkAddr{Flags: flags, QPN: qpn, GID: ib.GIDFromAddr(netip.AddrFrom4([4]byte{10, 1, 0, last}))}
}

var (
	linkA   = link(0x100, 1, ib.FlagRC)
	linkARC = link(0x100, 1, 0)         // the same node without connected mode
	linkA2  = link(0x300, 1, ib.FlagRC) // linkA's port restarted: a new QPN
	linkB   = link(0x200, 2, ib.FlagRC)
)

// TestTransitions drives one entry through each event from each state on a
// fake clock: the state it ends in, what it asks for, its link address and
// probe count.
func TestTransitions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type start struct {
		state  State
		link   ib.LinkAddr
		claim  ib.LinkAddr
		probes int
		age    time.Duration // since Updated
	}
	for _, tc := range []struct {
		name      string
		from      start
		event     func(e *Entry, now time.Time) Action
		want      Action
		state     State
		link      ib.LinkAddr
		probes    int
		unicast   bool // the next probe's kind
		updatedAt bool // Updated moved to now
	}{
		// Heard: replies, announcements, solicitation sources.
		{"incomplete hears", start{state: Incomplete, probes: 1}, heard(linkA), ActResolved, Reachable, linkA, 0, true, true},
		{"failed hears", start{state: Failed, probes: 3}, heard(linkA), ActResolved, Reachable, linkA, 0, true, true},
		{"reachable confirmed", start{state: Reachable, link: linkA, age: time.Second}, heard(linkA), 0, Reachable, linkA, 0, true, true},
		{"stale confirmed", start{state: Stale, link: linkA, probes: 1}, heard(linkA), 0, Reachable, linkA, 0, true, true},
		{"flags changed", start{state: Reachable, link: linkA}, heard(linkARC), ActResolved, Reachable, linkARC, 0, true, true},
		{"claim probes the old address", start{state: Reachable, link: linkA}, heard(linkB), ActProbe, Probing, linkA, 1, true, true},
		{"old address refutes", start{state: Probing, link: linkA, claim: linkB, probes: 1}, heard(linkA), ActRefuted, Reachable, linkA, 0, true, true},
		{"same claim again", start{state: Probing, link: linkA, claim: linkB, probes: 2}, heard(linkB), 0, Probing, linkA, 2, true, false},
		// Proven: a connection to the claimed address came up.
		{"restart proven", start{state: Probing, link: linkA, claim: linkA2, probes: 1}, proven(linkA2), ActResolved, Reachable, linkA2, 0, true, true},
		{"other port not proven", start{state: Probing, link: linkA, claim: linkB, probes: 1}, proven(linkB), 0, Probing, linkA, 1, true, false},
		{"reachable not moved", start{state: Reachable, link: linkA}, proven(linkA2), 0, Reachable, linkA, 0, true, false},
		// Restarted: a claim from the claimed QPN itself.
		{"restart announced", start{state: Reachable, link: linkA}, restarted(linkA2), ActResolved, Reachable, linkA2, 0, true, true},
		{"restart announced while probing", start{state: Probing, link: linkA, claim: linkA2, probes: 1}, restarted(linkA2), ActResolved, Reachable, linkA2, 0, true, true},
		{"other port announced probes", start{state: Reachable, link: linkA}, restarted(linkB), ActProbe, Probing, linkA, 1, true, true},
		{"unresolved announced", start{state: Incomplete, probes: 1}, restarted(linkA2), ActResolved, Reachable, linkA2, 0, true, true},
		// Gone: the CM said the QPN is no more.
		{"gone lets the restart claim win", start{state: Probing, link: linkA, claim: linkA2, probes: 1}, gone, ActResolved, Reachable, linkA2, 0, true, true},
		{"gone without a claim suspects", start{state: Reachable, link: linkA}, gone, ActProbe, Stale, linkA, 1, true, true},
		{"gone keeps another port's claim probing", start{state: Probing, link: linkA, claim: linkB, probes: 1}, gone, 0, Probing, linkA, 1, true, false},
		// Wanted: a packet queued.
		{"first packet asks", start{state: Incomplete}, wanted, ActProbe, Incomplete, ib.LinkAddr{}, 1, false, false},
		{"later packets wait", start{state: Incomplete, probes: 1}, wanted, 0, Incomplete, ib.LinkAddr{}, 1, false, false},
		{"failed asks again", start{state: Failed, probes: 3}, wanted, ActProbe, Incomplete, ib.LinkAddr{}, 1, false, true},
		{"resolved connects", start{state: Reachable, link: linkA}, wanted, ActConnect, Reachable, linkA, 0, true, false},
		{"stale connects", start{state: Stale, link: linkA, probes: 1}, wanted, ActConnect, Stale, linkA, 1, true, false},
		// Suspect: the peer refused or lost a connection.
		{"reachable suspected", start{state: Reachable, link: linkA}, suspect, ActProbe, Stale, linkA, 1, true, true},
		{"stale not again", start{state: Stale, link: linkA, probes: 2}, suspect, 0, Stale, linkA, 2, true, false},
		// Tick: timers.
		{"incomplete waits", start{state: Incomplete, probes: 1, age: ProbeDeadline(1) - 1}, tick, 0, Incomplete, ib.LinkAddr{}, 1, false, false},
		{"incomplete asks again", start{state: Incomplete, probes: 1, age: ProbeDeadline(1)}, tick, ActProbe, Incomplete, ib.LinkAddr{}, 2, false, false},
		{"incomplete fails", start{state: Incomplete, probes: MaxProbes, age: ProbeDeadline(MaxProbes)}, tick, ActFailPending, Failed, ib.LinkAddr{}, MaxProbes, false, true},
		{"probing asks again", start{state: Probing, link: linkA, claim: linkB, probes: 1, age: ProbeDeadline(1)}, tick, ActProbe, Probing, linkA, 2, true, false},
		{"silence lets the claim win", start{state: Probing, link: linkA, claim: linkB, probes: MaxProbes, age: ProbeDeadline(MaxProbes)}, tick, ActResolved, Reachable, linkB, 0, true, true},
		{"reachable holds", start{state: Reachable, link: linkA, age: ReachableTime}, tick, 0, Reachable, linkA, 0, true, false},
		{"reachable goes stale", start{state: Reachable, link: linkA, age: ReachableTime + 1}, tick, ActProbe, Stale, linkA, 1, true, true},
		{"stale probes again", start{state: Stale, link: linkA, probes: 1, age: ProbeDeadline(1)}, tick, ActProbe, Stale, linkA, 2, true, false},
		{"stale unused stays", start{state: Stale, link: linkA, age: time.Hour}, tick, 0, Stale, linkA, 0, true, false},
		{"stale silent is forgotten", start{state: Stale, link: linkA, probes: MaxProbes, age: ProbeDeadline(MaxProbes)}, tick, ActForget, Stale, linkA, MaxProbes, true, false},
		{"failed kept", start{state: Failed, probes: MaxProbes, age: FailedTime}, tick, 0, Failed, ib.LinkAddr{}, MaxProbes, false, false},
		{"failed forgotten", start{state: Failed, probes: MaxProbes, age: FailedTime + 1}, tick, ActForget, Failed, ib.LinkAddr{}, MaxProbes, false, false},
		// Rail: the bond's entries; nothing from the fabric or the clock moves them.
		{"rail deaf to claims", start{state: Rail, link: linkA}, heard(linkB), 0, Rail, linkA, 0, true, false},
		{"rail deaf to restarts", start{state: Rail, link: linkA}, restarted(linkA2), 0, Rail, linkA, 0, true, false},
		{"rail not suspected", start{state: Rail, link: linkA}, suspect, 0, Rail, linkA, 0, true, false},
		{"rail not gone", start{state: Rail, link: linkA}, gone, 0, Rail, linkA, 0, true, false},
		{"rail never ages", start{state: Rail, link: linkA, age: time.Hour}, tick, 0, Rail, linkA, 0, true, false},
		{"rail connects", start{state: Rail, link: linkA}, wanted, ActConnect, Rail, linkA, 0, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(tc.from.age)
			e := &Entry{State: tc.from.state, Link: tc.from.link, Claim: tc.from.claim, Probes: tc.from.probes, Updated: t0}
			got := tc.event(e, now)
			if got != tc.want || e.State != tc.state || e.Link != tc.link || e.Probes != tc.probes {
				t.Errorf("action %b state %v link %v probes %d, want %b %v %v %d", got, e.State, e.Link, e.Probes, tc.want, tc.state, tc.link, tc.probes)
			}
			if e.ProbeUnicast() != tc.unicast {
				t.Errorf("ProbeUnicast = %v, want %v", e.ProbeUnicast(), tc.unicast)
			}
			if moved := e.Updated.Equal(now) && !now.Equal(t0); moved != tc.updatedAt && tc.from.age != 0 {
				t.Errorf("Updated = %v (now %v), moved %v, want %v", e.Updated, now, moved, tc.updatedAt)
			}
		})
	}
}

func heard(l ib.LinkAddr) func(*Entry, time.Time) Action {
	return func(e *Entry, now time.Time) Action { return e.Heard(l, now) }
}

func wanted(e *Entry, now time.Time) Action { return e.Wanted(now) }
func proven(l ib.LinkAddr) func(*Entry, time.Time) Action {
	return func(e *Entry, now time.Time) Action { return e.Proven(l, now) }
}
func suspect(e *Entry, now time.Time) Action { return e.Suspect(now) }
func gone(e *Entry, now time.Time) Action    { return e.Gone(now) }
func restarted(l ib.LinkAddr) func(*Entry, time.Time) Action {
	return func(e *Entry, now time.Time) Action { return e.Restarted(l, now) }
}
func tick(e *Entry, now time.Time) Action { return e.Tick(now) }

// TestResolutionFailsOnTime runs an unanswered resolution on a fake clock:
// requests at 0, 200, 600 and 1400 ms, then Failed at 3 s, as the kernel.
func TestResolutionFailsOnTime(t *testing.T) {
	now := time.Unix(0, 0)
	e := &Entry{State: Incomplete, Updated: now}
	var probes []time.Duration
	start := now
	a := e.Wanted(now)
	for step := 0; a&(ActFailPending|ActForget) == 0 && step < 1000; step++ {
		if a.Has(ActProbe) {
			probes = append(probes, now.Sub(start))
		}
		now = now.Add(10 * time.Millisecond)
		a = e.Tick(now)
	}
	want := []time.Duration{0, 200 * time.Millisecond, 600 * time.Millisecond, 1400 * time.Millisecond}
	if !slices.Equal(probes, want) {
		t.Fatalf("probes at %v, want %v", probes, want)
	}
	if !a.Has(ActFailPending) || e.State != Failed || now.Sub(start) != 3*time.Second {
		t.Fatalf("after %v: action %b state %v", now.Sub(start), a, e.State)
	}
}

// FuzzStateMachine feeds one entry random events on a random clock and
// checks what must always hold: probes never run past MaxProbes, a
// resolved entry has a link address, a probing entry's claim is another
// node, and every action fits the state it leaves.
func FuzzStateMachine(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{1, 4, 4, 4, 4, 4, 0, 2, 5, 5, 5, 5})
	f.Fuzz(func(t *testing.T, events []byte) {
		now := time.Unix(0, 0)
		e := &Entry{State: Incomplete, Updated: now}
		links := []ib.LinkAddr{linkA, linkARC, linkB}
		for _, ev := range events {
			var a Action
			switch ev % 6 {
			case 0, 1:
				l := links[int(ev/6)%len(links)]
				a = e.Heard(l, now)
				if e.Link != l && e.State != Probing {
					t.Fatalf("heard %v, entry %v at %v", l, e.State, e.Link)
				}
			case 2:
				a = e.Wanted(now)
			case 3:
				a = e.Suspect(now)
			default:
				now = now.Add(time.Duration(ev) * 10 * time.Millisecond)
				a = e.Tick(now)
			}
			switch {
			case e.Probes > MaxProbes:
				t.Fatalf("%d probes in %v", e.Probes, e.State)
			case e.Resolved() && e.Link == (ib.LinkAddr{}):
				t.Fatalf("%v without a link address", e.State)
			case e.State == Probing && e.Claim.SameNode(e.Link):
				t.Fatalf("probing for a claim of the same node %v", e.Claim)
			case a.Has(ActProbe) && e.Probes == 0:
				t.Fatalf("probe asked with no probe counted (%v)", e.State)
			case a.Has(ActResolved) && e.State != Reachable:
				t.Fatalf("resolved into %v", e.State)
			case a.Has(ActFailPending) && e.State != Failed:
				t.Fatalf("pending failed in %v", e.State)
			case a.Has(ActConnect) && !e.Resolved():
				t.Fatalf("connect asked while %v", e.State)
			}
		}
	})
}

// TestMovedToSibling: an announcement from the sibling the node named
// moves the entry at once and makes the port it left the sibling; any
// other is an ordinary claim.
func TestMovedToSibling(t *testing.T) {
	now := time.Unix(1000, 0)
	hwC := hwB
	hwC.QPN++
	for _, tc := range []struct {
		name        string
		state       State
		sibling     ib.LinkAddr
		claim       ib.LinkAddr
		want        Action
		wantLink    ib.LinkAddr
		wantSibling ib.LinkAddr
		wantState   State
	}{
		{"to the sibling", Reachable, hwB, hwB, ActResolved, hwB, hwA, Reachable},
		{"to the sibling, from Stale", Stale, hwB, hwB, ActResolved, hwB, hwA, Reachable},
		{"no sibling known", Reachable, ib.LinkAddr{}, hwB, ActProbe, hwA, ib.LinkAddr{}, Probing},
		{"another QPN at the sibling's port", Reachable, hwB, hwC, ActProbe, hwA, hwB, Probing},
		{"unresolved: heard as any", Incomplete, hwB, hwB, ActResolved, hwB, hwB, Reachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Entry{State: tc.state, Link: hwA, Sibling: tc.sibling}
			if tc.state == Incomplete {
				e.Link = ib.LinkAddr{}
			}
			if got := e.MovedToSibling(tc.claim, now); got != tc.want {
				t.Errorf("action %v, want %v", got, tc.want)
			}
			if e.Link != tc.wantLink || e.Sibling != tc.wantSibling || e.State != tc.wantState {
				t.Errorf("entry %v sibling %v %v, want %v sibling %v %v", e.Link, e.Sibling, e.State, tc.wantLink, tc.wantSibling, tc.wantState)
			}
		})
	}
}

// TestNoteSibling: what a node says of its other port sticks to its
// entry or candidate only while that is at the address it spoke from,
// and a candidate that moves forgets it.
func TestNoteSibling(t *testing.T) {
	now := time.Unix(1000, 0)
	ipE, ipC := netip.MustParseAddr("192.168.100.7"), netip.MustParseAddr("192.168.100.8")
	hwC := hwB
	hwC.GID[15]++
	tab := NewTable(8, 64)
	e, _ := tab.Create(ipE, now)
	e.Link, e.State = hwA, Reachable
	tab.NoteSibling(ipE, hwC, hwB) // spoken from another address: ignored
	tab.NoteSibling(ipE, hwA, hwA) // itself: ignored
	if e.Sibling != (ib.LinkAddr{}) {
		t.Fatalf("sibling %v noted from a packet not at the entry's address", e.Sibling)
	}
	tab.NoteSibling(ipE, hwA, hwB)
	if e.Sibling != hwB {
		t.Fatalf("entry's sibling %v, want %v", e.Sibling, hwB)
	}
	tab.Learn(ipC, hwA, hwA.GID, now)
	tab.NoteSibling(ipC, hwA, hwB)
	c, _ := tab.Create(ipC, now)
	if c.Link != hwA || c.Sibling != hwB {
		t.Fatalf("entry from a candidate: %v sibling %v, want %v sibling %v", c.Link, c.Sibling, hwA, hwB)
	}
	tab.Delete(c)
	tab.Learn(ipC, hwA, hwA.GID, now)
	tab.NoteSibling(ipC, hwA, hwB)
	tab.Learn(ipC, hwC, hwC.GID, now) // the candidate moved
	if c, _ := tab.Create(ipC, now); c.Sibling != (ib.LinkAddr{}) {
		t.Fatalf("a candidate that moved kept its sibling %v", c.Sibling)
	}
	tab.NoteSibling(ipE, hwA, ib.LinkAddr{}) // its other port went down
	if e.Sibling != (ib.LinkAddr{}) {
		t.Fatalf("a packet naming no sibling left %v", e.Sibling)
	}
}

// TestPin: the bond's Rail entries are made, moved and left alone by Pin,
// and resolved only when their address is new.
func TestPin(t *testing.T) {
	now := time.Unix(1000, 0)
	ip := netip.MustParseAddr("192.168.100.9")
	tab := NewTable(8, 64)
	for _, tc := range []struct {
		name   string
		link   ib.LinkAddr
		want   Action
		oldWas ib.LinkAddr
	}{
		{"new entry", linkA, ActResolved, ib.LinkAddr{}},
		{"the same again", linkA, 0, linkA},
		{"moved", linkB, ActResolved, linkA},
	} {
		e, a, old := tab.Pin(ip, tc.link, now)
		if e == nil || a != tc.want || old != tc.oldWas || e.State != Rail || e.Link != tc.link {
			t.Fatalf("%s: Pin = %+v, %b, old %v; want Rail at %v, %b, old %v", tc.name, e, a, old, tc.link, tc.want, tc.oldWas)
		}
	}
	if got := tab.ByLink(linkB); len(got) != 1 {
		t.Fatalf("ByLink finds %d Rail entries, want 1: connections publish to it", len(got))
	}
	// A learned entry becomes the bond's.
	ip2 := netip.MustParseAddr("192.168.100.10")
	e, _ := tab.Create(ip2, now)
	e.Link, e.State, e.Sibling = linkA, Reachable, linkB
	if e2, a, old := tab.Pin(ip2, linkB, now); e2 != e || a != ActResolved || old != linkA || e.Sibling != (ib.LinkAddr{}) {
		t.Fatalf("pinning a learned entry: %b old %v sibling %v", a, old, e.Sibling)
	}
	full := NewTable(8, 0)
	if e, _, _ := full.Pin(ip, linkA, now); e != nil {
		t.Fatalf("a full table pinned %v", e)
	}
}
