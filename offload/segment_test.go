package offload

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

func TestSplit(t *testing.T) {
	tcp4 := spec{sport: 40000, dport: 5201, id: 0x1000, seq: 1_000_000, ack: 77, flags: tcpACK, win: 512, tcpOpts: tsOpts}
	tcp6 := spec{v6: true, sport: 40000, dport: 5201, tos: 0x28, flow: 0xabcde, seq: 5, ack: 9, flags: tcpACK, win: 100, tcpOpts: tsOpts}
	udp4 := spec{udp: true, sport: 4789, dport: 53, id: 7}
	udp6 := spec{v6: true, udp: true, sport: 4789, dport: 53}
	with := func(s spec, f func(*spec)) spec { f(&s); return s }
	for _, tt := range []struct {
		name    string
		s       spec
		payload int
		mss     int
		n       int // segments
	}{
		{"TCPv4 timestamps, last short", tcp4, 10000, 1448, 7},
		{"TCPv4 exact multiple", tcp4, 4 * 1448, 1448, 4},
		{"TCPv4 odd sizes", tcp4, 9999, 1001, 10},
		{"TCPv4 one segment", tcp4, 1000, 1448, 1},
		{"TCPv4 one full segment", tcp4, 1448, 1448, 1},
		{"TCPv4 no payload", tcp4, 0, 1448, 1},
		{"TCPv4 no options", with(tcp4, func(s *spec) { s.tcpOpts = nil }), 3000, 1460, 3},
		{"TCPv4 IP options", with(tcp4, func(s *spec) { s.ipOpts = []byte{1, 1, 1, 0} }), 3000, 1000, 3},
		{"TCPv4 PSH FIN on the last only", with(tcp4, func(s *spec) { s.flags |= tcpPSH | tcpFIN }), 5000, 1448, 4},
		{"TCPv4 CWR on the first only, ECE on all", with(tcp4, func(s *spec) { s.flags |= tcpCWR | tcpECE | tcpPSH }), 5000, 1448, 4},
		{"TCPv4 ID wraps", with(tcp4, func(s *spec) { s.id = 0xfffe }), 5000, 1448, 4},
		{"TCPv4 no DF", with(tcp4, func(s *spec) { s.noDF = true }), 5000, 1448, 4},
		{"TCPv4 seq wraps", with(tcp4, func(s *spec) { s.seq = 0xffffff00 }), 5000, 1448, 4},
		{"TCPv4 64 KiB", tcp4, 65535 - 52, 4052, 17},
		{"TCPv4 gso_size 1", tcp4, 5, 1, 5},
		{"TCPv6 timestamps, odd", tcp6, 12345, 1428, 9},
		{"TCPv6 PSH CWR", with(tcp6, func(s *spec) { s.flags |= tcpPSH | tcpCWR }), 3000, 1000, 3},
		{"TCPv6 one segment", tcp6, 1, 1000, 1},
		{"TCPv6 64 KiB", tcp6, 65535 - 32, 65000, 2},
		{"UDPv4 last short", udp4, 10000, 1472, 7},
		{"UDPv4 odd", udp4, 1001, 100, 11},
		{"UDPv4 one segment", udp4, 1472, 1472, 1},
		{"UDPv6 odd", udp6, 7777, 1231, 7},
		{"UDPv6 exact", udp6, 3 * 1452, 1452, 3},
	} {
		payload := pattern(tt.payload, byte(len(tt.name)))
		h, pkt := super(tt.s, payload, tt.mss)
		orig := bytes.Clone(pkt)
		s, err := Split(h, pkt)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if s.Len() != tt.n {
			t.Errorf("%s: %d segments, want %d", tt.name, s.Len(), tt.n)
			continue
		}
		hdrs := tt.s.ipLen() + tt.s.l4Len()
		if want := hdrs + min(tt.mss, tt.payload); s.MaxLen() != want {
			t.Errorf("%s: MaxLen %d, want %d", tt.name, s.MaxLen(), want)
		}
		segs := splitAll(&s)
		if !bytes.Equal(pkt, orig) {
			t.Errorf("%s: the super-packet changed", tt.name)
		}
		var got []byte
		for k, seg := range segs {
			got = append(got, payloadOf(seg)...)
			checkSegment(t, tt.name, k, len(segs), tt.s, orig, seg, tt.mss)
		}
		if !bytes.Equal(got, payload) {
			t.Errorf("%s: reassembled payload differs", tt.name)
		}
	}
}

// checkSegment checks segment k of n against its super-packet orig: valid
// checksums, the length it should have, and every header field what
// segmentation makes it.
func checkSegment(t *testing.T, name string, k, n int, s spec, orig, seg []byte, mss int) {
	t.Helper()
	if err := checkPacket(seg); err != nil {
		t.Errorf("%s: segment %d: %v", name, k, err)
		return
	}
	ipLen, hdrs := s.ipLen(), s.ipLen()+s.l4Len()
	want := min(mss, len(orig)-hdrs-k*mss)
	if len(seg) != hdrs+want {
		t.Errorf("%s: segment %d has %d octets, want %d", name, k, len(seg), hdrs+want)
		return
	}
	// The headers are the super-packet's but for the fields segmentation
	// rewrites, which are compared apart and blanked here.
	a, b := bytes.Clone(orig[:hdrs]), bytes.Clone(seg[:hdrs])
	blank := func(off, n int) { clear(a[off : off+n]); clear(b[off : off+n]) }
	if s.v6 {
		blank(4, 2)
	} else {
		if id := binary.BigEndian.Uint16(seg[4:]); id != s.id+uint16(k) {
			t.Errorf("%s: segment %d: IPv4 ID %#x, want %#x", name, k, id, s.id+uint16(k))
		}
		blank(2, 4)
		blank(10, 2)
	}
	if s.udp {
		blank(ipLen+4, 4)
	} else {
		if seq := binary.BigEndian.Uint32(seg[ipLen+4:]); seq != s.seq+uint32(k*mss) {
			t.Errorf("%s: segment %d: seq %d, want %d", name, k, seq, s.seq+uint32(k*mss))
		}
		flags := s.flags
		if k > 0 {
			flags &^= tcpCWR
		}
		if k < n-1 {
			flags &^= tcpFIN | tcpPSH
		}
		if f := seg[ipLen+13]; f != flags {
			t.Errorf("%s: segment %d: flags %#02x, want %#02x", name, k, f, flags)
		}
		blank(ipLen+4, 4)
		blank(ipLen+13, 1)
		blank(ipLen+16, 2)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s: segment %d: headers\n% x, want\n% x", name, k, b, a)
	}
}

// TestSplitUDPZero: a UDP segment whose checksum computes to 0 carries
// 0xffff, since 0 says it has none.
func TestSplitUDPZero(t *testing.T) {
	s := spec{udp: true, sport: 1, dport: 2}
	payload := pattern(300, 9)
	// Make the second segment's data sum to 0xffff: its checksum is then
	// ^0xffff = 0. Find its current sum from the segment as built alone.
	seg := build(s, payload[100:200])
	l4 := seg[20:]
	binary.BigEndian.PutUint16(l4[6:], 0)
	sum := refFold(refPseudo(seg), l4)
	v := uint32(binary.BigEndian.Uint16(payload[100:])) + uint32(^sum)
	binary.BigEndian.PutUint16(payload[100:], uint16(v&0xffff+v>>16))

	h, pkt := super(s, payload, 100)
	sg, err := Split(h, pkt)
	if err != nil {
		t.Fatal(err)
	}
	segs := splitAll(&sg)
	for k, seg := range segs {
		if err := checkPacket(seg); err != nil {
			t.Errorf("segment %d: %v", k, err)
		}
	}
	if c := binary.BigEndian.Uint16(segs[1][26:]); c != 0xffff {
		t.Errorf("segment 1 checksum %#04x, want 0xffff", c)
	}
}

func TestSplitErrors(t *testing.T) {
	tcp4 := spec{sport: 1, dport: 2, flags: tcpACK, tcpOpts: tsOpts}
	tcp6 := spec{v6: true, sport: 1, dport: 2, flags: tcpACK}
	udp4 := spec{udp: true, sport: 1, dport: 2}
	for _, tt := range []struct {
		name          string
		s             spec
		edit          func(h *Hdr, pkt []byte) []byte
		format, field string
	}{
		{"no GSO", tcp4, func(h *Hdr, p []byte) []byte { h.GSOType = GSONone; return p }, "virtio_net_hdr", "gso_type"},
		{"UFO", udp4, func(h *Hdr, p []byte) []byte { h.GSOType = GSOUDP; return p }, "virtio_net_hdr", "gso_type"},
		{"unknown GSO type", tcp4, func(h *Hdr, p []byte) []byte { h.GSOType = 2; return p }, "virtio_net_hdr", "gso_type"},
		{"ECN on UDP", udp4, func(h *Hdr, p []byte) []byte { h.GSOType |= GSOECN; return p }, "virtio_net_hdr", "gso_type"},
		{"gso_size 0", tcp4, func(h *Hdr, p []byte) []byte { h.GSOSize = 0; return p }, "virtio_net_hdr", "gso_size"},
		{"TCPv4 type on IPv6", tcp6, func(h *Hdr, p []byte) []byte { h.GSOType = GSOTCPv4; return p }, "virtio_net_hdr", "gso_type"},
		{"TCPv6 type on IPv4", tcp4, func(h *Hdr, p []byte) []byte { h.GSOType = GSOTCPv6; return p }, "virtio_net_hdr", "gso_type"},
		{"UDP_L4 on TCP", tcp4, func(h *Hdr, p []byte) []byte { h.GSOType = GSOUDPL4; h.CsumOffset = 6; return p }, "IPv4", "protocol"},
		{"TCPv4 on UDP", udp4, func(h *Hdr, p []byte) []byte { h.GSOType = GSOTCPv4; h.CsumOffset = 16; return p }, "IPv4", "protocol"},
		{"IPv6 destination options", with6(tcp6, 60), nil, "IPv6", "next header"},
		{"IPv6 hop-by-hop", tcp6, func(h *Hdr, p []byte) []byte { p[6] = 0; return p }, "IPv6", "next header"},
		{"empty", tcp4, func(h *Hdr, p []byte) []byte { return nil }, "IP", "version"},
		{"IP version 5", tcp4, func(h *Hdr, p []byte) []byte { p[0] = 0x55; return p }, "IP", "version"},
		{"IPv4 truncated", tcp4, func(h *Hdr, p []byte) []byte { return p[:19] }, "IPv4", "header"},
		{"IPv4 IHL 4", tcp4, func(h *Hdr, p []byte) []byte { p[0] = 0x44; return p }, "IPv4", "IHL"},
		{"IPv4 options truncated", tcp4, func(h *Hdr, p []byte) []byte { p[0] = 0x4f; binary.BigEndian.PutUint16(p[2:], 40); return p[:40] }, "IPv4", "options"},
		{"IPv4 total length short", tcp4, func(h *Hdr, p []byte) []byte { return append(p, 0) }, "IPv4", "total length"},
		{"IPv4 total length long", tcp4, func(h *Hdr, p []byte) []byte { return p[:len(p)-1] }, "IPv4", "total length"},
		{"IPv4 fragment MF", tcp4, func(h *Hdr, p []byte) []byte { p[6] |= 0x20; return p }, "IPv4", "flags"},
		{"IPv4 fragment offset", tcp4, func(h *Hdr, p []byte) []byte { p[7] = 1; return p }, "IPv4", "flags"},
		{"IPv6 truncated", tcp6, func(h *Hdr, p []byte) []byte { return p[:39] }, "IPv6", "header"},
		{"IPv6 payload length", tcp6, func(h *Hdr, p []byte) []byte { return append(p, 0) }, "IPv6", "payload length"},
		{"TCP truncated", tcp4, func(h *Hdr, p []byte) []byte { return shorten(p[:20+19]) }, "TCP", "header"},
		{"TCP data offset 4", tcp4, func(h *Hdr, p []byte) []byte { p[32] = 0x40; return p }, "TCP", "data offset"},
		{"TCP data offset beyond", tcp4, func(h *Hdr, p []byte) []byte { p[32] = 0xf0; return shorten(p[:20+40]) }, "TCP", "data offset"},
		{"UDP truncated", udp4, func(h *Hdr, p []byte) []byte { return shorten(p[:27]) }, "UDP", "header"},
		{"UDP length", udp4, func(h *Hdr, p []byte) []byte { p[25]++; return p }, "UDP", "length"},
		{"csum_start", tcp4, func(h *Hdr, p []byte) []byte { h.CsumStart = 0; return p }, "virtio_net_hdr", "csum_start"},
		{"csum_offset", tcp4, func(h *Hdr, p []byte) []byte { h.CsumOffset = 6; return p }, "virtio_net_hdr", "csum_start"},
		{"UDP csum_offset", udp4, func(h *Hdr, p []byte) []byte { h.CsumOffset = 16; return p }, "virtio_net_hdr", "csum_start"},
	} {
		h, pkt := super(tt.s, pattern(3000, 1), 1000)
		if tt.edit != nil {
			pkt = tt.edit(&h, pkt)
		}
		_, err := Split(h, pkt)
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		testutil.WantField(t, err, tt.format, tt.field)
	}

	// Without NEEDS_CSUM the offsets are not looked at.
	h, pkt := super(tcp4, pattern(3000, 1), 1000)
	h.Flags, h.CsumStart, h.CsumOffset = 0, 0, 0
	if _, err := Split(h, pkt); err != nil {
		t.Errorf("without NEEDS_CSUM: %v", err)
	}
}

func with6(s spec, nextHdr int) spec { s.nextHdr = nextHdr; return s }

// shorten cuts an IPv4 packet to p, keeping its total length right.
func shorten(p []byte) []byte {
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	return p
}

func TestSplitNoAllocs(t *testing.T) {
	h, pkt := super(spec{sport: 1, dport: 2, flags: tcpACK, tcpOpts: tsOpts}, pattern(20000, 1), 1448)
	dst := make([]byte, 2000)
	if n := testing.AllocsPerRun(100, func() {
		s, err := Split(h, pkt)
		if err != nil {
			panic(err)
		}
		for k := range s.Len() {
			s.Put(k, dst)
		}
	}); n != 0 {
		t.Errorf("%v allocations per super-packet", n)
	}
}

func BenchmarkSplit(b *testing.B) {
	// 64 KiB of TCPv4 with timestamps at the gso_size of a 4096-octet MTU.
	h, pkt := super(spec{sport: 1, dport: 2, flags: tcpACK, tcpOpts: tsOpts}, pattern(65535-52, 1), 4052)
	dst := make([]byte, 4200)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		s, err := Split(h, pkt)
		if err != nil {
			b.Fatal(err)
		}
		for k := range s.Len() {
			s.Put(k, dst)
		}
	}
}
