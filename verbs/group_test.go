package verbs

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

func TestWireGID(t *testing.T) {
	v4Port, v6Port, ibPort := testutil.MustGID("::ffff:192.0.2.1"), testutil.MustGID("2001:db8::1"), testutil.MustGID("fe80::2:c903:a:bcde")
	bcast := testutil.MustGID("ff12:401b:ffff::ffff:ffff")
	mapped := testutil.MustGID("::ffff:239.1.2.3")
	peer := testutil.MustGID("::ffff:192.0.2.2")
	for _, tt := range []struct {
		name      string
		port, in  ib.GID
		want      ib.GID
		wantInto4 bool
	}{
		{"IPoIB MGID on an IPv4 RoCE port", v4Port, bcast, ib.IPv4Group(bcast), true},
		{"IPv4-mapped group on an IPv4 port", v4Port, mapped, mapped, true},
		{"unicast on an IPv4 port", v4Port, peer, peer, false},
		{"IPoIB MGID on an IPv6 RoCE port", v6Port, bcast, bcast, false},
		{"IPoIB MGID on InfiniBand", ibPort, bcast, bcast, false},
	} {
		got := wireGID(tt.port, tt.in)
		if got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
		if tt.wantInto4 && !(got.IsIPv4Mapped() && got.Addr().IsMulticast()) {
			t.Errorf("%s: %v is not an IPv4 group", tt.name, got)
		}
	}
}
