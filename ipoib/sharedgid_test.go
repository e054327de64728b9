package ipoib

import (
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/netdev/netdevtest"
)

// TestSharedGIDClaims: c, a second interface on b's port (as two pods'
// children are), tells a that b's address is at c. Where one port is one
// interface, a claim from the claimed QPN on the entry's own port is a
// restart and wins at once; with SharedGIDs it is another interface's
// claim, checked as any: b still answers, so a refutes it and keeps
// sending to b. An announcement that names b's own link address as the
// one it replaces (Config.Replaces: b's daemon restarted and took the
// interface back) wins at once with SharedGIDs too; one naming another
// is an impostor's. The same for IPv6, whose unsolicited NA carries the
// replaced address in an option of ours.
//
// A restart is b's daemon gone: b is closed before c's claim, so that its
// old QPN answers nothing, as after a real restart. (With b alive, anything
// b sent after the claim, such as its answer to a probe, was itself a claim
// from b's own QPN on the port and took the entry back.) Hosts run in
// datagram mode: a connection attempt that timed out under load made a
// probe b. A restart must win at once, not after the probes' silence.
func TestSharedGIDClaims(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shared   bool
		replaces string // "b": an announcement naming b's link address; "a": naming a's
		ipv6     bool   // the claim is an NA (the replaced address in its option) for b's IPv6 address
	}{
		{"one interface per port: a restart", false, "", false},
		{"shared GIDs: an impostor", true, "", false},
		{"shared GIDs: a restart naming the old address", true, "b", false},
		{"shared GIDs: an impostor naming another address", true, "a", false},
		{"IPv6, shared GIDs: an impostor", true, "", true},
		{"IPv6, shared GIDs: a restart naming the old address", true, "b", true},
		{"IPv6, shared GIDs: an impostor naming another address", true, "a", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			datagram := func(c *Config) { c.Mode = Datagram }
			h := newFakeHosts(t, 2, func(c *Config) { c.SharedGIDs = tc.shared; c.Mode = Datagram }, datagram)
			a, b := h[0], h[1]
			c := &fakeHost{ibdev: b.ibdev, nd: netdevtest.New(), ip4: netip.MustParseAddr("10.9.0.3")}
			var err error
			c.Interface, err = newOnFake(c.nd, Config{Name: "ib1", Device: b.ibdev, Queues: 1, Mode: Datagram, // b holds the port's QP1
				Addrs: []netip.Prefix{netip.PrefixFrom(c.ip4, 24)}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			c.Start()
			t.Cleanup(c.Close)
			if c.port.local.GID != b.port.local.GID || c.port.local.QPN == b.port.local.QPN {
				t.Fatalf("c %v is not a second interface on b's port %v", c.port.local, b.port.local)
			}
			src, dst := a.ip4, b.ip4
			if tc.ipv6 {
				src, dst = a.ip6, b.ip6
			}
			a.send(packetTo(src, dst, 100, 1))
			b.next(t)
			refuted := a.count(impostors)
			restart := !tc.shared || tc.replaces == "b"
			if restart {
				b.Close()
			}
			c.do(func() {
				if tc.ipv6 {
					na := neigh.NeighborMessage{Type: neigh.TypeNeighborAdvertisement, Override: true, Target: b.ip6, LinkAddr: c.port.local, HasLinkAddr: true}
					switch tc.replaces {
					case "b":
						na.Replaces, na.HasReplaces = b.port.local, true
					case "a":
						na.Replaces, na.HasReplaces = a.port.local, true
					}
					c.ctl.sendND(&na, b.ip6, a.ip6, a.port.local, true)
					return
				}
				claim := neigh.ARP{Op: neigh.ARPReply, SenderHW: c.port.local, SenderIP: b.ip4, TargetHW: a.port.local, TargetIP: a.ip4}
				switch tc.replaces {
				case "b":
					claim = neigh.ARP{Op: neigh.ARPRequest, SenderHW: c.port.local, SenderIP: b.ip4, TargetHW: b.port.local, TargetIP: b.ip4}
				case "a":
					claim = neigh.ARP{Op: neigh.ARPRequest, SenderHW: c.port.local, SenderIP: b.ip4, TargetHW: a.port.local, TargetIP: b.ip4}
				}
				c.ctl.sendARP(&claim, a.port.local, true)
			})
			if restart {
				waitFor(t, "a to act on c's claim", func() bool {
					n, _ := a.neighbor(dst)
					return n.LinkAddr == c.LinkAddr().String() || n.State == "PROBING"
				})
				if n, _ := a.neighbor(dst); n.LinkAddr != c.LinkAddr().String() {
					t.Fatalf("a's neighbor b is %s at %s: c's claim was checked, not taken at once as b's restart", n.State, n.LinkAddr)
				}
				return
			}
			waitFor(t, "a refutes c's claim", func() bool { return a.count(impostors) > refuted })
			if n, _ := a.neighbor(dst); n.LinkAddr != b.LinkAddr().String() {
				t.Errorf("a's neighbor b is at %s after c's claim, want b's %v", n.LinkAddr, b.LinkAddr())
			}
			out := packetTo(src, dst, 100, 2)
			a.send(out)
			if got := b.next(t); string(got) != string(out) {
				t.Fatalf("b got %d octets after c's claim, want a's packet", len(got))
			}
		})
	}
}
