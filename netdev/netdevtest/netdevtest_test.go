package netdevtest

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/ipoibd/ipoibd/mtu"
	"github.com/ipoibd/ipoibd/netdev"
	"github.com/ipoibd/ipoibd/offload"
)

func open(t *testing.T) *Netdev {
	t.Helper()
	f := New()
	cfg := netdev.Config{Name: "ib0", MTU: 2044, Addrs: []netip.Prefix{netip.MustParsePrefix("10.9.0.1/24")},
		LinkLocal: netip.MustParsePrefix("fe80::1/64")}
	return f.Open(cfg)
}

func TestPackets(t *testing.T) {
	f := open(t)
	f.In <- Packet{B: []byte{1, 2, 3}, Hdr: offload.Hdr{GSOSize: 7}}
	var h offload.Hdr
	b := make([]byte, 10)
	if n, err := f.Read(0, b, &h); n != 3 || err != nil || h.GSOSize != 7 {
		t.Errorf("Read: %d %v %+v, want the 3 octets and their header", n, err, h)
	}
	if _, err := f.WriteGSO(offload.Hdr{}, [][]byte{{4}, {5, 6}}); err != nil {
		t.Fatal(err)
	}
	if got := <-f.Out; !slices.Equal(got, []byte{4, 5, 6}) {
		t.Errorf("Out got %v, want the parts joined", got)
	}
	for len(f.Out) < cap(f.Out) {
		f.Out <- nil
	}
	if _, err := f.Write([]byte{1}); err == nil {
		t.Error("a write to a full Out succeeded")
	}
	f.Close()
	if _, err := f.Read(0, b, &h); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after Close: %v, want ErrClosed", err)
	}
}

func TestLink(t *testing.T) {
	f := open(t)
	gw := netip.MustParseAddr("10.9.0.2")
	f.SetGateway(netip.MustParsePrefix("198.51.100.0/24"), gw)
	for _, tc := range []struct {
		dst    string
		gw     netip.Addr
		viaGW  bool
		routed int // MTU set for it; its host route stays only below the link's 2044
	}{
		{"198.51.100.7", gw, true, 1500},
		{"10.9.0.3", netip.Addr{}, false, 2044},
	} {
		dst := netip.MustParseAddr(tc.dst)
		if g, ok := f.Gateway(dst); g != tc.gw || ok != tc.viaGW {
			t.Errorf("Gateway(%v) = %v %v, want %v %v", dst, g, ok, tc.gw, tc.viaGW)
		}
		f.Routes().SetMany([]mtu.Dest{{Addr: dst, MTU: tc.routed}})
		if m, ok := f.Route(dst); ok != (tc.routed < 2044) || ok && m != tc.routed {
			t.Errorf("route to %v after setting MTU %d: %d %v", dst, tc.routed, m, ok)
		}
	}
	f.AddAddr(netip.MustParsePrefix("10.10.0.1/24"))
	if e := <-f.Events; e.Change != netdev.AddrsChanged {
		t.Errorf("event %+v, want AddrsChanged", e)
	}
	f.LinkDown()
	if e := <-f.Events; e.Change != netdev.LinkState || e.Up || e.MTU != 2044 {
		t.Errorf("event %+v, want the link down at MTU 2044", e)
	}
	addrs, _ := f.Addrs()
	if len(addrs) != 2 || slices.ContainsFunc(addrs, func(p netip.Prefix) bool { return p.Addr().Is6() }) {
		t.Errorf("addresses after link down %v, want the two IPv4 ones", addrs)
	}
	if n, _ := f.EnsureAddrs([]netip.Prefix{netip.MustParsePrefix("fe80::1/64"), netip.MustParsePrefix("10.9.0.1/24")}); n != 1 {
		t.Errorf("EnsureAddrs added %d, want the link-local one", n)
	}
}
