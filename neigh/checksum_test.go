package neigh

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

func TestICMPv6Checksum(t *testing.T) {
	ll1, ll2 := netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")
	tests := []struct {
		name     string
		src, dst netip.Addr
		msg      string
		want     uint16
	}{
		{
			// By hand, 16-bit words:
			//   pseudo-header fe80+0001 + fe80+0002 + 0018 (length 24) + 003a (58)
			//   message       8700 + 0000 (checksum) + 0000 0000 + fe80 + 0002
			//   = 3×fe80 + 0x0005 + 0x0018 + 0x003a + 0x8700
			//   = 0x2fb80 + 0x0005 + 0x0018 + 0x003a + 0x8700 = 0x382d7
			//   fold: 0x82d7 + 0x3 = 0x82da; complement: 0x7d25.
			name: "NS without options",
			src:  ll1, dst: ll2,
			msg:  "87 00 | 00 00 | 00000000 | fe80 0000 0000 0000 0000 0000 0000 0002",
			want: 0x7d25,
		},
		{
			// The checksum field's content does not matter.
			name: "NS, field already set",
			src:  ll1, dst: ll2,
			msg:  "87 00 | ab cd | 00000000 | fe80 0000 0000 0000 0000 0000 0000 0002",
			want: 0x7d25,
		},
		{
			// Odd length: the last octet is padded with zero.
			//   fe80+0001 + fe80+0002 + 0007 + 003a + 8000 + 1234 + 5600
			//   = 0x2e578; fold 0xe57a; complement 0x1a85.
			name: "odd length",
			src:  ll1, dst: ll2,
			msg:  "80 00 | 00 00 | 12 34 56",
			want: 0x1a85,
		},
	}
	for _, tt := range tests {
		msg := testutil.Unhex(t, tt.msg)
		if got := ICMPv6Checksum(tt.src, tt.dst, msg); got != tt.want {
			t.Errorf("%s: ICMPv6Checksum = %#04x, want %#04x", tt.name, got, tt.want)
		}
		// Cross-check with the test's own word-by-word sum.
		m := bytes.Clone(msg)
		m[2], m[3] = byte(tt.want>>8), byte(tt.want)
		if s := wordSum(tt.src, tt.dst, m); s != 0xffff {
			t.Errorf("%s: independent sum with the checksum in place = %#04x, want 0xffff", tt.name, s)
		}
		if !checksumOK(tt.src, tt.dst, m) {
			t.Errorf("%s: checksumOK rejects the right checksum", tt.name)
		}
	}
}

// A sum that folds to 0xffff before the complement gives checksum 0x0000,
// and a sender may write it as 0xffff (the other one's complement zero).
// Both must be accepted.
func TestChecksumZeroForms(t *testing.T) {
	msg := testutil.Unhex(t, "87 00 | 00 00 | 00000000 | fe80 0000 0000 0000 0000 0000 0000 0002")
	src, dst := netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")
	// The NS reserved field is ignored on receive: use it to make the
	// checksum come out zero.
	var found bool
	for v := range 0x10000 {
		msg[4], msg[5] = byte(v>>8), byte(v)
		if ICMPv6Checksum(src, dst, msg) == 0 {
			found = true
			break
		}
	}
	if !found {
		t.Fatal("no reserved value gives checksum 0")
	}
	for _, c := range []uint16{0x0000, 0xffff} {
		msg[2], msg[3] = byte(c>>8), byte(c)
		if _, err := DecodeNeighborMessage(msg, src, dst); err != nil {
			t.Errorf("checksum %#04x: %v", c, err)
		}
	}
}
