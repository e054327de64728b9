package ipoib

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibtest"
)

// TestRailHandsOff: a rail (the second port of a bond spreading flows)
// sends over its own port only to its Rail entries; a packet to any other
// destination is handed to the active port, which resolves and sends it
// as its own. Without Rail entries everything goes through the active
// port; an active port not made Bonded refuses, and the rail counts the
// drop.
func TestRailHandsOff(t *testing.T) {
	ours := netip.MustParsePrefix("10.9.0.1/24")
	leg := func(standby, bonded bool) func(*Config) {
		return func(c *Config) {
			c.Addrs, c.Standby, c.Bonded = []netip.Prefix{ours}, standby, bonded
		}
	}
	h := newFakeHostsOn(t, ibtest.Config{}, 5, leg(false, true), leg(true, true), nil, nil, leg(false, false))
	active, rail, peer, single, unbonded := h[0], h[1], h[2], h[3], h[4]
	rail.SetRail(active.Interface)

	send := func(to *fakeHost, seq byte) (handoffs, drops, activeTx, railTx uint64) {
		t.Helper()
		before := [4]uint64{rail.ctr[txHandoffs].Load(), rail.ctr[txDropHandoff].Load(), active.ctr[txPackets].Load(), rail.ctr[txPackets].Load()}
		pkt := packetTo(ours.Addr(), to.ip4, 200, seq)
		rail.send(pkt)
		deadline := time.After(10 * time.Second)
		for {
			select {
			case got := <-to.nd.Out:
				if !bytes.Equal(got, pkt) {
					continue
				}
			case <-deadline:
				t.Fatalf("packet %d to %v did not arrive", seq, to.ip4)
			}
			break
		}
		return rail.ctr[txHandoffs].Load() - before[0], rail.ctr[txDropHandoff].Load() - before[1],
			active.ctr[txPackets].Load() - before[2], rail.ctr[txPackets].Load() - before[3]
	}

	rail.SetRailNeighbors(map[netip.Addr]ib.LinkAddr{peer.ip4: peer.LinkAddr()})
	if n := rail.Neighbors(); len(n) != 1 || n[0].State != "RAIL" || n[0].LinkAddr != peer.LinkAddr().String() {
		t.Fatalf("the rail's table after SetRailNeighbors: %+v", n)
	}
	for _, tc := range []struct {
		name     string
		to       *fakeHost
		pinned   bool
		handoffs uint64
	}{
		{"to a Rail entry: over the rail's own port", peer, true, 0},
		{"to a peer with one port: through the active port", single, true, 1},
		{"Rail entries dropped: through the active port", peer, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.pinned {
				rail.SetRailNeighbors(nil)
			}
			handoffs, drops, activeTx, railTx := send(tc.to, byte(len(tc.name)))
			if handoffs != tc.handoffs || drops != 0 || activeTx != tc.handoffs || railTx != 1-tc.handoffs {
				t.Errorf("handoffs %d drops %d, packets sent by the active port %d, by the rail %d; want %d handoffs",
					handoffs, drops, activeTx, railTx, tc.handoffs)
			}
		})
	}
	if n := rail.Neighbors(); len(n) != 0 {
		t.Errorf("the rail keeps neighbors after its Rail entries were dropped: %+v", n)
	}

	// An active port not made Bonded has no carrier for other ports.
	rail.SetRail(unbonded.Interface)
	before := rail.ctr[txDropHandoff].Load()
	rail.send(packetTo(ours.Addr(), single.ip4, 200, 99))
	deadline := time.Now().Add(10 * time.Second)
	for rail.ctr[txDropHandoff].Load() == before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if rail.ctr[txDropHandoff].Load() != before+1 {
		t.Errorf("a handoff the active port could not take was not counted (tx_drop_handoff %d)", rail.ctr[txDropHandoff].Load())
	}
}

// TestUnreachable: REQs never answered, to two nodes or more, three in a
// row, make the port unreachable; to one node they never do (a dead peer
// is not the port's fault); a refusal (REJ: the peer was reached) does
// not count, and a connection up, or ForgetUnreachable, ends the run.
func TestUnreachable(t *testing.T) {
	h := newFakeHostsOn(t, ibtest.Config{}, 2, func(c *Config) { c.Bonded = true })
	i := h[0].Interface
	// With one port there is nowhere to go: nothing is counted.
	single := h[1].Interface
	single.do(func() {
		for k := range byte(4) {
			single.connRefused(ib.LinkAddr{QPN: 0x40, GID: ib.GIDFromAddr(netip.AddrFrom4([4]byte{10, 77, 0, k}))}, "timeout")
		}
	})
	if single.Unreachable() {
		t.Errorf("an interface on one port was made unreachable")
	}
	node := func(k byte) ib.LinkAddr {
		return ib.LinkAddr{Flags: ib.FlagRC, QPN: 0x40, GID: ib.GIDFromAddr(netip.AddrFrom4([4]byte{10, 77, 0, k}))}
	}
	for _, tc := range []struct {
		name     string
		peers    []byte
		reasons  []string
		portDown bool // the port went down first: its failures say nothing more
		want     bool
	}{
		{"one dead node", []byte{1, 1, 1, 1}, []string{"timeout", "timeout", "timeout", "timeout"}, false, false},
		{"two nodes, three timeouts", []byte{1, 2, 1}, []string{"timeout", "timeout", "timeout"}, false, true},
		{"two nodes, two timeouts", []byte{1, 2}, []string{"timeout", "timeout"}, false, false},
		{"refusals reach the peer", []byte{1, 2, 3}, []string{"rejected: consumer reject", "rejected: consumer reject", "rejected: consumer reject"}, false, false},
		{"the port is down", []byte{1, 2, 3}, []string{"timeout", "timeout", "timeout"}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i.ForgetUnreachable()
			i.do(func() {
				i.ctl.carrier = !tc.portDown
				for k, p := range tc.peers {
					i.connRefused(node(p), tc.reasons[k])
				}
				i.ctl.carrier = true
			})
			if i.Unreachable() != tc.want {
				t.Errorf("Unreachable = %v, want %v", i.Unreachable(), tc.want)
			}
		})
	}
	i.ForgetUnreachable()
	if i.Unreachable() {
		t.Errorf("ForgetUnreachable left the port unreachable")
	}
}
