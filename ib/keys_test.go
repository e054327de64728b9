package ib

import (
	"net/netip"
	"testing"
)

func TestGID(t *testing.T) {
	tests := []struct {
		in, out   string
		mapped    bool
		multicast bool
	}{
		{"fe80::2:c903:a:bcde", "fe80::2:c903:a:bcde", false, false},
		{"FE80:0:0:0:0002:C903:000A:BCDE", "fe80::2:c903:a:bcde", false, false},
		{"::ffff:192.0.2.1", "::ffff:192.0.2.1", true, false},
		{"ff12:401b:ffff::ffff:ffff", "ff12:401b:ffff::ffff:ffff", false, true},
	}
	for _, tt := range tests {
		g, err := ParseGID(tt.in)
		if err != nil {
			t.Fatalf("ParseGID(%q): %v", tt.in, err)
		}
		if g.String() != tt.out || g.IsIPv4Mapped() != tt.mapped || g.IsMulticast() != tt.multicast {
			t.Errorf("%q: %s mapped=%v multicast=%v", tt.in, g, g.IsIPv4Mapped(), g.IsMulticast())
		}
	}
	for _, bad := range []string{"", "192.0.2.1", "fe80::1%eth0", "fe80::g"} {
		if _, err := ParseGID(bad); err == nil {
			t.Errorf("ParseGID(%q) accepted", bad)
		}
	}
	v4 := GIDFromAddr(netip.MustParseAddr("192.0.2.7"))
	want := GID{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 7}
	if v4 != want || v4.Addr() != netip.MustParseAddr("192.0.2.7") {
		t.Errorf("GIDFromAddr(192.0.2.7) = % x / %v", v4[:], v4.Addr())
	}
}

func TestPKey(t *testing.T) {
	tests := []struct {
		a, b    PKey
		accepts bool
	}{
		{0xffff, 0xffff, true},
		{0xffff, 0x7fff, true}, // full member talks to limited
		{0x7fff, 0xffff, true},
		{0x7fff, 0x7fff, false}, // two limited members cannot talk
		{0x8001, 0x8002, false}, // other partition
		{0x8000, 0x8000, false}, // partition 0 is invalid
		{0x0000, 0x8000, false},
	}
	for _, tt := range tests {
		if got := tt.a.Accepts(tt.b); got != tt.accepts {
			t.Errorf("%v.Accepts(%v) = %v", tt.a, tt.b, got)
		}
	}
	if PKey(0x0123).AsFull() != 0x8123 || PKey(0x8123).Partition() != 0x123 || !PKey(0x8123).IsFull() {
		t.Error("membership bit handling")
	}
}

func TestQPNAndQKey(t *testing.T) {
	if !QPN(0xffffff).Valid() || QPN(0x1000000).Valid() {
		t.Error("QPN 24-bit range")
	}
	if !GSIQKey.IsControlled() || DefaultIPoIBQKey.IsControlled() {
		t.Error("controlled Q_Key bit")
	}
	var b [3]byte
	Put24(b[:], 0x12345678)
	if b != [3]byte{0x34, 0x56, 0x78} || Get24(b[:]) != 0x345678 {
		t.Errorf("Put24/Get24 = % x", b)
	}
	if QPN(0x48).String() != "0x000048" || PKey(0xffff).String() != "0xffff" || GSIQKey.String() != "0x80010000" {
		t.Error("String forms")
	}
}

func TestMTU(t *testing.T) {
	for code, n := range map[MTU]int{MTU256: 256, MTU512: 512, MTU1024: 1024, MTU2048: 2048, MTU4096: 4096} {
		if code.Bytes() != n {
			t.Errorf("%d.Bytes() = %d", code, code.Bytes())
		}
		if m, err := MTUFromBytes(n); err != nil || m != code {
			t.Errorf("MTUFromBytes(%d) = %v, %v", n, m, err)
		}
	}
	for _, bad := range []MTU{0, 6, 15} {
		if bad.Valid() || bad.Bytes() != 0 {
			t.Errorf("code %d accepted", bad)
		}
	}
	if _, err := MTUFromBytes(1500); err == nil {
		t.Error("MTUFromBytes(1500) accepted")
	}
}

func TestParsePKey(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PKey
		ok   bool
	}{
		{"0xffff", 0xffff, true},
		{"0x8001", 0x8001, true},
		{"0X8001", 0x8001, true},
		{"8033", 0x8033, true}, // hex without 0x, as every IB tool writes it
		{"ffff", 0xffff, true},
		{"7fff", 0x7fff, true},
		{"0x0001", 0x0001, true},
		{"1", 0x0001, true},
		{"32769", 0, false}, // decimal 0x8001 is five hex digits: too many
		{"0x8000", 0, false},
		{"0", 0, false},
		{"0x", 0, false},
		{"0x10000", 0, false},
		{"+8001", 0, false},
		{"-1", 0, false},
		{"0xg001", 0, false},
		{"", 0, false},
	} {
		got, err := ParsePKey(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePKey(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestIPv4Group: IPoIB's MGIDs map into 239/8 as IPv4-mapped GIDs, the
// same on every node, and different groups (almost always) differ.
func TestIPv4Group(t *testing.T) {
	bcast, _ := ParseGID("ff12:401b:ffff::ffff:ffff")
	allNodes, _ := ParseGID("ff12:601b:ffff::1")
	a, b := IPv4Group(bcast), IPv4Group(allNodes)
	for _, g := range []GID{a, b} {
		if !g.IsIPv4Mapped() || g.Addr().As4()[0] != 239 || !g.Addr().IsMulticast() {
			t.Errorf("%v: want an IPv4-mapped group in 239/8", g)
		}
	}
	if a == b {
		t.Errorf("broadcast and all-nodes map to the same group %v", a)
	}
	if IPv4Group(bcast) != a {
		t.Errorf("the mapping is not stable")
	}
}
