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
// is an impostor's.
func TestSharedGIDClaims(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shared   bool
		replaces string // "b": an announcement naming b's link address; "a": naming a's
	}{
		{"one interface per port: a restart", false, ""},
		{"shared GIDs: an impostor", true, ""},
		{"shared GIDs: a restart naming the old address", true, "b"},
		{"shared GIDs: an impostor naming another address", true, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHosts(t, 2, func(c *Config) { c.SharedGIDs = tc.shared })
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
			a.send(packetTo(a.ip4, b.ip4, 100, 1))
			b.next(t)
			refuted := a.count(impostors)
			c.do(func() {
				claim := neigh.ARP{Op: neigh.ARPReply, SenderHW: c.port.local, SenderIP: b.ip4, TargetHW: a.port.local, TargetIP: a.ip4}
				switch tc.replaces {
				case "b":
					claim = neigh.ARP{Op: neigh.ARPRequest, SenderHW: c.port.local, SenderIP: b.ip4, TargetHW: b.port.local, TargetIP: b.ip4}
				case "a":
					claim = neigh.ARP{Op: neigh.ARPRequest, SenderHW: c.port.local, SenderIP: b.ip4, TargetHW: a.port.local, TargetIP: b.ip4}
				}
				c.ctl.sendARP(&claim, a.port.local, true)
			})
			if !tc.shared || tc.replaces == "b" {
				waitFor(t, "a to take the claim as b's restart", func() bool {
					n, _ := a.neighbor(b.ip4)
					return n.LinkAddr == c.LinkAddr().String()
				})
				return
			}
			waitFor(t, "a refutes c's claim", func() bool { return a.count(impostors) > refuted })
			if n, _ := a.neighbor(b.ip4); n.LinkAddr != b.LinkAddr().String() {
				t.Errorf("a's neighbor b is at %s after c's claim, want b's %v", n.LinkAddr, b.LinkAddr())
			}
			out := packetTo(a.ip4, b.ip4, 100, 2)
			a.send(out)
			if got := b.next(t); string(got) != string(out) {
				t.Fatalf("b got %d octets after c's claim, want a's packet", len(got))
			}
		})
	}
}
