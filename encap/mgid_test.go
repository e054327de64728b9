package encap

import (
	"net/netip"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// gid parses an MGID written as the spec tables do, eight groups of four
// hex digits.
func gid(tb testing.TB, s string) ib.GID {
	tb.Helper()
	return ib.GID(testutil.Unhex(tb, s))
}

func TestMGIDGolden(t *testing.T) {
	tests := []struct {
		group string
		pkey  ib.PKey
		scope Scope
		mgid  string // FF | 1S | signature | P_Key | group bits
	}{
		// spec §5 examples: P_Key 0xFFFF, link-local.
		{"255.255.255.255", 0xffff, LinkLocal, "ff12:401b:ffff:0000:0000:0000:ffff:ffff"},
		{"224.0.0.1", 0xffff, LinkLocal, "ff12:401b:ffff:0000:0000:0000:0000:0001"},
		{"239.1.2.3", 0xffff, LinkLocal, "ff12:401b:ffff:0000:0000:0000:0f01:0203"},
		{"ff02::1", 0xffff, LinkLocal, "ff12:601b:ffff:0000:0000:0000:0000:0001"},
		{"ff02::1:ff12:3456", 0xffff, LinkLocal, "ff12:601b:ffff:0000:0000:0001:ff12:3456"},
		// A limited-member P_Key is put in the MGID as the full member.
		{"255.255.255.255", 0x0123, LinkLocal, "ff12:401b:8123:0000:0000:0000:ffff:ffff"},
		{"224.0.0.251", 0x0123, LinkLocal, "ff12:401b:8123:0000:0000:0000:0000:00fb"},
		{"ff02::fb", 0x8123, LinkLocal, "ff12:601b:8123:0000:0000:0000:0000:00fb"},
		// Site scope comes from the interface, not from the group.
		{"239.255.255.250", 0xffff, SiteLocal, "ff15:401b:ffff:0000:0000:0000:0fff:fffa"},
		{"ff05::1:3", 0xffff, SiteLocal, "ff15:601b:ffff:0000:0000:0000:0001:0003"},
		{"ff02::2", 0x7fff, OrgLocal, "ff18:601b:ffff:0000:0000:0000:0000:0002"},
		{"ff0e::1234:5678:9abc:def0:1122", 0xffff, Global, "ff1e:601b:ffff:1234:5678:9abc:def0:1122"},
		{"ff02:1111:2222:3333:4444:5555:6666:7777", 0xffff, LinkLocal, "ff12:601b:ffff:3333:4444:5555:6666:7777"},
	}
	for _, tt := range tests {
		want := gid(t, tt.mgid)
		got, err := MulticastMGID(netip.MustParseAddr(tt.group), tt.pkey, tt.scope)
		if err != nil || got != want {
			t.Errorf("MulticastMGID(%s, %v, %v) = %v, %v, want %v", tt.group, tt.pkey, tt.scope, got, err, want)
		}
		if !got.IsMulticast() {
			t.Errorf("%v is not a multicast GID", got)
		}
	}
}

func TestBroadcastMGID(t *testing.T) {
	tests := []struct {
		pkey  ib.PKey
		scope Scope
		mgid  string
	}{
		{ib.DefaultPKey, LinkLocal, "ff12:401b:ffff:0000:0000:0000:ffff:ffff"},
		{0x7fff, LinkLocal, "ff12:401b:ffff:0000:0000:0000:ffff:ffff"},
		{0x8001, SiteLocal, "ff15:401b:8001:0000:0000:0000:ffff:ffff"},
		{0x0123, Global, "ff1e:401b:8123:0000:0000:0000:ffff:ffff"},
		{0xffff, 0x12, "ff12:401b:ffff:0000:0000:0000:ffff:ffff"}, // only the nibble is used
	}
	for _, tt := range tests {
		if got, want := BroadcastMGID(tt.pkey, tt.scope), gid(t, tt.mgid); got != want {
			t.Errorf("BroadcastMGID(%v, %v) = %v, want %v", tt.pkey, tt.scope, got, want)
		}
	}
	// Linux's ipv4_bcast_addr with the P_Key patched in (spec §2).
	want := testutil.Unhex(t, "00 | ff ff ff | ff 12 40 1b ff ff 00 00 00 00 00 00 ff ff ff ff") // flags | QPN | MGID
	if got := BroadcastLinkAddr(ib.DefaultPKey, LinkLocal).Bytes(); string(got[:]) != string(want) {
		t.Errorf("BroadcastLinkAddr = % x, want % x", got, want)
	}
}

func TestMGIDErrors(t *testing.T) {
	tests := []struct {
		name  string
		fn    func(netip.Addr, ib.PKey, Scope) (ib.GID, error)
		group netip.Addr
	}{
		{"v4 unicast", IPv4MulticastMGID, netip.MustParseAddr("192.0.2.1")},
		{"v4 limited broadcast", IPv4MulticastMGID, netip.MustParseAddr("255.255.255.255")},
		{"v4 given v6", IPv4MulticastMGID, netip.MustParseAddr("ff02::1")},
		{"v4 mapped", IPv4MulticastMGID, netip.MustParseAddr("::ffff:224.0.0.1")},
		{"v6 unicast", IPv6MulticastMGID, netip.MustParseAddr("fe80::1")},
		{"v6 given v4", IPv6MulticastMGID, netip.MustParseAddr("224.0.0.1")},
		{"v6 mapped", IPv6MulticastMGID, netip.MustParseAddr("::ffff:224.0.0.1")},
		{"any unicast v4", MulticastMGID, netip.MustParseAddr("10.0.0.255")},
		{"any unicast v6", MulticastMGID, netip.MustParseAddr("2001:db8::1")},
		{"any invalid", MulticastMGID, netip.Addr{}},
	}
	for _, tt := range tests {
		g, err := tt.fn(tt.group, ib.DefaultPKey, LinkLocal)
		if g != (ib.GID{}) {
			t.Errorf("%s: returned %v with the error", tt.name, g)
		}
		testutil.WantField(t, err, "MGID", "group")
	}
}

func TestMTU(t *testing.T) {
	tests := []struct {
		mtu      ib.MTU
		ud, rbuf int
	}{
		{ib.MTU256, 252, 296},
		{ib.MTU1024, 1020, 1064},
		{ib.MTU2048, 2044, 2088},
		{ib.MTU4096, 4092, 4136},
		{0, 0, 0},
		{6, 0, 0},
	}
	for _, tt := range tests {
		if got := MTUForIB(tt.mtu); got != tt.ud {
			t.Errorf("MTUForIB(%v) = %d, want %d", tt.mtu, got, tt.ud)
		}
		if got := RecvBufLen(tt.mtu); got != tt.rbuf {
			t.Errorf("RecvBufLen(%v) = %d, want %d", tt.mtu, got, tt.rbuf)
		}
	}
}

func TestMGIDAllocs(t *testing.T) {
	g4, g6 := netip.MustParseAddr("239.1.2.3"), netip.MustParseAddr("ff02::1:ff12:3456")
	if n := testing.AllocsPerRun(100, func() {
		_, _ = MulticastMGID(g4, 0xffff, LinkLocal)
		_, _ = MulticastMGID(g6, 0xffff, LinkLocal)
	}); n != 0 {
		t.Errorf("%v allocations per MGID, want 0", n)
	}
}
