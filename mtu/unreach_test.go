package mtu

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

func TestUnreachable(t *testing.T) {
	multicast6 := netip.MustParseAddr("ff02::1")
	for _, c := range []struct {
		name string
		pkt  []byte
		src  netip.Addr
		want error // nil: an error message is written
	}{
		{"ipv4 tcp syn, no DF", pkt4(60, 0, 6, src4, peer4), netip.Addr{}, nil},
		{"ipv4 udp with DF", pkt4(700, df, 17, src4, peer4), netip.Addr{}, nil},
		{"ipv4 echo request", pkt4(84, df, 1, src4, peer4, 8), netip.Addr{}, nil},
		{"ipv4 from a given source", pkt4(84, df, 1, src4, peer4, 8), netip.MustParseAddr("10.99.0.254"), nil},
		{"ipv4 icmp error", pkt4(84, df, 1, src4, peer4, 3, 1), netip.Addr{}, ErrNoError},
		{"ipv4 later fragment", pkt4(84, 0x10, 17, src4, peer4), netip.Addr{}, ErrNoError},
		{"ipv4 from unspecified", pkt4(84, df, 17, netip.IPv4Unspecified(), peer4), netip.Addr{}, ErrNoError},
		{"ipv4 bad checksum", func() []byte { p := pkt4(84, df, 17, src4, peer4); p[10]++; return p }(), netip.Addr{}, errHdrCsum},
		{"ipv4 truncated", pkt4(84, df, 17, src4, peer4)[:19], netip.Addr{}, errShort},
		{"ipv6 tcp", pkt6(20, 6, src6, peer6), netip.Addr{}, nil},
		{"ipv6 echo request", pkt6(64, 58, src6, peer6, 128), netip.Addr{}, nil},
		{"ipv6 icmp error", pkt6(64, 58, src6, peer6, 1, 3), netip.Addr{}, ErrNoError},
		{"ipv6 to multicast", pkt6(64, 17, src6, multicast6), src6, ErrNoError},
		{"ipv6 bad src", pkt6(64, 17, src6, peer6), multicast6, errSrc},
		{"not ip", []byte{0x20, 0, 0}, netip.Addr{}, errVersion},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := make([]byte, MaxLen)
			n, err := Unreachable(dst, c.pkt, c.src)
			if c.want != nil {
				if !errors.Is(err, c.want) || n != 0 {
					t.Fatalf("got %d, %v; want %v", n, err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			out := dst[:n]
			if msg := verifyAs(out, true); msg != "" {
				t.Fatalf("invalid output (%s): % x", msg, out)
			}
			src := c.src
			if !src.IsValid() {
				src = peer4
				if out[0]>>4 == 6 {
					src = peer6
				}
			}
			if got, _ := netip.AddrFromSlice(srcOf(out)); got != src {
				t.Fatalf("source %s, want %s", got, src)
			}
			limit := MaxLen4
			if out[0]>>4 == 6 {
				limit = MaxLen6
			}
			if want := min(hdrOf(out)+len(c.pkt), limit); n != want || !bytes.Equal(out[hdrOf(out):], c.pkt[:n-hdrOf(out)]) {
				t.Fatalf("%d octets, want %d quoting the packet's start", n, want)
			}
		})
	}
	// The too-big path still writes its own type.
	n, err := TooBig(make([]byte, MaxLen), pkt4(3000, df, 17, src4, peer4), 2044, netip.Addr{})
	if err != nil || n != MaxLen4 {
		t.Fatalf("TooBig after the refactoring: %d, %v", n, err)
	}
}

func srcOf(p []byte) []byte {
	if p[0]>>4 == 6 {
		return p[8:24]
	}
	return p[12:16]
}

func hdrOf(p []byte) int {
	if p[0]>>4 == 6 {
		return 48
	}
	return 28
}

func TestUnreachableAllocs(t *testing.T) {
	dst := make([]byte, MaxLen)
	for _, p := range [][]byte{pkt4(3000, df, 17, src4, peer4), pkt6(3000, 17, src6, peer6), pkt4(30, 0, 17, src4, peer4)[:10]} {
		if a := testing.AllocsPerRun(100, func() { _, _ = Unreachable(dst, p, netip.Addr{}) }); a != 0 {
			t.Errorf("%d allocs per call", int(a))
		}
	}
}
