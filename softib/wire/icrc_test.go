package wire

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

// The two captured RoCEv2 packets of spec §9, IP header to ICRC.
var (
	specVector1 = `
		45 00 00 bc 00 01 00 00 40 11 f8 da c0 a8 00 02 c0 a8 00 03 # IPv4 192.168.0.2 -> .3
		12 b7 12 b7 00 a8 00 00                                     # UDP 4791 -> 4791, len 168
		0a 80 00 00 00 00 00 02 80 00 00 00                         # BTH RDMA WRITE Only, SE, QP 2, AckReq
		00 00 7f 7e 91 00 00 00 01 70 9a 33 00 00 00 80             # RETH
		` + strings.Repeat("ff ", 128) + `                          # payload
		c6 87 22 98                                                 # ICRC`
	specVector2 = `
		45 00 00 00 00 00 00 00 40 11 7c e8 7f 00 00 03 7f 00 00 02 # IPv4 127.0.0.3 -> 127.0.0.2, total length 0
		12 b7 12 b7 00 20 00 00                                     # UDP 4791 -> 4791, len 32
		11 00 00 00 00 00 00 02 00 00 00 00                         # BTH RC ACK, QP 2
		00 00 00 00                                                 # AETH
		00 00 00 00                                                 # vendor octets
		40 21 a3 cf                                                 # ICRC (the vector has a zero slot)`
)

// The UD SEND Only of packet_test.go behind IPv4 and IPv6 headers written
// from the spec §1 rules; the ICRCs were computed apart from this code, with
// Python's zlib.crc32 over the §9 string.
const (
	udIPv4Headers = `
		45 00 00 3c 00 00 40 00 40 11 b6 ad c0 00 02 01 c0 00 02 02 # IPv4, total 60, ID 0, DF, TTL 64, UDP, checksum 0xB6AD, 192.0.2.1 -> 192.0.2.2
		12 b7 12 b7 00 28 00 00                                     # UDP 4791 -> 4791, len 40, checksum 0`
	udIPv6Headers = `
		60 00 00 00 00 28 11 40                                     # IPv6, payload 40, UDP, hop limit 64
		20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01             # 2001:db8::1
		20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 02             # 2001:db8::2
		12 b7 12 b7 00 28 00 00                                     # UDP`
	udIPv4ICRC = "ba 1b 1c 1b"
	udIPv6ICRC = "58 8d 61 b8"
)

// splitIPUDP splits a captured packet into IP header, UDP header, IB
// packet without ICRC and the ICRC octets.
func splitIPUDP(t testing.TB, pkt []byte) (ip, udp, ibp, icrc []byte) {
	t.Helper()
	n := IPv4HeaderLen
	if pkt[0]>>4 == 6 {
		n = IPv6HeaderLen
	}
	return pkt[:n], pkt[n : n+UDPHeaderLen], pkt[n+UDPHeaderLen : len(pkt)-ICRCLen], pkt[len(pkt)-ICRCLen:]
}

func TestICRCVectors(t *testing.T) {
	tests := []struct {
		name string
		pkt  string
		want string // as transmitted
	}{
		{"spec vector 1: RDMA WRITE Only", specVector1, "c6 87 22 98"},
		{"spec vector 2: RC ACK", specVector2, "40 21 a3 cf"},
		{"UD SEND Only over IPv4", udIPv4Headers + pktUDSendOnly, udIPv4ICRC},
		{"UD SEND Only over IPv6", udIPv6Headers + pktUDSendOnly, udIPv6ICRC},
	}
	for _, tt := range tests {
		pkt := testutil.Unhex(t, tt.pkt)
		ip, udp, ibp, _ := splitIPUDP(t, pkt)
		crc, err := ICRC(ip, udp, ibp)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var got [ICRCLen]byte
		PutICRC(got[:], crc)
		want := testutil.Unhex(t, tt.want)
		if !bytes.Equal(got[:], want) {
			t.Errorf("%s: ICRC % x, want % x", tt.name, got, want)
		}
		if GetICRC(want) != crc {
			t.Errorf("%s: GetICRC %08x, want %08x", tt.name, GetICRC(want), crc)
		}
		// Fed in pieces split anywhere, the digest agrees.
		for i := range len(ibp) + 1 {
			for _, j := range []int{i, min(i+1, len(ibp)), min(i+5, len(ibp)), len(ibp)} {
				d, _ := StartICRC(ip, udp)
				d.Update(ibp[:i])
				d.Update(ibp[i:j])
				d.Update(ibp[j:])
				if d.Sum32() != crc {
					t.Fatalf("%s: split at %d, %d: %08x, want %08x", tt.name, i, j, d.Sum32(), crc)
				}
			}
		}
	}
}

// Masked fields do not change the ICRC; everything else does.
func TestICRCMasking(t *testing.T) {
	for _, hdrs := range []string{udIPv4Headers, udIPv6Headers} {
		pkt := testutil.Unhex(t, hdrs+pktUDSendOnly)
		ip, udp, ibp, _ := splitIPUDP(t, pkt)
		base, _ := ICRC(ip, udp, ibp)
		var masked []int // offsets into the IP header
		if len(ip) == IPv4HeaderLen {
			masked = []int{1, 8, 10, 11} // TOS, TTL, checksum
		} else {
			masked = []int{1, 2, 3, 7} // traffic class and flow label, hop limit
		}
		for i := range ip {
			c := bytes.Clone(ip)
			c[i] ^= 0x0f // keeps the version nibble of octet 0
			if i == 0 && len(ip) == IPv4HeaderLen {
				continue // the IHL must stay 5
			}
			got, err := ICRC(c, udp, ibp)
			isMasked := i == 0 && len(ip) == IPv6HeaderLen || contains(masked, i)
			if err != nil || (got == base) != isMasked {
				t.Errorf("%d-octet IP header, octet %d flipped: %08x (base %08x), %v", len(ip), i, got, base, err)
			}
		}
		for i := range udp {
			c := bytes.Clone(udp)
			c[i] ^= 0xff
			got, _ := ICRC(ip, c, ibp)
			if (got == base) != (i >= 6) {
				t.Errorf("UDP octet %d flipped: %08x", i, got)
			}
		}
		for i := range BTHLen {
			c := bytes.Clone(ibp)
			c[i] ^= 0xff
			got, _ := ICRC(ip, udp, c)
			if (got == base) != (i == 4) {
				t.Errorf("BTH octet %d flipped: %08x", i, got)
			}
		}
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestICRCErrors(t *testing.T) {
	pkt := testutil.Unhex(t, udIPv4Headers+pktUDSendOnly)
	ip, udp, ibp, _ := splitIPUDP(t, pkt)
	options := append([]byte{0x46}, make([]byte, 23)...)
	tests := []struct {
		name          string
		ip, udp, ibp  []byte
		format, field string
	}{
		{"IPv4 with options", options, udp, ibp, "ICRC", "IP header"},
		{"IHL 6 in 20 octets", append([]byte{0x46}, ip[1:]...), udp, ibp, "ICRC", "IP header"},
		{"truncated IPv4", ip[:19], udp, ibp, "ICRC", "IP header"},
		{"IPv6 version in 20 octets", append([]byte{0x60}, ip[1:]...), udp, ibp, "ICRC", "IP header"},
		{"no IP header", nil, udp, ibp, "ICRC", "IP header"},
		{"short UDP header", ip, udp[:7], ibp, "ICRC", "UDP header"},
		{"no BTH", ip, udp, ibp[:11], "ICRC", "BTH"},
	}
	for _, tt := range tests {
		_, err := ICRC(tt.ip, tt.udp, tt.ibp)
		t.Run(tt.name, func(t *testing.T) { testutil.WantField(t, err, tt.format, tt.field) })
	}
}

func TestAppendIPUDPHeaders(t *testing.T) {
	ibLen := len(testutil.Unhex(t, pktUDSendOnly))
	tests := []struct {
		src, dst string
		want     string
	}{
		{"192.0.2.1", "192.0.2.2", udIPv4Headers},
		{"::ffff:192.0.2.1", "::ffff:192.0.2.2", udIPv4Headers}, // IPv4-mapped GIDs go as IPv4
		{"2001:db8::1", "2001:db8::2", udIPv6Headers},
	}
	for _, tt := range tests {
		got, err := AppendIPUDPHeaders([]byte{0xee}, netip.MustParseAddr(tt.src), netip.MustParseAddr(tt.dst), UDPPort, UDPPort, 64, ibLen)
		if err != nil {
			t.Fatal(err)
		}
		if want := testutil.Unhex(t, tt.want); got[0] != 0xee || !bytes.Equal(got[1:], want) {
			t.Errorf("%s -> %s:\n% x\nwant\n% x", tt.src, tt.dst, got[1:], want)
		}
	}
	// The header checksum verifies (sums to 0xFFFF) for other lengths too.
	h, _ := AppendIPUDPHeaders(nil, netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("10.200.0.1"), 50000, UDPPort, 1, 65535-28)
	if ipv4Checksum(h[:IPv4HeaderLen]) != 0 || h[20] != 0xc3 || h[21] != 0x50 || h[22] != 0x12 || h[23] != 0xb7 {
		t.Errorf("header % x", h)
	}
}

func TestAppendIPUDPHeadersErrors(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	tests := []struct {
		name     string
		src, dst netip.Addr
		ibLen    int
		field    string
	}{
		{"no source", netip.Addr{}, v4, 20, "source"},
		{"no destination", v4, netip.Addr{}, 20, "destination"},
		{"mixed families", v4, v6, 20, "destination"},
		{"IPv4 too long", v4, v4, 65535 - 27, "total length"},
		{"IPv4 negative", v4, v4, -1, "total length"},
		{"IPv6 too long", v6, v6, 65535 - 7, "payload length"},
	}
	for _, tt := range tests {
		out, err := AppendIPUDPHeaders([]byte{1}, tt.src, tt.dst, UDPPort, UDPPort, 64, tt.ibLen)
		t.Run(tt.name, func(t *testing.T) { testutil.WantField(t, err, "IP header", tt.field) })
		if len(out) != 1 {
			t.Errorf("%s: output grew on error", tt.name)
		}
	}
	if _, err := AppendIPUDPHeaders(nil, v6, v6, 1, 2, 64, 65535-8); err != nil {
		t.Errorf("largest IPv6 datagram: %v", err)
	}
}

// A receiver rebuilds the headers from socket addresses and checks the
// ICRC of the hand-built packet, all without allocating.
func TestICRCReceivePathAllocs(t *testing.T) {
	wire := testutil.Unhex(t, pktUDSendOnly)
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	check := func() bool {
		var hb [IPv6HeaderLen + UDPHeaderLen]byte
		h, err := AppendIPUDPHeaders(hb[:0], src, dst, UDPPort, UDPPort, 64, len(wire))
		if err != nil {
			return false
		}
		crc, err := ICRC(h[:len(h)-UDPHeaderLen], h[len(h)-UDPHeaderLen:], wire[:len(wire)-ICRCLen])
		return err == nil && crc == GetICRC(wire[len(wire)-ICRCLen:])
	}
	if !check() {
		t.Fatal("ICRC of the hand-built UD packet does not verify")
	}
	srcAP := netip.AddrPortFrom(src, UDPPort)
	if _, ok := CheckDatagramICRC(wire, srcAP, dst, UDPPort, 0); !ok {
		t.Fatal("datapath ICRC check fails")
	}
	if n := testing.AllocsPerRun(100, func() { check() }); n != 0 {
		t.Errorf("receive check: %v allocs", n)
	}
	if n := testing.AllocsPerRun(100, func() { CheckDatagramICRC(wire, srcAP, dst, UDPPort, 0) }); n != 0 {
		t.Errorf("datapath check: %v allocs", n)
	}
}

func FuzzICRC(f *testing.F) {
	for _, v := range []string{specVector1, specVector2, udIPv4Headers + pktUDSendOnly, udIPv6Headers + pktUDSendOnly} {
		f.Add(testutil.Unhex(f, v), uint16(3), uint16(9))
	}
	f.Fuzz(func(t *testing.T, in []byte, i, j uint16) {
		n := 0
		switch {
		case len(in) >= IPv6HeaderLen+UDPHeaderLen && in[0]>>4 == 6:
			n = IPv6HeaderLen
		case len(in) >= IPv4HeaderLen+UDPHeaderLen:
			n = IPv4HeaderLen
		default:
			return
		}
		ip, udp, ibp := in[:n], in[n:n+UDPHeaderLen], in[n+UDPHeaderLen:]
		crc, err := ICRC(ip, udp, ibp)
		if err != nil {
			return
		}
		a, b := min(int(i), len(ibp)), min(int(j), len(ibp))
		a, b = min(a, b), max(a, b)
		d, err := StartICRC(ip, udp)
		if err != nil {
			t.Fatal(err)
		}
		d.Update(ibp[:a])
		d.Update(ibp[a:b])
		d.Update(ibp[b:])
		if d.Sum32() != crc {
			t.Fatalf("split at %d, %d: %08x, one piece: %08x", a, b, d.Sum32(), crc)
		}
	})
}

func benchmarkICRC(b *testing.B, size int) {
	ibp := make([]byte, size)
	copy(ibp, testutil.Unhex(b, pktRCSendMiddle))
	// 64 KiB does not fit in an IPv4 datagram; the ICRC does not mind, so
	// the header just claims the largest length.
	ibLen := min(size+ICRCLen, 0xffff-IPv4HeaderLen-UDPHeaderLen)
	h, err := AppendIPUDPHeaders(nil, netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), UDPPort, UDPPort, 64, ibLen)
	if err != nil {
		b.Fatal(err)
	}
	ip, udp := h[:IPv4HeaderLen], h[IPv4HeaderLen:]
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ICRC(ip, udp, ibp); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkICRC64K(b *testing.B) { benchmarkICRC(b, 64<<10) }

// BenchmarkICRC4K is one full-MTU packet.
func BenchmarkICRC4K(b *testing.B) { benchmarkICRC(b, BTHLen+4096) }

// BenchmarkICRCAck is the smallest packet, where the pseudo header
// dominates.
func BenchmarkICRCAck(b *testing.B) { benchmarkICRC(b, BTHLen+AETHLen) }
