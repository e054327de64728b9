package main

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ipoibd/ipoibd/ipoib"
)

// connTo is host k's established connection in direction dir whose peer
// is named by ip, if there is one.
func connTo(cs []ipoib.ConnInfo, ip, dir string) (ipoib.ConnInfo, bool) {
	for _, x := range cs {
		if x.State == "established" && x.Direction == dir && len(x.PeerIPs) > 0 && x.PeerIPs[0] == ip {
			return x, true
		}
	}
	return ipoib.ConnInfo{}, false
}

// TestConnFigures: after a ping and a short iperf3 from h1 to h2, `conn`
// fits 100 columns and names the peer by its IP address and QPN@GUID
// (--wide by its full link address); each side's connection counted at
// least the octets iperf3 moved, the pings that went over UD before the
// connection was up are counted, and softib tells the QP's RNR NAKs,
// retransmits and path MTU.
func TestConnFigures(t *testing.T) {
	c := newCluster(t, "connfig", 2)
	c.start(1)
	c.start(2)
	c.ping(1, c.ip4(2), 2)
	before1, before2 := c.conns(1), c.conns(2)
	out1, ok1 := connTo(before1, c.ip4(2), "out")
	in2, ok2 := connTo(before2, c.ip4(1), "in")
	if !ok1 || !ok2 {
		t.Fatalf("no connection h1 -> h2 after the pings: h1 %+v, h2 %+v", before1, before2)
	}
	r := runIperf3(t, c, 1, 2, c.ip4(2), 2)
	if r.received <= 0 {
		t.Fatalf("iperf3 moved nothing: %+v", r)
	}
	after1, after2 := c.conns(1), c.conns(2)
	out1b, _ := connTo(after1, c.ip4(2), "out")
	in2b, _ := connTo(after2, c.ip4(1), "in")
	if out1b.LocalQPN != out1.LocalQPN || in2b.LocalQPN != in2.LocalQPN {
		t.Fatalf("the connections changed under iperf3: h1 %+v -> %+v, h2 %+v -> %+v", out1, out1b, in2, in2b)
	}

	// iperf3's payload crossed h1's connection and h2's end of it; the
	// counters count IP octets, headers included, so at least as many.
	for _, tc := range []struct {
		what          string
		before, after uint64
		atLeast       float64
	}{
		{"h1's tx_bytes to h2", out1.TxBytes, out1b.TxBytes, r.received},
		{"h2's rx_bytes from h1", in2.RxBytes, in2b.RxBytes, r.received},
		{"h1's tx_packets to h2", out1.TxPackets, out1b.TxPackets, r.received / 65520},
		{"h2's rx_packets from h1", in2.RxPackets, in2b.RxPackets, r.received / 65520},
	} {
		if d := float64(tc.after - tc.before); tc.after < tc.before || d < tc.atLeast {
			t.Errorf("%s: %d, then %d; want it to grow by at least %.0f", tc.what, tc.before, tc.after, tc.atLeast)
		} else {
			t.Logf("%s grew by %.0f (%.4f × iperf3's)", tc.what, d, d/tc.atLeast)
		}
	}
	if out1b.UDFallbacks < 1 {
		t.Errorf("h1 counts %d packets to h2 over UD before the connection; the first ping went so", out1b.UDFallbacks)
	}
	for _, x := range []ipoib.ConnInfo{out1b, in2b} {
		if x.RNRNAKs < 0 || x.Retransmits < 0 || x.PathMTU < 1024 || x.UpSecs < 0 || x.QPCounters["tx_bytes"] == 0 && x.QPCounters["rx_bytes"] == 0 {
			t.Errorf("%s connection: rnr_naks %d retransmits %d path_mtu %d up %ds qp counters %v; want softib's figures",
				x.Direction, x.RNRNAKs, x.Retransmits, x.PathMTU, x.UpSecs, x.QPCounters)
		}
	}

	// The text: at most 100 columns, the peer by IP address and short link.
	text := c.on(1, binary, "conn")
	var named bool
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if n := utf8.RuneCountInString(l); n > 100 {
			t.Errorf("conn: a line of %d columns:\n%s", n, l)
		}
		named = named || strings.HasPrefix(l, c.ip4(2)+" ") && strings.Contains(l, out1b.ShortLink()) && strings.Contains(l, " up ")
	}
	if !named || strings.Contains(text, out1b.Peer) {
		t.Errorf("conn does not name h2 by %s and %s, or shows its full link address:\n%s", c.ip4(2), out1b.ShortLink(), text)
	}
	if wide := c.on(1, binary, "conn", "--wide"); !strings.Contains(wide, out1b.Peer) || !strings.Contains(wide, c.ip4(2)) {
		t.Errorf("conn --wide lacks h2's link address %s or address %s:\n%s", out1b.Peer, c.ip4(2), wide)
	}
	t.Logf("h1's conn:\n%s", text)
}
