package ipoib

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibtest"
	"github.com/ipoibd/ipoibd/inetsum"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/netdev/netdevtest"
	"github.com/ipoibd/ipoibd/offload"
)

// The interface's behaviours, checked as an ordinary user: each host is an
// interface over an ibtest device (an in-memory fabric) with a netdevtest
// fake instead of a TUN, so a test puts packets in where the kernel would
// and reads what the interface hands back to the kernel.

// newOnFake makes an interface on the fake nd, opened as cfg's
// NetdevConfig says, as the daemon opens a TUN.
func newOnFake(nd *netdevtest.Netdev, cfg Config) (*Interface, error) {
	nc, err := cfg.NetdevConfig()
	if err != nil {
		return nil, err
	}
	cfg.Netdev = nd.Open(nc)
	return New(cfg)
}

// fakeHost is one such interface, with its subnet addresses 10.9.0.k/24
// and fd00:9::k/64.
type fakeHost struct {
	*Interface
	ibdev    *ibtest.Device
	nd       *netdevtest.Netdev
	ip4, ip6 netip.Addr
}

// newFakeHosts brings up n hosts on a fabric of their own, host k
// configured by mods[k] if there is one.
func newFakeHosts(t *testing.T, n int, mods ...func(*Config)) []*fakeHost {
	t.Helper()
	return newFakeHostsOn(t, ibtest.Config{}, n, mods...)
}

// newFakeHostsOn is newFakeHosts with devices opened as dev says.
func newFakeHostsOn(t *testing.T, dev0 ibtest.Config, n int, mods ...func(*Config)) []*fakeHost {
	t.Helper()
	fab := ibtest.NewFabric()
	hosts := make([]*fakeHost, n)
	for k := range n {
		dev, err := fab.Open(dev0)
		if err != nil {
			t.Fatal(err)
		}
		h := &fakeHost{ibdev: dev, nd: netdevtest.New(),
			ip4: netip.AddrFrom4([4]byte{10, 9, 0, byte(k + 1)}),
			ip6: netip.MustParseAddr(fmt.Sprintf("fd00:9::%d", k+1))}
		cfg := Config{Name: "ib0", Device: dev, Queues: 1,
			Addrs: []netip.Prefix{netip.PrefixFrom(h.ip4, 24), netip.PrefixFrom(h.ip6, 64)},
			Log:   slog.New(slog.NewTextHandler(io.Discard, nil))}
		if k < len(mods) && mods[k] != nil {
			mods[k](&cfg)
		}
		if h.Interface, err = newOnFake(h.nd, cfg); err != nil {
			_ = dev.Close()
			t.Fatal(err)
		}
		h.Start()
		t.Cleanup(func() { h.Close(); _ = dev.Close() })
		hosts[k] = h
	}
	return hosts
}

// packetTo returns an IPv4 or IPv6 UDP packet of size octets in all, with
// DF set (IPv4), and a payload that tells packets apart.
func packetTo(src, dst netip.Addr, size int, seq byte) []byte {
	p := make([]byte, size)
	hdr := 40
	if dst.Is4() {
		hdr = 20
		p[0] = 0x45
		binary.BigEndian.PutUint16(p[2:], uint16(size))
		p[6] = 0x40 // DF
		p[8], p[9] = 64, 17
		copy(p[12:16], src.AsSlice())
		copy(p[16:20], dst.AsSlice())
		binary.BigEndian.PutUint16(p[10:], inetsum.Checksum(0, p[:20]))
	} else {
		p[0] = 0x60
		binary.BigEndian.PutUint16(p[4:], uint16(size-40))
		p[6], p[7] = 17, 64
		copy(p[8:24], src.AsSlice())
		copy(p[24:40], dst.AsSlice())
	}
	binary.BigEndian.PutUint16(p[hdr:], 4000)
	binary.BigEndian.PutUint16(p[hdr+2:], 5000)
	binary.BigEndian.PutUint16(p[hdr+4:], uint16(size-hdr))
	for k := hdr + 8; k < size; k++ {
		p[k] = seq + byte(k)
	}
	return p
}

// send hands the interface a packet as the kernel would.
func (h *fakeHost) send(p []byte) { h.nd.In <- netdevtest.Packet{B: p} }

// next returns the next packet the interface wrote to the kernel.
func (h *fakeHost) next(t *testing.T) []byte {
	t.Helper()
	select {
	case p := <-h.nd.Out:
		return p
	case <-time.After(10 * time.Second):
		t.Fatalf("%v: no packet written to the kernel in 10 s", h.ip4)
		return nil
	}
}

// quiet fails if the interface writes anything to the kernel once its
// device has landed what was sent to it and the control goroutine has
// served a request after what the test did.
func (h *fakeHost) quiet(t *testing.T) {
	t.Helper()
	h.ibdev.Settle()
	h.do(func() {})
	select {
	case p := <-h.nd.Out:
		t.Fatalf("%v wrote %d octets to the kernel, want none", h.ip4, len(p))
	default:
	}
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10 s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// neighbor returns h's table row for ip.
func (h *fakeHost) neighbor(ip netip.Addr) (NeighInfo, bool) {
	for _, n := range h.Neighbors() {
		if n.IP == ip.String() {
			return n, true
		}
	}
	return NeighInfo{}, false
}

func (h *fakeHost) count(k counter) uint64 { return h.ctr[k].Load() }

// stat is the value of the counter named name in h's Stats.
func (h *fakeHost) stat(t *testing.T, name string) uint64 {
	t.Helper()
	for _, c := range h.Stats() {
		if c.Name == name {
			return c.Value
		}
	}
	t.Fatalf("no counter %s in stats", name)
	return 0
}

// TestFakeResolvesAndDelivers: the first packet to a peer waits for
// resolution (ARP, or ND for IPv6) and is then delivered whole; the peer
// learned us from our solicitation, so its answer needs no resolution of
// its own; a connected pair ends up on an RC connection.
func TestFakeResolvesAndDelivers(t *testing.T) {
	h := newFakeHosts(t, 2)
	a, b := h[0], h[1]
	for _, tc := range []struct {
		name string
		addr func(*fakeHost) netip.Addr
		ask  counter // the solicitations a sends
	}{
		{"IPv4", func(h *fakeHost) netip.Addr { return h.ip4 }, arpOut},
		{"IPv6", func(h *fakeHost) netip.Addr { return h.ip6 }, ndOut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queued, asked, learned := a.count(txQueued), a.count(tc.ask), b.count(learnUsed)
			out := packetTo(tc.addr(a), tc.addr(b), 1000, 1)
			a.send(out)
			if got := b.next(t); string(got) != string(out) {
				t.Fatalf("b got %d octets, want a's %d-octet packet", len(got), len(out))
			}
			if a.count(txQueued) != queued+1 || a.count(tc.ask) <= asked {
				t.Errorf("a: tx_queued +%d, %s +%d; want the packet queued and a solicitation sent",
					a.count(txQueued)-queued, counterNames[tc.ask], a.count(tc.ask)-asked)
			}
			n, ok := a.neighbor(tc.addr(b))
			if !ok || n.LinkAddr != b.LinkAddr().String() || n.State != "REACHABLE" {
				t.Errorf("a's neighbor %v: %+v, want REACHABLE at %v", tc.addr(b), n, b.LinkAddr())
			}
			// b answers from what a's solicitation taught it, without
			// waiting for a resolution of its own. (a may have resolved b
			// from b's announcement before b took a's solicitation.)
			waitFor(t, "b learns a from its solicitation", func() bool { _, ok := b.neighbor(tc.addr(a)); return ok })
			bQueued := b.count(txQueued)
			back := packetTo(tc.addr(b), tc.addr(a), 700, 2)
			b.send(back)
			if got := a.next(t); string(got) != string(back) {
				t.Fatalf("a got %d octets, want b's %d-octet packet", len(got), len(back))
			}
			if b.count(learnUsed) != learned+1 {
				t.Errorf("b: learn_used +%d, want the candidate from a's solicitation used", b.count(learnUsed)-learned)
			}
			if b.count(txQueued) != bQueued {
				t.Errorf("b queued %d packets for resolution, want none", b.count(txQueued)-bQueued)
			}
		})
	}
	if cm := a.Show().CM; !strings.Contains(cm, "QP1 through ibtest0 on an in-memory fabric") {
		t.Errorf("show names the connection service %q, want its ibtest transport", cm)
	}
	waitFor(t, "a's connection to b up", func() bool {
		n, _ := a.neighbor(b.ip4)
		return n.Via == "RC"
	})
	big := packetTo(a.ip4, b.ip4, 60000, 3)
	a.send(big)
	if got := b.next(t); string(got) != string(big) {
		t.Fatalf("b got %d octets over RC, want a's 60000-octet packet", len(got))
	}
}

// TestFakeDatagramPeer: a peer in datagram mode offers no connection, so
// packets go over UD, the peer's host route carries the UD MTU, and a
// larger packet with DF is answered with "fragmentation needed" carrying
// that MTU, and dropped.
func TestFakeDatagramPeer(t *testing.T) {
	h := newFakeHosts(t, 2, nil, func(c *Config) { c.Mode = Datagram })
	a, b := h[0], h[1]
	out := packetTo(a.ip4, b.ip4, 1200, 1)
	a.send(out)
	if got := b.next(t); string(got) != string(out) {
		t.Fatalf("b got %d octets, want a's %d", len(got), len(out))
	}
	n, _ := a.neighbor(b.ip4)
	if n.Via != "UD" || n.MTU != a.port.udMTU {
		t.Errorf("a's neighbor b: via %s MTU %d, want UD with %d", n.Via, n.MTU, a.port.udMTU)
	}
	if m, ok := a.nd.Route(b.ip4); !ok || m != a.port.udMTU {
		t.Errorf("a's host route to b: %d %v, want MTU %d", m, ok, a.port.udMTU)
	}
	tooBig, ud := a.count(txDropTooBig), a.count(txUD)
	a.send(packetTo(a.ip4, b.ip4, a.port.udMTU+100, 2))
	icmp := a.next(t)
	if len(icmp) < 28 || icmp[9] != 1 || icmp[20] != 3 || icmp[21] != 4 ||
		int(binary.BigEndian.Uint16(icmp[26:])) != a.port.udMTU {
		t.Fatalf("a wrote % x, want ICMP fragmentation needed with MTU %d", icmp[:min(len(icmp), 28)], a.port.udMTU)
	}
	// The drop is counted right after the ICMP is written: await it.
	waitFor(t, "tx_drop_too_big counted", func() bool { return a.count(txDropTooBig) >= tooBig+1 })
	if a.count(txDropTooBig) != tooBig+1 || a.count(txUD) != ud {
		t.Errorf("tx_drop_too_big +%d, tx_ud +%d; want the packet dropped, not sent", a.count(txDropTooBig)-tooBig, a.count(txUD)-ud)
	}
	b.quiet(t)
}

// TestFakeImpostorRefuted: a third host tells a that b's address is at its
// own link address. a does not move a neighbor that answers: it asks b
// again, b answers, and a's traffic keeps going to b.
func TestFakeImpostorRefuted(t *testing.T) {
	h := newFakeHosts(t, 3)
	a, b, c := h[0], h[1], h[2]
	a.send(packetTo(a.ip4, b.ip4, 100, 1))
	b.next(t)
	refuted := a.count(impostors)
	c.do(func() {
		lie := neigh.ARP{Op: neigh.ARPReply, SenderHW: c.port.local, SenderIP: b.ip4, TargetHW: a.port.local, TargetIP: a.ip4}
		c.ctl.sendARP(&lie, a.port.local, true)
	})
	waitFor(t, "a refutes c's claim", func() bool { return a.count(impostors) > refuted })
	if n, _ := a.neighbor(b.ip4); n.LinkAddr != b.LinkAddr().String() {
		t.Errorf("a's neighbor b is at %s after c's claim, want b's %v", n.LinkAddr, b.LinkAddr())
	}
	out := packetTo(a.ip4, b.ip4, 100, 2)
	a.send(out)
	if got := b.next(t); string(got) != string(out) {
		t.Fatalf("b got %d octets after c's claim, want a's packet", len(got))
	}
	c.quiet(t)
}

// TestFakeUnresolvedNeighbor: packets to an address nobody answers wait
// while a asks (at most MaxPending of them) and are then answered with
// ICMP host unreachable, from a's own address.
func TestFakeUnresolvedNeighbor(t *testing.T) {
	h := newFakeHosts(t, 1)
	a := h[0]
	nobody := netip.MustParseAddr("10.9.0.99")
	max := a.neigh.MaxPending
	for k := range max + 2 {
		a.send(packetTo(a.ip4, nobody, 100, byte(k)))
	}
	waitFor(t, "the queue overflows", func() bool { return a.count(txDropQueueFull) == 2 })
	for range max {
		icmp := a.next(t)
		if len(icmp) < 28 || icmp[20] != 3 || icmp[21] != 1 || netip.AddrFrom4([4]byte(icmp[16:20])) != a.ip4 {
			t.Fatalf("a wrote % x, want ICMP host unreachable to %v", icmp[:min(len(icmp), 28)], a.ip4)
		}
		// From our own address, as the kernel's (SendIPv4: not through
		// the TUN, where it would be a martian).
		if src := netip.AddrFrom4([4]byte(icmp[12:16])); src != a.ip4 {
			t.Fatalf("the error comes from %v, want our own %v", src, a.ip4)
		}
	}
	if got := a.count(txUnreachable); got != uint64(max) {
		t.Errorf("tx_unreachable_sent %d, want %d", got, max)
	}
	if n, _ := a.neighbor(nobody); n.State != "FAILED" {
		t.Errorf("neighbor %v is %s, want FAILED", nobody, n.State)
	}
}

// TestFakeNextHops: an off-link destination goes to the gateway of the
// kernel's route, which must be a neighbor on the link; without a route it
// is dropped and counted.
func TestFakeNextHops(t *testing.T) {
	h := newFakeHosts(t, 2)
	a, b := h[0], h[1]
	a.nd.SetGateway(netip.MustParsePrefix("198.51.100.0/24"), b.ip4)
	a.nd.SetGateway(netip.MustParsePrefix("203.0.113.0/24"), netip.MustParseAddr("192.0.2.1")) // not on link
	routed := packetTo(a.ip4, netip.MustParseAddr("198.51.100.7"), 300, 1)
	a.send(routed)
	if got := b.next(t); string(got) != string(routed) {
		t.Fatalf("b got %d octets, want the packet routed through it", len(got))
	}
	for _, dst := range []string{"203.0.113.5", "192.0.2.9"} {
		before := a.count(txDropNoRoute)
		a.send(packetTo(a.ip4, netip.MustParseAddr(dst), 300, 2))
		waitFor(t, "a drops the packet to "+dst, func() bool { return a.count(txDropNoRoute) == before+1 })
	}
	b.quiet(t)
}

// TestFakeDrops: what the kernel or the fabric sends that cannot be
// carried is dropped and counted under its own cause, and nothing else
// happens.
func TestFakeDrops(t *testing.T) {
	h := newFakeHosts(t, 2)
	a, b := h[0], h[1]
	ns := make([]byte, 72) // an ICMPv6 neighbor solicitation from the kernel
	copy(ns, packetTo(a.ip6, b.ip6, 72, 0)[:40])
	ns[6], ns[40] = 58, 135
	rs := make([]byte, 56) // the kernel's router solicitation when the link comes up
	copy(rs, packetTo(a.ip6, netip.MustParseAddr("ff02::2"), 56, 0)[:40])
	rs[6], rs[40] = 58, 133
	rawTo := func(from, to *fakeHost, raw []byte) {
		from.do(func() {
			slot, buf, ok := from.ctl.neighSlot()
			if !ok {
				t.Error("no control slot")
				return
			}
			n := copy(buf, raw)
			from.ctl.sendNeigh(slot, n, to.port.local, true, netip.Addr{})
		})
	}
	fill := func(h *fakeHost) { // the kernel takes nothing more
		for len(h.nd.Out) < cap(h.nd.Out) {
			h.nd.Out <- nil
		}
	}
	drain := func(h *fakeHost) {
		for len(h.nd.Out) > 0 {
			<-h.nd.Out
		}
	}
	for _, tc := range []struct {
		name string
		do   func()
		at   *fakeHost
		k    counter
		undo func() // before the check that nothing else happened
	}{
		{"not IP from the kernel", func() { a.send([]byte{0x20, 1, 2, 3, 4, 5, 6, 7}) }, a, txDropMalformed, nil},
		{"neighbor solicitation from the kernel", func() { a.send(ns) }, a, txDropKernelND, nil},
		{"router solicitation from the kernel", func() { a.send(rs) }, a, txKernelRS, nil},
		{"unknown EtherType from the fabric", func() { rawTo(b, a, []byte{0x88, 0xb5, 0, 0, 1, 2, 3, 4}) }, a, rxDropEtherType, nil},
		{"short ARP from the fabric", func() { rawTo(b, a, []byte{0x08, 0x06, 0, 0, 0, 0x20, 8, 0}) }, a, rxDropMalformed, nil},
		{"short IPoIB header from the fabric", func() { rawTo(b, a, []byte{0x08}) }, a, rxDropMalformed, nil},
		{"super-packet that does not parse", func() {
			a.nd.In <- netdevtest.Packet{B: packetTo(a.ip4, b.ip4, 3000, 1), Hdr: offload.Hdr{GSOType: offload.GSOTCPv4, GSOSize: 1000}}
		}, a, txDropOffload, nil},
		{"the kernel refuses a packet", func() {
			fill(b)
			a.send(packetTo(a.ip4, b.ip4, 100, 1))
		}, b, rxDropTUN, func() { drain(b) }},
		{"neighbor table full (last: it stays full)", func() {
			a.do(func() { a.neigh.MaxEntries = len(a.neigh.All()) })
			a.send(packetTo(a.ip4, netip.MustParseAddr("10.9.0.77"), 100, 1))
		}, a, txDropNoNeigh, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.at.count(tc.k)
			tc.do()
			waitFor(t, counterNames[tc.k]+" counted", func() bool { return tc.at.count(tc.k) == before+1 })
			if tc.undo != nil {
				tc.undo()
			}
			tc.at.quiet(t)
		})
	}
}

// TestFakeConnectionRefused: a peer that refuses a connection (b at its
// limit, taken by c) still gets our packets over UD, and we back off
// instead of asking again with every packet.
func TestFakeConnectionRefused(t *testing.T) {
	h := newFakeHosts(t, 3, nil, func(c *Config) { c.MaxConns = 1 })
	a, b, c := h[0], h[1], h[2]
	c.send(packetTo(c.ip4, b.ip4, 100, 1))
	b.next(t)
	waitFor(t, "c's connection to b up", func() bool { n, _ := c.neighbor(b.ip4); return n.Via == "RC" })
	a.send(packetTo(a.ip4, b.ip4, 100, 2))
	b.next(t)
	key := ib.LinkAddr{QPN: b.port.local.QPN, GID: b.port.local.GID}
	backedOff := func() (ok bool) {
		a.do(func() { _, ok = a.ctl.backoff[key] })
		return ok
	}
	waitFor(t, "a backs off from b", backedOff)
	connects := func() (n uint64) {
		a.do(func() { n = a.mgr.Stats.Connects })
		return n
	}
	reqs := connects()
	for k := range 5 {
		out := packetTo(a.ip4, b.ip4, 1000, byte(3+k))
		a.send(out)
		if got := b.next(t); string(got) != string(out) {
			t.Fatalf("b got %d octets, want a's packet over UD", len(got))
		}
	}
	if n, _ := a.neighbor(b.ip4); n.Via != "UD" {
		t.Errorf("a's neighbor b via %s, want UD", n.Via)
	}
	if got := connects(); got != reqs {
		t.Errorf("a asked b for %d more connections while backing off, want none", got-reqs)
	}
}

// TestFakeFollowsTheLink: an address the operator adds is answered for at
// once; a new link MTU is taken; after down and up, the addresses the
// kernel removed are put back.
func TestFakeFollowsTheLink(t *testing.T) {
	second := func(k byte) func(*Config) {
		return func(c *Config) {
			c.Addrs = append(c.Addrs, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 10, 0, k}), 24))
		}
	}
	h := newFakeHosts(t, 2, nil, second(2))
	a, b := h[0], h[1]
	added := netip.MustParsePrefix("10.10.0.1/24")
	a.nd.AddAddr(added)
	out := packetTo(netip.MustParseAddr("10.10.0.2"), added.Addr(), 500, 1)
	b.send(out)
	if got := a.next(t); string(got) != string(out) {
		t.Fatalf("a got %d octets, want b's packet to the added address", len(got))
	}

	a.nd.Events <- LinkEvent{Change: LinkState, MTU: 9000, Up: true}
	waitFor(t, "a takes MTU 9000", func() bool { return a.Show().MTU == 9000 })

	a.nd.LinkDown()
	a.nd.Events <- LinkEvent{Change: LinkState, MTU: 9000, Up: true}
	waitFor(t, "a restores its IPv6 address", func() bool {
		addrs, _ := a.nd.Addrs()
		return slices.Contains(addrs, netip.PrefixFrom(a.ip6, 64))
	})
}
