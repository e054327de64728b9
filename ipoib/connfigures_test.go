package ipoib

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

// figures is what Connections says of h's connections, flattened: for
// each direction ("out", "in") its traffic counters, and the peer's UD
// fallbacks, under "<dir>/<name>" and "ud_fallbacks".
func (h *fakeHost) figures(t *testing.T) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, c := range h.Connections() {
		if c.State != "established" {
			continue
		}
		for name, v := range map[string]uint64{"tx_packets": c.TxPackets, "tx_bytes": c.TxBytes, "rx_packets": c.RxPackets, "rx_bytes": c.RxBytes} {
			out[c.Direction+"/"+name] += v
		}
		out["ud_fallbacks"] = c.UDFallbacks // the peer's: the same on each of its connections
	}
	return out
}

// TestConnectionCounters: each connection counts the IP packets and
// octets it carried each way, and a peer counts the packets that went to
// it over UD because no connection was up yet; nothing else moves them.
// Two hosts, the linux policy: each sends on the connection it opened
// and receives on the one the other opened.
func TestConnectionCounters(t *testing.T) {
	h := newFakeHosts(t, 2)
	a, b := h[0], h[1]
	viaRC := func(from, to *fakeHost, ip netip.Addr) func() bool {
		return func() bool { n, _ := from.neighbor(ip); return n.Via == "RC" }
	}
	for _, tc := range []struct {
		name       string
		from, to   *fakeHost
		dst        netip.Addr
		size, n    int
		connectsTo bool              // the sender connects meanwhile: wait for it
		want       map[string]uint64 // deltas, "a/out/tx_bytes"; every other figure stays
	}{
		// Unresolved: resolution, then the packet goes over UD ahead of
		// the REQ.
		{"first packet, over UD", a, b, b.ip4, 1000, 1, true, map[string]uint64{"a/ud_fallbacks": 1}},
		{"over a's connection", a, b, b.ip4, 60000, 3, false, map[string]uint64{
			"a/out/tx_packets": 3, "a/out/tx_bytes": 180000, "b/in/rx_packets": 3, "b/in/rx_bytes": 180000}},
		// b learned a from its solicitation: no resolution, but its
		// connection comes only now. The first packet goes over UD, sent
		// by the control goroutine as it takes up what it learned, and
		// asks for the connection.
		{"b's first packet, over UD", b, a, a.ip4, 100, 1, true, map[string]uint64{"b/ud_fallbacks": 1}},
		{"over b's connection", b, a, a.ip4, 5000, 2, false, map[string]uint64{
			"b/out/tx_packets": 2, "b/out/tx_bytes": 10000, "a/in/rx_packets": 2, "a/in/rx_bytes": 10000}},
		// A second address of a connected node takes its connection at
		// once, once resolved.
		{"IPv6, resolved onto the connection", a, b, b.ip6, 1280, 1, false, map[string]uint64{
			"a/out/tx_packets": 1, "a/out/tx_bytes": 1280, "b/in/rx_packets": 1, "b/in/rx_bytes": 1280}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := map[string]map[string]uint64{"a": a.figures(t), "b": b.figures(t)}
			src := a.ip4
			if tc.from == b {
				src = b.ip4
			}
			if tc.dst.Is6() {
				src = tc.from.ip6
			}
			for k := range tc.n {
				p := packetTo(src, tc.dst, tc.size, byte(k))
				tc.from.send(p)
				if got := tc.to.next(t); len(got) != len(p) {
					t.Fatalf("delivered %d octets, want %d", len(got), len(p))
				}
			}
			if tc.connectsTo {
				waitFor(t, "the sender's connection up", viaRC(tc.from, tc.to, tc.dst))
			}
			a.quiet(t)
			b.quiet(t)
			after := map[string]map[string]uint64{"a": a.figures(t), "b": b.figures(t)}
			for _, host := range []string{"a", "b"} {
				for _, key := range []string{"out/tx_packets", "out/tx_bytes", "out/rx_packets", "out/rx_bytes",
					"in/tx_packets", "in/tx_bytes", "in/rx_packets", "in/rx_bytes", "ud_fallbacks"} {
					name := host + "/" + key
					if d := after[host][key] - before[host][key]; d != tc.want[name] {
						t.Errorf("%s grew by %d, want %d", name, d, tc.want[name])
					}
				}
			}
		})
	}

	// What the provider cannot tell (ibtest counts no retransmits or RNR
	// NAKs) is -1, not 0; the rest is named.
	for _, c := range a.Connections() {
		if c.RNRNAKs != -1 || c.Retransmits != -1 || len(c.QPCounters) == 0 {
			t.Errorf("a's %s connection: rnr_naks %d retransmits %d, want -1 (ibtest counts neither); qp counters %v", c.Direction, c.RNRNAKs, c.Retransmits, c.QPCounters)
		}
		if want := []string{b.ip4.String(), b.ip6.String()}; !slices.Equal(c.PeerIPs, want) {
			t.Errorf("a's %s connection names its peer %v, want %v (IPv4 first)", c.Direction, c.PeerIPs, want)
		}
		if c.PathMTU < 256 || c.PeerUDQPN != uint32(b.port.local.QPN) || c.PeerGUID != fmt.Sprintf("0x%016x", b.port.local.GID[8:]) {
			t.Errorf("a's %s connection: path MTU %d, peer UD QPN %#x GUID %s; want an IB MTU and b's %v", c.Direction, c.PathMTU, c.PeerUDQPN, c.PeerGUID, b.port.local)
		}
	}
}
