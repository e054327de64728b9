package ipoib

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/neigh"
)

// TestStandbyAnswersNothing: the spare port of an interface over two
// (Config.Standby) learns from a solicitation for our address but answers
// neither ARP nor ND, so that peers keep the active port's link address;
// once activated it answers, and Activate announces every address.
func TestStandbyAnswersNothing(t *testing.T) {
	p := newFakePair(t)
	ours4, ours6 := netip.MustParseAddr("192.168.9.1"), netip.MustParseAddr("fd00:9::1")
	node := ib.LinkAddr{Flags: ib.FlagRC, QPN: 0x4242, GID: ib.GIDFromAddr(netip.MustParseAddr("10.77.0.50"))}
	src := ib.LinkAddr{QPN: node.QPN, GID: node.GID}
	arp := neighPacket{etherType: encap.EtherTypeARP, n: neigh.ARPLen, src: src}
	a := neigh.ARP{Op: neigh.ARPRequest, SenderHW: node, SenderIP: netip.MustParseAddr("192.168.9.50"), TargetIP: ours4}
	if err := a.Encode(arp.data[:]); err != nil {
		t.Fatal(err)
	}
	ns := neighPacket{etherType: encap.EtherTypeIPv6, src: src}
	m := neigh.NeighborMessage{Type: neigh.TypeNeighborSolicitation, Target: ours6, LinkAddr: node, HasLinkAddr: true}
	n, err := m.EncodeIPv6(ns.data[:], netip.MustParseAddr("fd00:9::50"), neigh.SolicitedNode(ours6))
	if err != nil {
		t.Fatal(err)
	}
	ns.n = n
	for _, tc := range []struct {
		name    string
		standby bool
		pkt     neighPacket
		out     counter
		answers uint64
	}{
		{"ARP request, active", false, arp, arpOut, 1},
		{"ARP request, standby", true, arp, arpOut, 0},
		{"NS, active", false, ns, ndOut, 1},
		{"NS, standby", true, ns, ndOut, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.a.SetStandby(tc.standby)
			before := p.a.ctr[tc.out].Load()
			candidates := 0
			p.a.do(func() { p.a.ctl.handleNeighPacket(&tc.pkt); candidates = p.a.neigh.NumCandidates() })
			if got := p.a.ctr[tc.out].Load() - before; got != tc.answers {
				t.Errorf("%d answers sent, want %d", got, tc.answers)
			}
			if candidates == 0 {
				t.Errorf("the solicitation's sender was not learned")
			}
		})
	}
	// Activating announces each address once: a gratuitous ARP naming the
	// replaced link address, an unsolicited NA with it.
	p.a.SetStandby(true)
	arps, nds := p.a.ctr[arpOut].Load(), p.a.ctr[ndOut].Load()
	p.a.Activate(node)
	if p.a.Standby() || p.a.ctr[arpOut].Load()-arps != 1 || p.a.ctr[ndOut].Load()-nds != 2 {
		t.Errorf("Activate: standby %v, %d ARPs and %d NDs sent, want 1 and 2 (the address and the link-local one)",
			p.a.Standby(), p.a.ctr[arpOut].Load()-arps, p.a.ctr[ndOut].Load()-nds)
	}
}

// TestSiblingMove: a peer that named its other port (the sibling) in its
// own ARP moves there at once when an announcement from that port names
// its old address as replaced (its failover); a claim of a port it never
// named, or from a sender that is not the port claimed, waits for the
// old address's silence as any claim does (Probing).
func TestSiblingMove(t *testing.T) {
	p := newFakePair(t)
	peerIP, ours := netip.MustParseAddr("192.168.9.60"), netip.MustParseAddr("192.168.9.1")
	portA := ib.LinkAddr{Flags: ib.FlagRC, QPN: 0x11, GID: ib.GIDFromAddr(netip.MustParseAddr("10.77.0.60"))}
	portB := ib.LinkAddr{Flags: ib.FlagRC, QPN: 0x22, GID: ib.GIDFromAddr(netip.MustParseAddr("10.77.1.60"))}
	stranger := ib.LinkAddr{Flags: ib.FlagRC, QPN: 0x33, GID: ib.GIDFromAddr(netip.MustParseAddr("10.77.1.61"))}
	packet := func(from ib.LinkAddr, a neigh.ARP) neighPacket {
		m := neighPacket{etherType: encap.EtherTypeARP, n: a.Len(), src: ib.LinkAddr{QPN: from.QPN, GID: from.GID}}
		if err := a.Encode(m.data[:]); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		name          string
		sibling       ib.LinkAddr // named in the peer's request; zero: none
		announcer     ib.LinkAddr // the announcement's sender hardware address
		from          ib.LinkAddr // its UD source
		wantLink      ib.LinkAddr
		wantState     neigh.State
		wantMovedSeen bool
	}{
		{"named sibling", portB, portB, portB, portB, neigh.Reachable, true},
		{"no sibling named", ib.LinkAddr{}, portB, portB, portA, neigh.Probing, false},
		{"another port than the sibling", portB, stranger, stranger, portA, neigh.Probing, false},
		{"the sibling claimed by someone else", portB, portB, stranger, portA, neigh.Probing, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			moved := p.a.ctr[neighMovedToSibling].Load()
			var link ib.LinkAddr
			var state neigh.State
			p.a.do(func() {
				c := &p.a.ctl
				for _, e := range p.a.neigh.All() {
					c.forget(e)
				}
				req := neigh.ARP{Op: neigh.ARPRequest, SenderHW: portA, SenderIP: peerIP, TargetIP: ours,
					Sibling: tc.sibling, HasSibling: tc.sibling != (ib.LinkAddr{})}
				m := packet(portA, req)
				c.handleNeighPacket(&m)
				e, _ := p.a.neigh.Create(peerIP, c.now)
				if e == nil || e.Link != portA {
					t.Fatalf("the peer's entry from its request: %+v", e)
				}
				e.State = neigh.Reachable
				ann := neigh.ARP{Op: neigh.ARPRequest, SenderHW: tc.announcer, SenderIP: peerIP, TargetIP: peerIP, TargetHW: portA}
				m = packet(tc.from, ann)
				c.handleNeighPacket(&m)
				link, state = e.Link, e.State
			})
			if link != tc.wantLink || state != tc.wantState {
				t.Errorf("after the announcement: %v %v, want %v %v", link, state, tc.wantLink, tc.wantState)
			}
			if got := p.a.ctr[neighMovedToSibling].Load() > moved; got != tc.wantMovedSeen {
				t.Errorf("neigh_moved_to_sibling counted %v, want %v", got, tc.wantMovedSeen)
			}
		})
	}
}

// TestSendOnlyConnects: an interface that offers no connected mode
// (Config.SendOnly, the AF_IB sender towards kernel ipoib peers) has a
// link address without RC or UC, so its peer sends to it over UD, and it
// still sends to that peer over an RC connection of its own.
func TestSendOnlyConnects(t *testing.T) {
	h := newFakeHosts(t, 2, func(c *Config) { c.SendOnly = true })
	a, b := h[0], h[1]
	if f := a.LinkAddr().Flags; f&(ib.FlagRC|ib.FlagUC) != 0 {
		t.Fatalf("a's link address offers %v", f)
	}
	if s := a.Show(); !strings.Contains(s.CMModes, "send only") {
		t.Errorf("show's cm modes %q do not say send only", s.CMModes)
	}
	out := packetTo(a.ip4, b.ip4, 84, 1)
	a.send(out)
	if got := b.next(t); string(got) != string(out) {
		t.Fatalf("b got %d octets, want a's %d-octet packet", len(got), len(out))
	}
	waitFor(t, "a's RC connection to b", func() bool {
		n, _ := a.neighbor(b.ip4)
		return n.Via == "RC"
	})
	back := packetTo(b.ip4, a.ip4, 84, 2)
	b.send(back)
	if got := a.next(t); string(got) != string(back) {
		t.Fatalf("a got %d octets, want b's %d-octet packet", len(got), len(back))
	}
	if n, _ := b.neighbor(a.ip4); n.Via != "UD" {
		t.Errorf("b reaches a via %s, want UD (a offers no connected mode)", n.Via)
	}
	if b.count(txConnected) != 0 {
		t.Errorf("b sent %d packets over connections to a send-only peer", b.count(txConnected))
	}
}
