package ibfwd

import (
	"encoding/binary"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// heldREQs is how many directions have REQs held.
func (f *Forwarder) heldREQs() int {
	f.cross.mu.Lock()
	defer f.cross.mu.Unlock()
	return len(f.cross.held)
}

// mad is one MAD a test port sends: from and to index the subnet's
// nodes.
type mad struct {
	from, to int
	class    byte
	attr     uint16
}

const (
	attrREP   = 0x0013
	classSA   = 0x03
	holdLong  = time.Minute // longer than any test: a REQ that arrives was released by a crossing
	holdShort = time.Second
)

// TestCrossREQs: with CrossREQs a CM REQ from A to B waits until a REQ
// from B to A comes, then both go on; a REQ nobody crosses goes on alone
// once its hold is over; a retransmission waits with its REQ; a REQ from
// a third port is no crossing; other MADs are never held. Each outcome is
// counted and reported.
func TestCrossREQs(t *testing.T) {
	req := func(from, to int) mad { return mad{from, to, madClassCM, madAttrREQ} }
	for i, tc := range []struct {
		name  string
		hold  time.Duration
		sends []mad
		held  []int // directions held once each send was switched
		got   []int // MADs each node receives in the end
		// the outcomes reported, in order: true crossed, false alone
		outcomes []bool
	}{
		{"REQ crossed by the REQ back", holdLong, []mad{req(0, 1), req(1, 0)}, []int{1, 0}, []int{1, 1, 0}, []bool{true}},
		{"a retransmission waits with its REQ", holdLong, []mad{req(0, 1), req(0, 1), req(1, 0)}, []int{1, 1, 0}, []int{1, 2, 0}, []bool{true}},
		{"a REQ from a third port crosses nothing", holdLong, []mad{req(0, 1), req(2, 0), req(1, 0)}, []int{1, 2, 1}, []int{1, 1, 0}, []bool{true}},
		{"a REQ nobody crosses goes alone after the hold", holdShort, []mad{req(0, 1)}, []int{1}, []int{0, 1, 0}, []bool{false}},
		{"other MADs pass", holdLong, []mad{{0, 1, madClassCM, attrREP}, {0, 1, classSA, madAttrREQ}}, []int{0, 0}, []int{0, 2, 0}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSubnet(t, 20+i, 3)
			var mu sync.Mutex
			var reports []Crossing
			s.fwd.CrossREQs(tc.hold, func(c Crossing) {
				mu.Lock()
				reports = append(reports, c)
				mu.Unlock()
			})
			ports := make([]ib.MADService, len(s.nodes))
			for k, n := range s.nodes {
				p, err := n.dev.MADs()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { p.Close() })
				ports[k] = p
			}
			start := time.Now()
			for k, m := range tc.sends {
				data := make([]byte, 256)
				data[0], data[1], data[2], data[3] = 1, m.class, 2, 3
				binary.BigEndian.PutUint16(data[16:], m.attr)
				data[255] = byte(k) // which send it is
				if err := ports[m.from].Send(ib.MADAddr{Path: ib.Path{DLID: s.nodes[m.to].lid}, QPN: ib.QP1}, data); err != nil {
					t.Fatal(err)
				}
				waitCounter(t, func() uint64 { return counter(s.fwd.Counters(), "rx_frames") }, uint64(k+1), "rx_frames")
				// The frame is held (or a crossing released) right after
				// rx_frames counted it, in the same goroutine: for a moment
				// the count may still be the one before, above the one
				// wanted when a crossing releases.
				waitHeld(t, s.fwd, tc.held[k])
			}
			for k, want := range tc.got {
				for range want {
					select {
					case m := <-ports[k].Recv():
						from := slices.IndexFunc(s.nodes, func(n *node) bool { return n.lid == m.From.Path.DLID })
						if sent := tc.sends[m.Data[255]]; sent.to != k || sent.from != from {
							t.Errorf("node %d got send %d from node %d: %+v", k, m.Data[255], from, sent)
						}
					case <-time.After(5 * time.Second):
						t.Fatalf("node %d: fewer than %d MADs", k, want)
					}
				}
			}
			for k, p := range ports {
				select {
				case m := <-p.Recv():
					t.Errorf("node %d: one MAD too many, send %d", k, m.Data[255])
				case <-time.After(50 * time.Millisecond):
				}
			}
			var crossed, alone uint64
			mu.Lock()
			defer mu.Unlock()
			if len(reports) != len(tc.outcomes) {
				t.Fatalf("reported %+v, want outcomes %v", reports, tc.outcomes)
			}
			for k, c := range reports {
				first := tc.sends[0]
				if c.Crossed != tc.outcomes[k] || c.From != s.nodes[first.from].guid || c.To != s.nodes[first.to].guid ||
					c.SLID != s.nodes[first.from].lid || c.DLID != s.nodes[first.to].lid {
					t.Errorf("report %d: %+v, want crossed=%v for the first send %+v", k, c, tc.outcomes[k], first)
				}
				if c.Crossed {
					crossed++
				} else {
					alone++
					if c.Waited < tc.hold || time.Since(start) < tc.hold {
						t.Errorf("delivered alone after %v, before the hold %v was over", c.Waited, tc.hold)
					}
				}
			}
			cs := s.fwd.Counters()
			if counter(cs, "reqs_crossed") != crossed || counter(cs, "reqs_held_alone") != alone {
				t.Errorf("counters %v, want %d crossed %d alone", cs, crossed, alone)
			}
			if tx, want := counter(cs, "tx_frames"), uint64(tc.got[0]+tc.got[1]+tc.got[2]); tx != want {
				t.Errorf("tx_frames %d, want %d", tx, want)
			}
		})
	}
}

// TestCrossREQsOffAndClosed: with no hold a REQ passes at once; a
// forwarder closed with a REQ held stops its hold without a panic or a
// send.
func TestCrossREQsOffAndClosed(t *testing.T) {
	s := newSubnet(t, 26, 2)
	pa, err := s.nodes[0].dev.MADs()
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	pb, err := s.nodes[1].dev.MADs()
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	data := make([]byte, 256)
	data[1] = madClassCM
	binary.BigEndian.PutUint16(data[16:], madAttrREQ)
	to := ib.MADAddr{Path: ib.Path{DLID: s.nodes[1].lid}, QPN: ib.QP1}
	s.fwd.CrossREQs(0, nil)
	if err := pa.Send(to, data); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pb.Recv():
	case <-time.After(5 * time.Second):
		t.Fatal("a REQ with holding off did not pass")
	}
	s.fwd.CrossREQs(200*time.Millisecond, nil)
	if err := pa.Send(to, data); err != nil {
		t.Fatal(err)
	}
	waitCounter(t, func() uint64 { return uint64(s.fwd.heldREQs()) }, 1, "directions held")
	if err := s.fwd.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-pb.Recv():
		t.Fatalf("a REQ held at Close was delivered: %+v", m.From)
	case <-time.After(400 * time.Millisecond): // past the hold: its timer must find nothing to send
	}
	if c := counter(s.fwd.Counters(), "reqs_held_alone"); c != 0 {
		t.Fatalf("reqs_held_alone %d after Close", c)
	}
}

// waitHeld waits until the forwarder holds REQs in want directions.
func waitHeld(t *testing.T, f *Forwarder, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.heldREQs() != want {
		if time.Now().After(deadline) {
			t.Fatalf("directions held = %d, want %d", f.heldREQs(), want)
		}
		time.Sleep(time.Millisecond) // polling: there is no event to wait on
	}
}
