package inetsum

import (
	"net/netip"
	"testing"
)

func TestChecksum(t *testing.T) {
	for _, tt := range []struct {
		name string
		data []byte
		want uint16
	}{
		// RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
		{"RFC 1071 example", []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, ^uint16(0xddf2)},
		{"odd length pads with zero", []byte{0x00, 0x01, 0xf2}, ^uint16(0xf201)},
		{"empty", nil, 0xffff},
		// An IPv4 header with its checksum filled in sums to zero.
		{"IPv4 header", []byte{0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8, 0, 0xc7}, 0},
	} {
		if got := Checksum(0, tt.data); got != tt.want {
			t.Errorf("%s: %#04x, want %#04x", tt.name, got, tt.want)
		}
	}
}

func TestPseudoIPv6(t *testing.T) {
	src, dst := netip.MustParseAddr("fe80::1"), netip.MustParseAddr("ff02::1")
	// The non-zero words fe80, 0001, ff02, 0001, then length 8 and next header 58.
	if got, want := Fold(PseudoIPv6(src, dst, 8, 58)), Fold(0xfe80+1+0xff02+1+8+58); got != want {
		t.Errorf("pseudo-header sum %#04x, want %#04x", got, want)
	}
}

// TestAddMatchesWordSum checks the fast path against the definition, at
// every length around its thresholds and with sums that carry.
func TestAddMatchesWordSum(t *testing.T) {
	buf := make([]byte, 1100)
	for i := range buf {
		buf[i] = byte(i*37 + i>>3)
	}
	ones := make([]byte, 1100)
	for i := range ones {
		ones[i] = 0xff
	}
	for _, b := range [][]byte{buf, ones} {
		for n := 0; n <= len(b); n++ {
			var want uint64 = 0xfffe
			for k := 0; k+1 < n; k += 2 {
				want += uint64(b[k])<<8 | uint64(b[k+1])
			}
			if n%2 == 1 {
				want += uint64(b[n-1]) << 8
			}
			if got := Fold(Add(0xfffe, b[:n])); got != Fold(want) {
				t.Fatalf("%d octets: sum %#04x, want %#04x", n, got, Fold(want))
			}
		}
	}
}

func BenchmarkAdd64K(b *testing.B) {
	buf := make([]byte, 65480)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	b.SetBytes(int64(len(buf)))
	for range b.N {
		_ = Fold(Add(0, buf))
	}
}
