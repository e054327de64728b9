package ipoib

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/ipoibd/ipoibd/netdev"
	"github.com/ipoibd/ipoibd/netdev/netdevtest"
)

// TestFlowQueue: every packet of a flow goes to one queue, fragments
// included; flows spread over the queues; what does not parse goes to
// the first.
func TestFlowQueue(t *testing.T) {
	w := &flowWriter{queues: 4}
	udp := func(src, dst string, sport, dport uint16, size int, seq byte) []byte {
		p := packetTo(netip.MustParseAddr(src), netip.MustParseAddr(dst), size, seq)
		hdr := 20
		if p[0]>>4 == 6 {
			hdr = 40
		}
		binary.BigEndian.PutUint16(p[hdr:], sport)
		binary.BigEndian.PutUint16(p[hdr+2:], dport)
		return p
	}
	for _, tc := range []struct {
		name string
		a, b []byte
		same bool
	}{
		{"IPv4, one flow", udp("10.0.0.1", "10.0.0.2", 5000, 5201, 100, 1), udp("10.0.0.1", "10.0.0.2", 5000, 5201, 1400, 2), true},
		{"IPv6, one flow", udp("fd00::1", "fd00::2", 5000, 5201, 100, 1), udp("fd00::1", "fd00::2", 5000, 5201, 900, 2), true},
	} {
		if got := w.queueOf(tc.a) == w.queueOf(tc.b); got != tc.same {
			t.Errorf("%s: same queue %v, want %v", tc.name, got, tc.same)
		}
	}
	// A later fragment carries no ports: every fragment of a datagram
	// hashes on the addresses alone, the first one too.
	first := udp("10.0.0.1", "10.0.0.2", 5000, 5201, 100, 1)
	binary.BigEndian.PutUint16(first[6:], 0x2000) // MF
	later := udp("10.0.0.1", "10.0.0.2", 0x1234, 0x5678, 100, 1)
	binary.BigEndian.PutUint16(later[6:], 0x0010) // offset 128
	if w.queueOf(first) != w.queueOf(later) {
		t.Errorf("the fragments of one datagram go to queues %d and %d", w.queueOf(first), w.queueOf(later))
	}
	used := map[int]bool{}
	for port := uint16(40000); port < 40064; port++ {
		q := w.queueOf(udp("10.0.0.1", "10.0.0.2", port, 5201, 100, 1))
		if q < 0 || q >= 4 {
			t.Fatalf("queue %d of 4", q)
		}
		used[q] = true
	}
	if len(used) != 4 {
		t.Errorf("64 flows went to %d of 4 queues", len(used))
	}
	for _, bad := range [][]byte{nil, {0x45}, {0x60, 0, 0}, make([]byte, 100)} {
		if q := w.queueOf(bad); q != 0 {
			t.Errorf("queueOf(%x) = %d, want 0", bad, q)
		}
	}
	// One queue, or a netdev that cannot choose: no flow writer.
	if newFlowWriter(netdevtest.New().Open(netdev.Config{Name: "ib0", Queues: 1})) != nil {
		t.Errorf("a flow writer for one queue")
	}
}
