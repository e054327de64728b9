package mtu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/ipoibd/ipoibd/inetsum"
)

var (
	src4  = netip.MustParseAddr("10.99.0.1")
	peer4 = netip.MustParseAddr("10.99.0.2")
	src6  = netip.MustParseAddr("fd99::1")
	peer6 = netip.MustParseAddr("fd99::2")
)

// pkt4 builds an IPv4 packet: 20-octet header with a correct checksum,
// then payload (whose first octets are l4).
func pkt4(total int, flags uint16, proto byte, src, dst netip.Addr, l4 ...byte) []byte {
	p := make([]byte, total)
	p[0] = 0x45
	p[1] = 0x10
	binary.BigEndian.PutUint16(p[2:], uint16(total))
	binary.BigEndian.PutUint16(p[4:], 0x1234)
	binary.BigEndian.PutUint16(p[6:], flags)
	p[8] = 64
	p[9] = proto
	s, d := src.As4(), dst.As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	binary.BigEndian.PutUint16(p[10:], inetsum.Checksum(0, p[:20]))
	copy(p[20:], l4)
	for i := 20 + len(l4); i < total; i++ {
		p[i] = byte(i)
	}
	return p
}

// pkt6 builds an IPv6 packet with the given next header and payload
// length, the payload starting with l4.
func pkt6(payload int, next byte, src, dst netip.Addr, l4 ...byte) []byte {
	p := make([]byte, 40+payload)
	p[0] = 0x60
	binary.BigEndian.PutUint16(p[4:], uint16(payload))
	p[6] = next
	p[7] = 64
	s, d := src.As16(), dst.As16()
	copy(p[8:], s[:])
	copy(p[24:], d[:])
	copy(p[40:], l4)
	for i := 40 + len(l4); i < len(p); i++ {
		p[i] = byte(i)
	}
	return p
}

const df = 0x4000

func TestTooBig(t *testing.T) {
	badCsum := pkt4(1000, df, 17, src4, peer4)
	badCsum[10] ^= 0xff
	shortTotal := pkt4(1000, df, 17, src4, peer4)[:999]
	hopICMPErr := pkt6(3000, 0, src6, peer6, 58, 0, 1, 4, 0, 0, 0, 0, 1) // hop-by-hop, then ICMPv6 type 1
	hopTrunc := pkt6(4, 0, src6, peer6)
	hopTrunc = append(hopTrunc[:44], make([]byte, 2000)...) // payload length says 4: header cut short
	fragNonFirst6 := pkt6(3000, 44, src6, peer6, 58, 0, 0x01, 0x00, 0, 0, 0, 1, 1)
	fragFirstICMPErr := pkt6(3000, 44, src6, peer6, 58, 0, 0, 1, 0, 0, 0, 1, 1)

	for _, c := range []struct {
		name  string
		pkt   []byte
		mtu   int
		src   netip.Addr
		dstN  int // len(dst); 0 = MaxLen
		want  int // output length, if no error
		err   error
		field string // MalformedError field
	}{
		{name: "v4 udp 60000", pkt: pkt4(60000, df, 17, src4, peer4), mtu: 2044, want: 576},
		{name: "v4 small, whole quote", pkt: pkt4(300, df, 17, src4, peer4), mtu: 200, want: 328},
		{name: "v4 quote cut by dst", pkt: pkt4(3000, df, 17, src4, peer4), mtu: 2044, dstN: 100, want: 100},
		{name: "v4 icmp echo", pkt: pkt4(3000, df, 1, src4, peer4, 8, 0), mtu: 2044, want: 576},
		{name: "v4 explicit src", pkt: pkt4(3000, df, 6, src4, peer4), mtu: 2044, src: netip.MustParseAddr("10.99.0.254"), want: 576},
		{name: "v4 4in6 src", pkt: pkt4(3000, df, 6, src4, peer4), mtu: 2044, src: netip.MustParseAddr("::ffff:10.99.0.254"), want: 576},
		{name: "v4 no DF", pkt: pkt4(3000, 0, 17, src4, peer4), mtu: 2044, err: ErrFragment},
		{name: "v4 non-first fragment", pkt: pkt4(3000, df|0x20, 17, src4, peer4), mtu: 2044, err: ErrNoError},
		{name: "v4 icmp error", pkt: pkt4(3000, df, 1, src4, peer4, 3, 1), mtu: 2044, err: ErrNoError},
		{name: "v4 icmp unknown type", pkt: pkt4(3000, df, 1, src4, peer4, 200), mtu: 2044, err: ErrNoError},
		{name: "v4 multicast dst", pkt: pkt4(3000, df, 17, src4, netip.MustParseAddr("239.1.2.3")), mtu: 2044, err: ErrNoError},
		{name: "v4 broadcast dst", pkt: pkt4(3000, df, 17, src4, netip.MustParseAddr("255.255.255.255")), mtu: 2044, err: ErrNoError},
		{name: "v4 zero src", pkt: pkt4(3000, df, 17, netip.IPv4Unspecified(), peer4), mtu: 2044, err: ErrNoError},
		{name: "v4 class E src", pkt: pkt4(3000, df, 17, netip.MustParseAddr("240.0.0.1"), peer4), mtu: 2044, err: ErrNoError},
		{name: "v4 fits", pkt: pkt4(2044, df, 17, src4, peer4), mtu: 2044, err: ErrNotTooBig},
		{name: "v4 mtu too small", pkt: pkt4(3000, df, 17, src4, peer4), mtu: 67, field: "mtu"},
		{name: "v4 mtu too big", pkt: pkt4(3000, df, 17, src4, peer4), mtu: 65536, field: "mtu"},
		{name: "v4 bad checksum", pkt: badCsum, mtu: 576, field: "ipv4 header checksum"},
		{name: "v4 truncated", pkt: shortTotal, mtu: 576, field: "ipv4 total length"},
		{name: "v4 ihl", pkt: []byte{0x44, 0, 0, 20, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}, mtu: 576, field: "ipv4 header length"},
		{name: "v4 short", pkt: []byte{0x45, 0, 0}, mtu: 576, field: "packet length"},
		{name: "v4 src v6", pkt: pkt4(3000, df, 17, src4, peer4), mtu: 2044, src: src6, field: "src"},
		{name: "v4 src multicast", pkt: pkt4(3000, df, 17, src4, peer4), mtu: 2044, src: netip.MustParseAddr("224.0.0.1"), field: "src"},
		{name: "v4 dst buffer", pkt: pkt4(3000, df, 17, src4, peer4), mtu: 2044, dstN: 55, field: "dst buffer length"},
		{name: "empty", pkt: nil, mtu: 2044, field: "packet length"},
		{name: "version 5", pkt: []byte{0x50, 1, 2, 3}, mtu: 2044, field: "ip version"},

		{name: "v6 udp 60000", pkt: pkt6(60000, 17, src6, peer6), mtu: 2044, want: 1280},
		{name: "v6 just over 1280", pkt: pkt6(1241, 17, src6, peer6), mtu: 1280, want: 1280},
		{name: "v6 icmp echo", pkt: pkt6(3000, 58, src6, peer6, 128), mtu: 2044, want: 1280},
		{name: "v6 icmp error", pkt: pkt6(3000, 58, src6, peer6, 1, 4), mtu: 2044, err: ErrNoError},
		{name: "v6 icmp error behind hop-by-hop", pkt: hopICMPErr, mtu: 2044, err: ErrNoError},
		{name: "v6 non-first fragment", pkt: fragNonFirst6, mtu: 2044, want: 1280},
		{name: "v6 first fragment of icmp error", pkt: fragFirstICMPErr, mtu: 2044, err: ErrNoError},
		{name: "v6 multicast dst, src given", pkt: pkt6(3000, 17, src6, netip.MustParseAddr("ff0e::1")), mtu: 2044, src: peer6, want: 1280},
		{name: "v6 multicast dst, default src", pkt: pkt6(3000, 17, src6, netip.MustParseAddr("ff0e::1")), mtu: 2044, field: "src"},
		{name: "v6 unspecified src", pkt: pkt6(3000, 17, netip.IPv6Unspecified(), peer6), mtu: 2044, err: ErrNoError},
		{name: "v6 multicast src", pkt: pkt6(3000, 17, netip.MustParseAddr("ff02::1"), peer6), mtu: 2044, err: ErrNoError},
		{name: "v6 fits", pkt: pkt6(2004, 17, src6, peer6), mtu: 2044, err: ErrNotTooBig},
		{name: "v6 mtu below 1280", pkt: pkt6(3000, 17, src6, peer6), mtu: 1279, field: "mtu"},
		{name: "v6 payload length", pkt: pkt6(3000, 17, src6, peer6)[:2000], mtu: 1280, field: "ipv6 payload length"},
		{name: "v6 extension header", pkt: hopTrunc, mtu: 1280, field: "ipv6 extension header"},
		{name: "v6 icmp header", pkt: pkt6(0, 58, src6, peer6), mtu: 1280, field: "icmp header"},
		{name: "v6 short", pkt: pkt6(0, 17, src6, peer6)[:39], mtu: 1280, field: "packet length"},
		{name: "v6 src v4", pkt: pkt6(3000, 17, src6, peer6), mtu: 2044, src: src4, field: "src"},
		{name: "v6 dst buffer", pkt: pkt6(3000, 17, src6, peer6), mtu: 2044, dstN: 95, field: "dst buffer length"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := c.dstN
			if n == 0 {
				n = MaxLen
			}
			dst := make([]byte, n)
			got, err := TooBig(dst, c.pkt, c.mtu, c.src)
			switch {
			case c.field != "":
				var me *MalformedError
				if !errors.As(err, &me) || me.Field != c.field {
					t.Fatalf("err = %v, want malformed %q", err, c.field)
				}
				return
			case c.err != nil:
				if !errors.Is(err, c.err) {
					t.Fatalf("err = %v, want %v", err, c.err)
				}
				return
			case err != nil:
				t.Fatalf("unexpected error %v", err)
			}
			if got != c.want {
				t.Fatalf("length %d, want %d", got, c.want)
			}
			out := dst[:got]
			if msg := verify(out); msg != "" {
				t.Fatalf("bad output: %s", msg)
			}
			hdr, mtuField := 28, int(binary.BigEndian.Uint16(out[26:]))
			errSrcAddr := netip.AddrFrom4([4]byte(out[12:16]))
			wantSrc := netip.AddrFrom4([4]byte(c.pkt[16:20]))
			if out[0]>>4 == 6 {
				hdr, mtuField = 48, int(binary.BigEndian.Uint32(out[44:]))
				errSrcAddr = netip.AddrFrom16([16]byte(out[8:24]))
				wantSrc = netip.AddrFrom16([16]byte(c.pkt[24:40]))
			} else if out[1] != 0xc0|c.pkt[1]&0x1c {
				t.Errorf("tos %#x", out[1])
			}
			if c.src.IsValid() {
				wantSrc = c.src.Unmap()
			}
			if mtuField != c.mtu {
				t.Errorf("mtu field %d, want %d", mtuField, c.mtu)
			}
			if errSrcAddr != wantSrc {
				t.Errorf("source %s, want %s", errSrcAddr, wantSrc)
			}
			if !bytes.Equal(out[hdr:], c.pkt[:got-hdr]) {
				t.Error("quote differs from the packet")
			}
		})
	}
}

// The output must be the same when TooBig answers in place.
func TestTooBigInPlace(t *testing.T) {
	for _, p := range [][]byte{pkt4(3000, df, 17, src4, peer4), pkt6(3000, 17, src6, peer6)} {
		want := make([]byte, MaxLen)
		n, err := TooBig(want, p, 2044, netip.Addr{})
		if err != nil {
			t.Fatal(err)
		}
		buf := append([]byte(nil), p...)
		m, err := TooBig(buf, buf, 2044, netip.Addr{})
		if err != nil || m != n || !bytes.Equal(buf[:m], want[:n]) {
			t.Fatalf("in place: %d %v, differs from %d", m, err, n)
		}
	}
}

func TestTooBigAllocs(t *testing.T) {
	dst := make([]byte, MaxLen)
	for _, c := range []struct {
		pkt []byte
		mtu int
	}{
		{pkt4(3000, df, 17, src4, peer4), 2044},
		{pkt6(3000, 17, src6, peer6), 2044},
		{pkt4(3000, 0, 17, src4, peer4), 2044}, // ErrFragment
		{pkt4(3000, df, 17, src4, peer4), 1},   // bad mtu
		{pkt6(3000, 17, src6, peer6)[:100], 2044},
	} {
		if a := testing.AllocsPerRun(100, func() { _, _ = TooBig(dst, c.pkt, c.mtu, netip.Addr{}) }); a != 0 {
			t.Errorf("%d allocs per call", int(a))
		}
	}
}

func BenchmarkTooBig(b *testing.B) {
	for _, c := range []struct {
		name string
		pkt  []byte
	}{
		{"ipv4", pkt4(60000, df, 17, src4, peer4)},
		{"ipv6", pkt6(60000, 17, src6, peer6)},
	} {
		b.Run(c.name, func(b *testing.B) {
			dst := make([]byte, MaxLen)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := TooBig(dst, c.pkt, 2044, netip.Addr{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
