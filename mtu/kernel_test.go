package mtu

import (
	"errors"
	"github.com/ipoibd/ipoibd/internal/testns"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestKernelAcceptsTooBig is the real check of TooBig against Linux: a DF
// datagram of 60000 octets leaves through a TUN (MTU 65520), the test
// reads it, writes back TooBig(..., mtu, src) and then asks the kernel
// (RTM_GETROUTE, like `ip route get`) whether the path MTU became mtu and
// whether a second 60000-octet DF send now fails with EMSGSIZE.
//
// It also settles which ICMP source address the kernel takes: each case
// uses a fresh destination, so a rejected error leaves the PMTU untouched.
func TestKernelAcceptsTooBig(t *testing.T) {
	type srcCase struct {
		name     string
		src      string // "" = TooBig's default: the packet's destination
		rpFilter string // net.ipv4.conf.{all,tun0}.rp_filter, "" = leave
		accepted bool
	}
	for _, fam := range []struct {
		name, local, other, offLink, own, loop string
		mtus                                   []int
	}{
		{
			name: "ipv4", local: "10.99.0.1/24", other: "10.99.0.254", offLink: "192.0.2.1", own: "10.99.0.1",
			mtus: []int{2044, 1500, 576}, // 576 > net.ipv4.route.min_pmtu (552)
		},
		{
			name: "ipv6", local: "fd99::1/64", other: "fd99::fe", offLink: "2001:db8::1", own: "fd99::1",
			mtus: []int{2044, 1500, 1280},
		},
	} {
		t.Run(fam.name, func(t *testing.T) {
			n := testns.New(t)
			tun, _ := n.TUN("tun0", 65520, fam.local)
			buf := make([]byte, 65536)
			out := make([]byte, MaxLen)

			// roundTrip sends a DF datagram to dst, answers it with
			// TooBig and reports the PMTU the kernel then has.
			roundTrip := func(t *testing.T, fd int, dst netip.Addr, size, mtu int, src netip.Addr, want int) int {
				t.Helper()
				if err := testns.SendTo(fd, dst, size); err != nil {
					t.Fatalf("first send of %d to %s: %v", size, dst, err)
				}
				pkt := testns.ReadUDPTo(t, tun, buf, dst)
				k, err := TooBig(out, pkt, mtu, src)
				if err != nil {
					t.Fatalf("TooBig: %v", err)
				}
				if msg := verify(out[:k]); msg != "" {
					t.Fatalf("TooBig output: %s", msg)
				}
				if _, err := tun.Write(out[:k]); err != nil {
					t.Fatalf("write ICMP into TUN: %v", err)
				}
				return n.WaitPMTU(dst, want, 500*time.Millisecond)
			}

			t.Run("mtus", func(t *testing.T) {
				// Descending, on one destination: each error lowers the
				// PMTU further. Each datagram is as large as the previous
				// PMTU allows; once the error is taken, resending it fails.
				dst := nth(netip.MustParsePrefix(fam.local).Addr(), 9)
				fd := n.UDPDF(dst)
				hdrs := 28
				if fam.name == "ipv6" {
					hdrs = 48
				}
				size := 60000
				for _, mtu := range fam.mtus {
					if got := roundTrip(t, fd, dst, size, mtu, netip.Addr{}, mtu); got != mtu {
						t.Fatalf("mtu %d: kernel PMTU to %s is %d, want %d", mtu, dst, got, mtu)
					}
					if err := testns.SendTo(fd, dst, size); !errors.Is(err, unix.EMSGSIZE) {
						t.Fatalf("mtu %d: second send of %d with DF: %v, want EMSGSIZE", mtu, size, err)
					}
					if err := testns.SendTo(fd, dst, mtu-hdrs); err != nil {
						t.Fatalf("mtu %d: send of %d with DF: %v", mtu, mtu-hdrs, err)
					}
					testns.ReadUDPTo(t, tun, buf, dst)
					t.Logf("mtu %d: PMTU %d; %d octets with DF → EMSGSIZE, %d octets pass", mtu, mtu, size, mtu-hdrs)
					size = mtu - hdrs
				}
			})

			cases := []srcCase{
				{name: "peer (packet's destination, default)", accepted: true},
				{name: "other on-link address", src: fam.other, accepted: true},
				{name: "off-link address", src: fam.offLink, accepted: true},
				{name: "own address", src: fam.own, accepted: fam.name == "ipv6"},
			}
			if fam.name == "ipv4" {
				cases = append(cases,
					srcCase{name: "peer, strict rp_filter", rpFilter: "1", accepted: true},
					srcCase{name: "off-link, strict rp_filter", src: fam.offLink, rpFilter: "1", accepted: false},
				)
			}
			for i, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					if c.rpFilter != "" {
						n.Sysctl("net/ipv4/conf/all/rp_filter", c.rpFilter)
						n.Sysctl("net/ipv4/conf/tun0/rp_filter", c.rpFilter)
						t.Cleanup(func() {
							n.Sysctl("net/ipv4/conf/all/rp_filter", "0")
							n.Sysctl("net/ipv4/conf/tun0/rp_filter", "0")
						})
					}
					dst := nth(netip.MustParsePrefix(fam.local).Addr(), 20+i)
					var src netip.Addr
					if c.src != "" {
						src = netip.MustParseAddr(c.src)
					}
					fd := n.UDPDF(dst)
					want := 2044
					if !c.accepted {
						want = 0
					}
					got := roundTrip(t, fd, dst, 60000, 2044, src, 2044)
					t.Logf("src %s: PMTU to %s after the error: %d", srcName(src), dst, got)
					if got != want {
						t.Fatalf("src %s: PMTU %d, want %d (accepted=%v)", srcName(src), got, want, c.accepted)
					}
					err := testns.SendTo(fd, dst, 60000)
					if c.accepted && !errors.Is(err, unix.EMSGSIZE) {
						t.Fatalf("second send: %v, want EMSGSIZE", err)
					}
					if !c.accepted && err != nil {
						t.Fatalf("second send: %v, want success", err)
					}
				})
			}
		})
	}
}

// nth returns the address k after a.
func nth(a netip.Addr, k int) netip.Addr {
	for ; k > 0; k-- {
		a = a.Next()
	}
	return a
}

func srcName(a netip.Addr) string {
	if !a.IsValid() {
		return "default (packet's destination)"
	}
	return a.String()
}
