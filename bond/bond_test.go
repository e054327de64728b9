package bond

import (
	"errors"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/netdev"
	"github.com/ipoibd/ipoibd/netdev/netdevtest"
	"github.com/ipoibd/ipoibd/offload"
)

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		name    string
		active  int
		healthy []bool
		r       Reselect
		want    int
	}{
		{"primary up and active", 0, []bool{true, true}, ReselectAlways, 0},
		{"primary down: the standby", 0, []bool{false, true}, ReselectAlways, 1},
		{"every port down: stay", 0, []bool{false, false}, ReselectAlways, 0},
		{"primary back, always", 1, []bool{true, true}, ReselectAlways, 0},
		{"primary back, better: equal ports stay", 1, []bool{true, true}, ReselectBetter, 1},
		{"primary back, failure: stay", 1, []bool{true, true}, ReselectFailure, 1},
		{"active fails, failure: the primary", 1, []bool{true, false}, ReselectFailure, 0},
		{"active fails, third port", 1, []bool{false, false, true}, ReselectAlways, 2},
		{"standby down, active up", 0, []bool{true, false}, ReselectFailure, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := choose(tc.active, tc.healthy, tc.r); got != tc.want {
				t.Errorf("choose = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestDeal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		active  int
		healthy []bool
		queues  int
		spread  bool
		want    []int
	}{
		{"active-backup", 0, []bool{true, true}, 4, false, []int{0}},
		{"spread over both", 0, []bool{true, true}, 2, true, []int{0, 1}},
		{"spread, the active one first", 1, []bool{true, true}, 4, true, []int{1, 0}},
		{"spread, one port down", 0, []bool{true, false}, 4, true, []int{0}},
		{"spread, the active port down", 0, []bool{false, true}, 4, true, []int{0}},
		{"spread, one queue: the active port only", 0, []bool{true, true}, 1, true, []int{0}},
		{"spread, three ports, two queues", 2, []bool{true, true, true}, 2, true, []int{2, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deal(tc.active, tc.healthy, tc.queues, tc.spread); !slices.Equal(got, tc.want) {
				t.Errorf("deal = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in      string
		spread  bool
		wantErr bool
	}{
		{"spread", true, false},
		{"active-backup", false, false},
		{"balance-rr", false, true},
		{"", false, true},
	} {
		spread, err := ParseMode(tc.in)
		if spread != tc.spread || (err != nil) != tc.wantErr {
			t.Errorf("ParseMode(%q) = %v, %v", tc.in, spread, err)
		}
	}
}

func TestParseReselect(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Reselect
		wantErr bool
	}{
		{"always", ReselectAlways, false},
		{"better", ReselectBetter, false},
		{"failure", ReselectFailure, false},
		{"", 0, true},
		{"Always", 0, true},
	} {
		got, err := ParseReselect(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParseReselect(%q) = %v, %v", tc.in, got, err)
		}
	}
}

// TestLegsTakeTurns: only the active leg reads the netdev and sets its MTU
// and routes; a switch hands the reads to the other leg, and a closed
// leg's reader returns.
func TestLegsTakeTurns(t *testing.T) {
	nd := netdevtest.New().Open(netdev.Config{Name: "ib0", MTU: 2044})
	b := &Bond{nd: nd, turn: make(chan struct{}), wake: make(chan struct{}, 1), owners: make([]atomic.Int32, nd.Queues())}
	a, s := &leg{b: b, k: 0}, &leg{b: b, k: 1}
	b.legs = []*leg{a, s}
	type read struct {
		leg *leg
		n   int
		err error
	}
	reads := make(chan read, 2)
	for _, l := range b.legs {
		go func() {
			var h offload.Hdr
			buf := make([]byte, 64)
			n, err := l.Read(0, buf, &h)
			reads <- read{l, n, err}
		}()
	}
	nd.In <- netdevtest.Packet{B: []byte{0x45, 1, 2}}
	if r := <-reads; r.leg != a || r.n != 3 || r.err != nil {
		t.Fatalf("first packet read by leg %d: %d, %v; want leg 0", r.leg.k, r.n, r.err)
	}
	dst := netip.MustParseAddr("192.168.9.2")
	if _, err := s.Routes().Set(dst, 1500); err != nil || s.SetMTU(1500) != nil || nd.MTU() != 2044 {
		t.Fatalf("the standby leg set the MTU (%d) or failed: %v", nd.MTU(), err)
	}
	b.mu.Lock()
	b.active.Store(1)
	b.owners[0].Store(1)
	b.nextTurn()
	b.mu.Unlock()
	nd.In <- netdevtest.Packet{B: []byte{0x45, 3}}
	if r := <-reads; r.leg != s || r.n != 2 {
		t.Fatalf("after the switch, read by leg %d (%d octets); want leg 1", r.leg.k, r.n)
	}
	if err := s.SetMTU(1500); err != nil || nd.MTU() != 1500 {
		t.Fatalf("the active leg's MTU: %d, %v", nd.MTU(), err)
	}
	// The new standby's reader waits its turn; closing it ends the wait.
	go func() {
		var h offload.Hdr
		n, err := a.Read(0, make([]byte, 64), &h)
		reads <- read{a, n, err}
	}()
	_ = a.Close()
	if r := <-reads; r.leg != a || !errors.Is(r.err, errLegClosed) {
		t.Fatalf("closed leg's read: leg %d, %v", r.leg.k, r.err)
	}
	// A leg's carrier is its port's state, which wakes the reselection.
	_ = s.SetCarrier(false)
	if s.healthy.Load() || len(b.wake) != 1 {
		t.Fatalf("SetCarrier(false): healthy %v, wake %d", s.healthy.Load(), len(b.wake))
	}
}

// TestUsable: a port that fails every connection is out of use while
// another port is up and reaches its peers; when none does, the ports'
// state alone counts.
func TestUsable(t *testing.T) {
	for _, tc := range []struct {
		name              string
		up, unreach, want []bool
	}{
		{"all well", []bool{true, true}, []bool{false, false}, []bool{true, true}},
		{"the primary unreachable", []bool{true, true}, []bool{true, false}, []bool{false, true}},
		{"both unreachable: the ports' state", []bool{true, true}, []bool{true, true}, []bool{true, true}},
		{"the other port down: stay", []bool{true, false}, []bool{true, false}, []bool{true, false}},
		{"down and unreachable", []bool{false, true}, []bool{false, true}, []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Bond{}
			for k := range tc.up {
				l := &leg{b: b, k: k, unreachable: tc.unreach[k]}
				l.healthy.Store(tc.up[k])
				b.legs = append(b.legs, l)
			}
			if got := b.usable(); !slices.Equal(got, tc.want) {
				t.Errorf("usable = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestReachStep: a port that fails every connection is held out for a
// hold that doubles each time (up to 10 min), let try again when it is
// over, and healed at once (hold reset) when a connection comes up on it.
func TestReachStep(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := &leg{}
	for _, st := range []struct {
		at                  time.Duration
		says                bool
		began, retry, unrch bool
		hold                time.Duration
	}{
		{0, true, true, false, true, 30 * time.Second},
		{29 * time.Second, true, false, false, true, 30 * time.Second},
		{31 * time.Second, true, false, true, false, 30 * time.Second}, // held long enough: tried again
		{40 * time.Second, true, true, false, true, time.Minute},       // failed again: twice the hold
		{50 * time.Second, false, false, false, false, 0},              // a connection came up: healed
		{60 * time.Second, true, true, false, true, 30 * time.Second},
	} {
		began, retry := l.reachStep(st.says, t0.Add(st.at))
		if began != st.began || retry != st.retry || l.unreachable != st.unrch || l.hold != st.hold {
			t.Fatalf("at %v: began %v retry %v unreachable %v hold %v; want %v %v %v %v",
				st.at, began, retry, l.unreachable, l.hold, st.began, st.retry, st.unrch, st.hold)
		}
	}
	l.hold = 8 * time.Minute
	l.unreachable = false
	l.reachStep(true, t0)
	if l.hold != maxReachHold {
		t.Errorf("hold %v after 8 min, want the 10 min cap", l.hold)
	}
}
