package ipoib

import (
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibtest"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/netdev/netdevtest"
)

// TestSolicitationsTeachCandidates hands a's control goroutine ARP
// requests and NSs as they would arrive from the fabric: what each teaches
// (a candidate, without a path or route, or nothing) and how it is counted.
func TestSolicitationsTeachCandidates(t *testing.T) {
	p := newFakePair(t)
	ours4, ours6 := netip.MustParseAddr("192.168.9.1"), netip.MustParseAddr("fd00:9::1")
	node := ib.LinkAddr{Flags: ib.FlagRC, QPN: 0x4242, GID: ib.GIDFromAddr(netip.MustParseAddr("10.77.0.50"))}
	other := node
	other.GID[15]++ // another node: a claim the sender cannot make
	arp := func(sender netip.Addr, hw ib.LinkAddr, target netip.Addr) neighPacket {
		m := neighPacket{etherType: encap.EtherTypeARP, n: neigh.ARPLen, src: ib.LinkAddr{QPN: node.QPN, GID: node.GID}}
		a := neigh.ARP{Op: neigh.ARPRequest, SenderHW: hw, SenderIP: sender, TargetIP: target}
		if err := a.Encode(m.data[:]); err != nil {
			t.Fatal(err)
		}
		return m
	}
	ns := func(src netip.Addr, hw ib.LinkAddr, target netip.Addr) neighPacket {
		m := neighPacket{etherType: encap.EtherTypeIPv6, src: ib.LinkAddr{QPN: node.QPN, GID: node.GID}}
		// DAD (from ::) carries no link address.
		nm := neigh.NeighborMessage{Type: neigh.TypeNeighborSolicitation, Target: target, LinkAddr: hw, HasLinkAddr: !src.IsUnspecified()}
		n, err := nm.EncodeIPv6(m.data[:], src, neigh.SolicitedNode(target))
		if err != nil {
			t.Fatal(err)
		}
		m.n = n
		return m
	}
	for _, tc := range []struct {
		name      string
		pkt       neighPacket
		counter   counter
		candidate netip.Addr // learned, or the zero Addr
	}{
		{"ARP request for us", arp(netip.MustParseAddr("192.168.9.50"), node, ours4), learnCandidates, netip.MustParseAddr("192.168.9.50")},
		{"ARP request claiming another node", arp(netip.MustParseAddr("192.168.9.51"), other, ours4), learnLinkMismatch, netip.Addr{}},
		{"ARP request for someone else", arp(netip.MustParseAddr("192.168.9.52"), node, netip.MustParseAddr("192.168.9.99")), solicitNotOurs, netip.Addr{}},
		{"NS for us", ns(netip.MustParseAddr("fd00:9::50"), node, ours6), learnCandidates, netip.MustParseAddr("fd00:9::50")},
		{"NS claiming another node", ns(netip.MustParseAddr("fd00:9::51"), other, ours6), learnLinkMismatch, netip.Addr{}},
		{"NS for someone else", ns(netip.MustParseAddr("fd00:9::52"), node, netip.MustParseAddr("fd00:9::99")), solicitNotOurs, netip.Addr{}},
		{"NS from the unspecified address", ns(netip.IPv6Unspecified(), node, ours6), solicitNoSource, netip.Addr{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := p.a.ctr[tc.counter].Load()
			entries, routes := 0, 0
			var cand *neigh.CandidateInfo
			p.a.do(func() {
				p.a.ctl.handleNeighPacket(&tc.pkt)
				entries = len(p.a.neigh.All())
				for _, c := range p.a.neigh.Candidates() {
					if c.IP == tc.candidate {
						cand = &c
					}
				}
				if tc.candidate.IsValid() && p.a.neigh.Lookup(tc.candidate) != nil {
					routes++ // the datapath would see it: it would have a route
				}
			})
			if got := p.a.ctr[tc.counter].Load() - before; got != 1 {
				t.Errorf("%s grew by %d, want 1", counterNames[tc.counter], got)
			}
			if tc.candidate.IsValid() && (cand == nil || cand.Link != node) {
				t.Errorf("candidate %v = %+v, want at %v", tc.candidate, cand, node)
			}
			if routes != 0 || entries != 1 { // the sink, made by newFakePair
				t.Errorf("%d entries (want only the sink's), %d visible to the datapath", entries, routes)
			}
		})
	}
	// One node teaches LearnBurst at once; the rest are answered, not learned.
	limited := p.a.ctr[learnLimited].Load()
	var burst []neighPacket
	for k := range 2 * neigh.LearnBurst {
		burst = append(burst, arp(netip.AddrFrom4([4]byte{192, 168, 9, byte(100 + k)}), node, ours4))
	}
	p.a.do(func() {
		for k := range burst {
			p.a.ctl.handleNeighPacket(&burst[k])
		}
	})
	// Two were taught above, by the same node.
	if got := p.a.ctr[learnLimited].Load() - limited; got < neigh.LearnBurst || got > neigh.LearnBurst+2 {
		t.Errorf("learn_rate_limited grew by %d for %d solicitations from one node, want about %d", got, 2*neigh.LearnBurst, neigh.LearnBurst)
	}
}

// TestFirstPacketToLearnedNeighborConnects: a neighbor learned from its
// solicitation is used by one packet, which goes over UD at once; that one
// packet must also ask for the connection, as every later one would, or a
// host that answers a single packet (a ping) stays on UD.
func TestFirstPacketToLearnedNeighborConnects(t *testing.T) {
	h := newFakeHosts(t, 2)
	a, b := h[0], h[1]
	// a's ARP request for b, as b takes it from the fabric; a itself never
	// resolves b or asks for a connection.
	link := a.LinkAddr()
	pkt := neighPacket{etherType: encap.EtherTypeARP, n: neigh.ARPLen, src: ib.LinkAddr{QPN: link.QPN, GID: link.GID}}
	req := neigh.ARP{Op: neigh.ARPRequest, SenderHW: link, SenderIP: a.ip4, TargetIP: b.ip4}
	if err := req.Encode(pkt.data[:]); err != nil {
		t.Fatal(err)
	}
	b.do(func() { b.ctl.handleNeighPacket(&pkt) })
	// The packet leaves before the host route is set: the route is
	// netlink round trips the packet need not wait for.
	sentAtRoute := make(chan uint64, 1)
	b.nd.OnRouteSet(func(dst netip.Addr) {
		if dst == a.ip4 {
			select {
			case sentAtRoute <- b.count(txUD):
			default:
			}
		}
	})

	out := packetTo(b.ip4, a.ip4, 84, 1)
	b.send(out)
	if got := a.next(t); string(got) != string(out) {
		t.Fatalf("a got %d octets, want b's %d-octet packet", len(got), len(out))
	}
	if b.count(learnUsed) != 1 || b.count(txQueued) != 0 {
		t.Errorf("b: learn_used %d, tx_queued %d; want the candidate used and nothing queued", b.count(learnUsed), b.count(txQueued))
	}
	select {
	case n := <-sentAtRoute:
		if n != 1 {
			t.Errorf("b had sent %d packets over UD when it set a's host route, want the first one sent", n)
		}
	case <-time.After(10 * time.Second):
		t.Error("b set no host route to a within 10 s of the first packet")
	}
	waitFor(t, "b's connection to a after one packet", func() bool {
		n, _ := b.neighbor(a.ip4)
		return n.Via == "RC"
	})
}

// TestAddressAddedBeforeWatchIsSeen: an address added after the interface
// first read its addresses and before its control loop watched (networkd
// configures ib0 the moment the TUN appears) is ours once the loop runs.
func TestAddressAddedBeforeWatchIsSeen(t *testing.T) {
	late := netip.MustParsePrefix("192.168.9.1/24")
	i, _ := startWatching(t, nil, func(nd *netdevtest.Netdev) { nd.AddAddrUnseen(late) })
	var ours []netip.Prefix
	i.do(func() { ours = slices.Clone(i.ctl.addrs) })
	if !slices.Contains(ours, late) {
		t.Errorf("addresses %v after start, want %v among them", ours, late)
	}
}

// TestOwnAddressesBackAfterUnseenFlap: our addresses lost before the
// control loop watched (here by a down and up of the link, which takes the
// kernel's IPv6 addresses, our RFC 4391 link-local among them), with no
// notice the loop could hear, are back once it runs.
func TestOwnAddressesBackAfterUnseenFlap(t *testing.T) {
	own := netip.MustParsePrefix("fd00:9::1/64")
	i, _ := startWatching(t, []netip.Prefix{own}, (*netdevtest.Netdev).LinkFlapUnseen)
	if !i.port.linkLocal.IsValid() {
		t.Fatal("no RFC 4391 link-local address")
	}
	var ours []netip.Prefix
	i.do(func() { ours = slices.Clone(i.ctl.addrs) })
	for _, p := range []netip.Prefix{i.port.linkLocal, own} {
		if !slices.Contains(ours, p) {
			t.Errorf("addresses %v after start, want %v among them", ours, p)
		}
	}
}

// TestLinkLocalKeptWhileNew: our link-local address removed in the first
// seconds (networkd setting the new link's addr_gen_mode drops the
// link-local addresses it finds) is put back; removed later, it stays
// removed (a network manager putting its own in its place).
func TestLinkLocalKeptWhileNew(t *testing.T) {
	for _, tc := range []struct {
		name     string
		later    bool
		wantBack bool
	}{
		{"removed while the link is new", false, true},
		{"removed later", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, nd := startWatching(t, nil, func(*netdevtest.Netdev) {})
			ll := i.port.linkLocal
			// A request served means the loop watches the link: what it
			// put back before watching is behind it.
			i.do(func() {
				if tc.later {
					i.ctl.llKeptUntil = time.Now()
				}
			})
			nd.DelAddr(ll)
			// The removal's notice was taken once the loop's view has it,
			// or has it back.
			waitFor(t, "the removal taken", func() bool {
				var ours []netip.Prefix
				i.do(func() { ours = slices.Clone(i.ctl.addrs) })
				kernel, _ := nd.Addrs()
				return slices.Contains(ours, ll) == slices.Contains(kernel, ll)
			})
			kernel, _ := nd.Addrs()
			if got := slices.Contains(kernel, ll); got != tc.wantBack {
				t.Errorf("link-local %v on the link after its removal: %v, want %v (addresses %v)", ll, got, tc.wantBack, kernel)
			}
		})
	}
}

// startWatching starts an interface with addrs on a fake device and netdev
// whose Watch first runs unseen: a change no notice will tell of.
func startWatching(t *testing.T, addrs []netip.Prefix, unseen func(*netdevtest.Netdev)) (*Interface, *netdevtest.Netdev) {
	t.Helper()
	dev, err := ibtest.NewFabric().Open(ibtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	nd := netdevtest.New()
	i, err := newOnFake(nd, Config{Name: "ib0", Device: dev, Queues: 1, Addrs: addrs,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { i.Close() })
	nd.BeforeWatch(func() { unseen(nd) })
	i.Start()
	return i, nd
}
