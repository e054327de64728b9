package tun

import (
	"github.com/ipoibd/ipoibd/internal/testns"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/mtu"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

var routeFamilies = []struct {
	name                         string
	family                       int
	local                        string // the TUN's address
	otherLocal                   string // the other TUN's, in the same subnet
	second, secondDst            string // a second subnet's address of ours, and a host in it
	dst, operator, other, remote string // host addresses used by the test
	gwNet, gw                    string // a routed subnet and its gateway on the link
	bad                          int    // an MTU out of range
}{
	{
		name: "ipv4", family: netlink.FAMILY_V4, local: "10.99.0.1/24", otherLocal: "10.99.0.201/24",
		second: "10.97.0.1/24", secondDst: "10.97.0.4",
		dst: "10.99.0.2", operator: "10.99.0.3", other: "10.99.0.4", remote: "10.98.0.7",
		gwNet: "10.98.0.0/24", gw: "10.99.0.5", bad: 67,
	},
	{
		name: "ipv6", family: netlink.FAMILY_V6, local: "fd99::1/64", otherLocal: "fd99::c9/64",
		second: "fd97::1/64", secondDst: "fd97::4",
		dst: "fd99::2", operator: "fd99::3", other: "fd99::4", remote: "fd98::7",
		gwNet: "fd98::/64", gw: "fd99::5", bad: 67,
	},
}

func ipNet(s string) *net.IPNet {
	p := netip.MustParsePrefix(s)
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func hostNet(s string) *net.IPNet {
	a := netip.MustParseAddr(s)
	return ipNet(netip.PrefixFrom(a, a.BitLen()).String())
}

// hostRoutesIn lists the main-table routes for exactly the host prefix.
func hostRoutesIn(t *testing.T, n *testns.NS, family int, dst string) []netlink.Route {
	t.Helper()
	routes, err := n.NL.RouteListFiltered(family, &netlink.Route{Dst: hostNet(dst), Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	return routes
}

// routeSetters are the two ways to set a route; TestRoutes holds both to
// the same rules.
var routeSetters = []struct {
	name string
	set  func(r *Routes, dst netip.Addr, mtu int) (bool, error)
}{
	{"Set", (*Routes).Set},
	{"SetMany", func(r *Routes, dst netip.Addr, m int) (bool, error) {
		ok, errs := r.SetMany([]mtu.Dest{{Addr: dst, MTU: m}})
		return ok[0], errs[0]
	}},
}

func TestRoutes(t *testing.T) {
	for _, via := range routeSetters {
		t.Run(via.name, func(t *testing.T) { testRoutes(t, via.set) })
	}
}

func testRoutes(t *testing.T, setRoute func(r *Routes, dst netip.Addr, mtu int) (bool, error)) {
	for _, f := range routeFamilies {
		t.Run(f.name, func(t *testing.T) {
			n := testns.New(t)
			_, link := n.TUN("tun0", 65520, f.local)
			_, other := n.TUN("tun1", 65520, f.otherLocal) // another ipoibd interface
			r := NewRoutesAt(n.NL, link.Attrs().Index)
			idx := link.Attrs().Index
			v := "-4"
			if f.family == netlink.FAMILY_V6 {
				v = "-6"
			}

			// checkOurs asserts exactly one route to dst, ours, with mtu.
			checkOurs := func(t *testing.T, dst string, mtu int) netlink.Route {
				t.Helper()
				rs := hostRoutesIn(t, n, f.family, dst)
				if len(rs) != 1 {
					t.Fatalf("%d routes to %s, want 1: %v", len(rs), dst, rs)
				}
				rt := rs[0]
				if rt.Protocol != RouteProtocol || rt.LinkIndex != idx || rt.MTU != mtu || rt.MTULock {
					t.Fatalf("route to %s: proto %d link %d mtu %d lock %v; want proto %d link %d mtu %d unlocked",
						dst, rt.Protocol, rt.LinkIndex, rt.MTU, rt.MTULock, RouteProtocol, idx, mtu)
				}
				return rt
			}
			set := func(t *testing.T, r *Routes, dst string, mtu int, want bool) {
				t.Helper()
				got, err := setRoute(r, netip.MustParseAddr(dst), mtu)
				if err != nil || got != want {
					t.Fatalf("Set(%s, %d) = %v, %v; want %v, nil", dst, mtu, got, err, want)
				}
			}
			operatorRoute := func(t *testing.T, dst string, linkIndex int, mtu int) {
				t.Helper()
				if err := n.NL.RouteAdd(&netlink.Route{LinkIndex: linkIndex, Dst: hostNet(dst), Scope: netlink.SCOPE_LINK, MTU: mtu}); err != nil {
					t.Fatal(err)
				}
			}

			t.Run("install, idempotent, update", func(t *testing.T) {
				set(t, r, f.dst, 9000, true)
				checkOurs(t, f.dst, 9000)
				out := n.IP(v, "route", "show", f.dst)
				if !strings.Contains(out, "mtu 9000") || !strings.Contains(out, "proto 105") || strings.Contains(out, "lock") {
					t.Fatalf("ip route show %s: %q, want proto 105 and mtu 9000 unlocked", f.dst, out)
				}
				set(t, r, f.dst, 9000, true)
				checkOurs(t, f.dst, 9000)
				set(t, r, f.dst, 4000, true)
				checkOurs(t, f.dst, 4000)
				if got := n.PMTU(netip.MustParseAddr(f.dst)); got != 4000 {
					t.Fatalf("route get %s: mtu %d, want 4000", f.dst, got)
				}
				t.Logf("ip route show %s: %s", f.dst, strings.TrimSpace(n.IP(v, "route", "show", f.dst)))
			})

			t.Run("operator route left alone", func(t *testing.T) {
				operatorRoute(t, f.operator, idx, 0)
				set(t, r, f.operator, 3000, false)
				rs := hostRoutesIn(t, n, f.family, f.operator)
				if len(rs) != 1 || rs[0].Protocol == RouteProtocol || rs[0].MTU != 0 {
					t.Fatalf("operator route changed: %v", rs)
				}
				if err := r.Remove(netip.MustParseAddr(f.operator)); err != nil {
					t.Fatal(err)
				}
				if rs := hostRoutesIn(t, n, f.family, f.operator); len(rs) != 1 {
					t.Fatalf("Remove deleted the operator's route: %v", rs)
				}
			})

			t.Run("route of another link left alone", func(t *testing.T) {
				// Even with our protocol: another ipoibd interface's.
				otherRoutes := NewRoutesAt(n.NL, other.Attrs().Index)
				set(t, otherRoutes, f.other, 2700, true)
				set(t, r, f.other, 5000, false)
				rs := hostRoutesIn(t, n, f.family, f.other)
				if len(rs) != 1 || rs[0].LinkIndex != other.Attrs().Index || rs[0].MTU != 2700 {
					t.Fatalf("other link's route changed: %v", rs)
				}
				if err := r.Remove(netip.MustParseAddr(f.other)); err != nil {
					t.Fatal(err)
				}
				if rs := hostRoutesIn(t, n, f.family, f.other); len(rs) != 1 {
					t.Fatalf("Remove deleted another link's route: %v", rs)
				}
			})

			t.Run("gateway kept", func(t *testing.T) {
				gw := net.IP(netip.MustParseAddr(f.gw).AsSlice())
				if err := n.NL.RouteAdd(&netlink.Route{LinkIndex: idx, Dst: ipNet(f.gwNet), Gw: gw}); err != nil {
					t.Fatal(err)
				}
				set(t, r, f.remote, 2000, true)
				rt := checkOurs(t, f.remote, 2000)
				if !rt.Gw.Equal(gw) {
					t.Fatalf("route to %s: gateway %v, want %v", f.remote, rt.Gw, gw)
				}
				// The source is ours in the gateway's subnet.
				if want := netip.MustParsePrefix(f.local).Addr(); !rt.Src.Equal(want.AsSlice()) {
					t.Fatalf("route to %s: src %v, want %v", f.remote, rt.Src, want)
				}
				set(t, r, f.remote, 2000, true) // idempotent with the gateway too
				set(t, r, f.remote, 2100, true)
				if rt := checkOurs(t, f.remote, 2100); !rt.Gw.Equal(gw) {
					t.Fatalf("update lost the gateway: %v", rt.Gw)
				}
			})

			t.Run("no route at the link MTU", func(t *testing.T) {
				set(t, r, f.dst, 9000, true)
				checkOurs(t, f.dst, 9000)
				for _, mtu := range []int{65520, 65535} {
					set(t, r, f.dst, mtu, true)
					if rs := hostRoutesIn(t, n, f.family, f.dst); len(rs) != 0 {
						t.Fatalf("Set(%s, %d) on a %d link left %v", f.dst, mtu, 65520, rs)
					}
				}
				set(t, r, f.operator, 65520, false) // still hands off
				if rs := hostRoutesIn(t, n, f.family, f.operator); len(rs) != 1 {
					t.Fatalf("the operator's route went: %v", rs)
				}
			})

			// Two subnets on the link: the host route to a peer in the
			// second keeps the source the kernel chose before it, and
			// follows the addresses when they change.
			t.Run("source of the destination's subnet", func(t *testing.T) {
				dst := netip.MustParseAddr(f.secondDst)
				second := netip.MustParsePrefix(f.second)
				// Not through our link yet: no route.
				set(t, r, f.secondDst, 3000, true)
				if rs := hostRoutesIn(t, n, f.family, f.secondDst); len(rs) != 0 {
					t.Fatalf("route to %s outside our subnets: %v", f.secondDst, rs)
				}
				n.IP(v, "addr", "add", f.second, "dev", "tun0", "nodad")
				want := "src " + second.Addr().String()
				if out := n.IP(v, "route", "get", f.secondDst); !strings.Contains(out, want) {
					t.Fatalf("route get %s without our route: %q, want %q", f.secondDst, out, want)
				}
				set(t, r, f.secondDst, 3000, true)
				rt := checkOurs(t, f.secondDst, 3000)
				if !rt.Src.Equal(second.Addr().AsSlice()) {
					t.Fatalf("route to %s: src %v, want %v", dst, rt.Src, second.Addr())
				}
				if out := n.IP(v, "route", "get", f.secondDst); !strings.Contains(out, want) || !strings.Contains(out, "mtu 3000") {
					t.Fatalf("route get %s with our route: %q, want %q and mtu 3000", f.secondDst, out, want)
				}
				// A second address in the subnet, then the first one goes:
				// the kernel drops routes whose source went, Set puts ours
				// back with the remaining address.
				third := nth(second.Addr(), 9)
				if f.family == netlink.FAMILY_V4 {
					// Else the secondary goes with the primary.
					n.Sysctl("net/ipv4/conf/tun0/promote_secondaries", "1")
				}
				n.IP(v, "addr", "add", netip.PrefixFrom(third, second.Bits()).String(), "dev", "tun0", "nodad")
				n.IP(v, "addr", "del", f.second, "dev", "tun0")
				set(t, r, f.secondDst, 3000, true)
				if rt := checkOurs(t, f.secondDst, 3000); !rt.Src.Equal(third.AsSlice()) {
					t.Fatalf("after the address change: src %v, want %v", rt.Src, third)
				}
				// The subnet goes: so does our route.
				n.IP(v, "addr", "del", netip.PrefixFrom(third, second.Bits()).String(), "dev", "tun0")
				set(t, r, f.secondDst, 3000, true)
				if rs := hostRoutesIn(t, n, f.family, f.secondDst); len(rs) != 0 {
					t.Fatalf("route to %s outside our subnets kept: %v", f.secondDst, rs)
				}
			})

			t.Run("remove", func(t *testing.T) {
				dst := netip.MustParseAddr(f.dst)
				if err := r.Remove(dst); err != nil {
					t.Fatal(err)
				}
				if rs := hostRoutesIn(t, n, f.family, f.dst); len(rs) != 0 {
					t.Fatalf("route still there: %v", rs)
				}
				if err := r.Remove(dst); err != nil {
					t.Fatalf("second Remove: %v", err)
				}
			})

			t.Run("flush", func(t *testing.T) {
				set(t, r, f.dst, 9000, true)
				a := nth(netip.MustParseAddr(f.dst), 100)
				set(t, r, a.String(), 9000, true)
				if err := r.Flush(); err != nil {
					t.Fatal(err)
				}
				for _, d := range []string{f.dst, a.String(), f.remote} {
					if rs := hostRoutesIn(t, n, f.family, d); len(rs) != 0 {
						t.Fatalf("Flush left %v", rs)
					}
				}
				if rs := hostRoutesIn(t, n, f.family, f.operator); len(rs) != 1 {
					t.Fatalf("Flush removed the operator's route: %v", rs)
				}
				if rs := hostRoutesIn(t, n, f.family, f.other); len(rs) != 1 {
					t.Fatalf("Flush removed another link's route: %v", rs)
				}
				// The link's own prefix route and the gateway route stay.
				if rs, err := n.NL.RouteListFiltered(f.family, &netlink.Route{Dst: ipNet(f.gwNet)}, netlink.RT_FILTER_DST); err != nil || len(rs) != 1 {
					t.Fatalf("Flush removed the subnet route: %v %v", rs, err)
				}
				if err := r.Flush(); err != nil {
					t.Fatalf("second Flush: %v", err)
				}
			})

			t.Run("IPv6 below 1280: no route", func(t *testing.T) {
				// The kernel takes no IPv6 route MTU below 1280: a path
				// under it (UD on a small underlay) removes ours, no error.
				set(t, r, f.dst, 9000, true)
				set(t, r, f.dst, 1020, true)
				rs := hostRoutesIn(t, n, f.family, f.dst)
				if f.family == netlink.FAMILY_V4 {
					checkOurs(t, f.dst, 1020)
				} else if len(rs) != 0 {
					t.Fatalf("Set(%s, 1020) left %v", f.dst, rs)
				}
				set(t, r, f.dst, 65520, true)
			})

			t.Run("bad input", func(t *testing.T) {
				for _, c := range []struct {
					dst netip.Addr
					mtu int
				}{
					{netip.Addr{}, 2000},
					{netip.MustParseAddr(f.dst), f.bad},
					{netip.MustParseAddr(f.dst), 65536},
					{netip.MustParseAddr("224.0.0.1"), 2000},
					{netip.MustParseAddr("ff02::1"), 2000},
					{netip.IPv6Unspecified(), 2000},
				} {
					if ok, err := setRoute(r, c.dst, c.mtu); err == nil || ok {
						t.Errorf("Set(%v, %d) = %v, %v; want an error", c.dst, c.mtu, ok, err)
					}
				}
				if err := r.Remove(netip.Addr{}); err == nil {
					t.Error("Remove(invalid) succeeded")
				}
			})
		})
	}
}

// TestRoutesPMTU shows why the route MTU is not locked: the kernel uses
// the route's MTU, an ICMP error (ours, from TooBig) still lowers the path
// MTU below it, and Set with a new MTU replaces the route and with it the
// stale PMTU exception. A locked IPv4 route would ignore the ICMP error.
func TestRoutesPMTU(t *testing.T) {
	for _, f := range routeFamilies {
		t.Run(f.name, func(t *testing.T) {
			n := testns.New(t)
			tun, link := n.TUN("tun0", 65520, f.local)
			r := NewRoutesAt(n.NL, link.Attrs().Index)
			buf := make([]byte, 65536)
			out := make([]byte, mtu.MaxLen)
			tooBig := func(t *testing.T, dst netip.Addr, size, pathMTU int) {
				t.Helper()
				fd := n.UDPDF(dst)
				if err := testns.SendTo(fd, dst, size); err != nil {
					t.Fatalf("send %d: %v", size, err)
				}
				k, err := mtu.TooBig(out, testns.ReadUDPTo(t, tun, buf, dst), pathMTU, netip.Addr{})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tun.Write(out[:k]); err != nil {
					t.Fatal(err)
				}
			}

			dst := netip.MustParseAddr(f.dst)
			if _, err := r.Set(dst, 9000); err != nil {
				t.Fatal(err)
			}
			if got := n.PMTU(dst); got != 9000 {
				t.Fatalf("PMTU with our route: %d, want 9000", got)
			}
			tooBig(t, dst, 8000, 2044)
			if got := n.WaitPMTU(dst, 2044, time.Second); got != 2044 {
				t.Fatalf("PMTU after ICMP 2044 under our unlocked route: %d, want 2044", got)
			}
			if _, err := r.Set(dst, 9000); err != nil { // unchanged: exception kept
				t.Fatal(err)
			}
			if got := n.PMTU(dst); got != 2044 {
				t.Fatalf("idempotent Set dropped the exception: PMTU %d", got)
			}
			if _, err := r.Set(dst, 8000); err != nil {
				t.Fatal(err)
			}
			if got := n.PMTU(dst); got != 8000 {
				t.Fatalf("PMTU after Set(8000): %d, want 8000 (stale exception dropped)", got)
			}

			// The same with a locked route (as `ip route ... mtu lock`):
			// the kernel ignores the error.
			locked := netip.MustParseAddr(f.operator)
			if err := n.NL.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: hostNet(f.operator),
				Scope: netlink.SCOPE_LINK, MTU: 9000, MTULock: true}); err != nil {
				t.Fatal(err)
			}
			tooBig(t, locked, 8000, 2044)
			got := n.WaitPMTU(locked, 2044, 300*time.Millisecond)
			t.Logf("locked route with mtu 9000: PMTU %d after an ICMP error with 2044", got)
			// Long-standing for IPv4 (ip_rt_update_pmtu honours the lock);
			// IPv6 (Linux 6.18 here) takes the Packet Too Big anyway.
			if f.family == netlink.FAMILY_V4 && got != 9000 {
				t.Fatalf("locked route: PMTU %d after ICMP, expected the kernel to keep 9000", got)
			}
			if err := r.Flush(); err != nil {
				t.Fatal(err)
			}
			if rs := hostRoutesIn(t, n, f.family, f.operator); len(rs) != 1 {
				t.Fatalf("Flush removed the operator's locked route")
			}
		})
	}
}

// SetMany with thousands of destinations: each is installed, with the
// source of its subnet, a bad one in between fails alone, and raising
// them all to the link MTU removes every route.
func TestSetMany(t *testing.T) {
	n := testns.New(t)
	_, link := n.TUN("tun0", 65520, "10.60.0.1/16", "fd60::1/64")
	r := NewRoutesAt(n.NL, link.Attrs().Index)
	var dests []mtu.Dest
	for k := range 2000 {
		dests = append(dests, mtu.Dest{Addr: netip.AddrFrom4([4]byte{10, 60, byte(1 + k/250), byte(1 + k%250)}), MTU: 4092})
	}
	dests = append(dests, mtu.Dest{Addr: netip.MustParseAddr("fd60::2"), MTU: 4092}, mtu.Dest{Addr: netip.MustParseAddr("10.60.0.9"), MTU: 67})
	ok, errs := r.SetMany(dests)
	for k, d := range dests {
		if bad := d.MTU == 67; bad != (errs[k] != nil) || ok[k] == bad {
			t.Fatalf("%v mtu %d: installed %v, err %v", d.Addr, d.MTU, ok[k], errs[k])
		}
	}
	v4, err := n.NL.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	if len(v4) != 2000 {
		t.Fatalf("%d IPv4 routes of ours, want 2000", len(v4))
	}
	for _, rt := range v4 {
		if rt.MTU != 4092 || !rt.Src.Equal(net.ParseIP("10.60.0.1")) {
			t.Fatalf("route %v: mtu %d src %v", rt.Dst, rt.MTU, rt.Src)
		}
	}
	if rs := hostRoutesIn(t, n, netlink.FAMILY_V6, "fd60::2"); len(rs) != 1 || rs[0].MTU != 4092 {
		t.Fatalf("IPv6 route: %v", rs)
	}
	for k := range dests {
		dests[k].MTU = 65520
	}
	r.SetMany(dests)
	left, _ := n.NL.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if len(left) != 0 {
		t.Fatalf("%d routes left at the link MTU", len(left))
	}
}
