// Package testns is a throw-away network namespace for tests that need the
// kernel: a TUN in it, DF sockets, the path MTU the kernel's route lookup
// reports. The tests of mtu (ICMP errors as the kernel reads them) and of
// tun (MTU host routes) share it.
package testns

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NS is a throw-away network namespace, deleted when the test ends.
type NS struct {
	t    *testing.T
	Name string // as `ip netns` lists it
	h    netns.NsHandle
	NL   *netlink.Handle // netlink inside the namespace
}

// New makes a namespace with its loopback up, or skips the test when not
// root.
func New(t *testing.T) *NS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	n := &NS{t: t, Name: "ipoibd-test-" + hex.EncodeToString(id[:])}

	if out, err := exec.Command("ip", "netns", "add", n.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = netns.DeleteNamed(n.Name) })
	h, err := netns.GetFromName(n.Name)
	if err != nil {
		t.Fatalf("open netns %s: %v", n.Name, err)
	}
	n.h = h
	t.Cleanup(func() { h.Close() })

	n.NL, err = netlink.NewHandleAt(h)
	if err != nil {
		t.Fatalf("netlink in netns: %v", err)
	}
	t.Cleanup(n.NL.Close)
	lo, err := n.NL.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.NL.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	return n
}

// Do runs f on an OS thread inside the namespace. Sockets and TUN devices
// f opens stay in the namespace.
func (n *NS) Do(f func()) {
	n.t.Helper()
	testnet.InNamed(n.t, n.Name, f)
}

// IP runs `ip -n ns args...` and returns its output.
func (n *NS) IP(args ...string) string {
	n.t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", n.Name}, args...)...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Sysctl writes a /proc/sys/net value inside the namespace.
func (n *NS) Sysctl(path, value string) {
	n.t.Helper()
	n.Do(func() {
		if err := os.WriteFile("/proc/sys/"+path, []byte(value), 0o644); err != nil {
			n.t.Fatal(err)
		}
	})
}

// TUN creates a TUN device (IFF_TUN|IFF_NO_PI) in the namespace with the
// given MTU and addresses, up, and returns its file (non-blocking, so
// read deadlines work) and link.
func (n *NS) TUN(name string, mtu int, addrs ...string) (*os.File, netlink.Link) {
	n.t.Helper()
	var fd int
	n.Do(func() {
		var err error
		fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			n.t.Skipf("no TUN: %v", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			n.t.Fatal(err)
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			n.t.Fatalf("TUNSETIFF: %v", err)
		}
	})
	f := os.NewFile(uintptr(fd), name)
	n.t.Cleanup(func() { f.Close() })
	link, err := n.NL.LinkByName(name)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := n.NL.LinkSetMTU(link, mtu); err != nil {
		n.t.Fatal(err)
	}
	for _, a := range addrs {
		p := netip.MustParsePrefix(a)
		ipn := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
		if err := n.NL.AddrAdd(link, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}); err != nil {
			n.t.Fatalf("address %s: %v", a, err)
		}
	}
	if err := n.NL.LinkSetUp(link); err != nil {
		n.t.Fatal(err)
	}
	// The kernel adds the local routes of IPv6 addresses asynchronously
	// after the link comes up; until then packets to them are dropped
	// (Ip6InAddrErrors). Wait for them.
	for _, a := range addrs {
		p := netip.MustParsePrefix(a)
		family := netlink.FAMILY_V4
		if p.Addr().Is6() {
			family = netlink.FAMILY_V6
		}
		host := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Addr().BitLen(), p.Addr().BitLen())}
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			rs, err := n.NL.RouteListFiltered(family, &netlink.Route{Dst: host, Table: unix.RT_TABLE_LOCAL},
				netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
			if err != nil {
				n.t.Fatal(err)
			}
			if len(rs) > 0 {
				break
			}
			if time.Now().After(deadline) {
				n.t.Fatalf("no local route for %s", a)
			}
		}
	}
	return f, link
}

// ReadUDPTo reads packets from the TUN until one is a UDP datagram to dst
// and returns it (a slice of buf). Other traffic (MLD, RS) is skipped.
func ReadUDPTo(t *testing.T, f *os.File, buf []byte, dst netip.Addr) []byte {
	t.Helper()
	if err := f.SetReadDeadline(time.Now().Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for {
		k, err := f.Read(buf)
		if err != nil {
			t.Fatalf("read TUN waiting for UDP to %s: %v", dst, err)
		}
		p := buf[:k]
		switch {
		case k >= 20 && p[0]>>4 == 4 && p[9] == unix.IPPROTO_UDP && netip.AddrFrom4([4]byte(p[16:20])) == dst:
			return p
		case k >= 40 && p[0]>>4 == 6 && p[6] == unix.IPPROTO_UDP && netip.AddrFrom16([16]byte(p[24:40])) == dst:
			return p
		}
	}
}

// UDPDF opens, inside the namespace, a UDP socket of dst's family that
// never fragments (IP_PMTUDISC_DO / IPV6_PMTUDISC_DO + IPV6_DONTFRAG).
func (n *NS) UDPDF(dst netip.Addr) int {
	n.t.Helper()
	var fd int
	n.Do(func() {
		var err error
		if dst.Is4() {
			fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err == nil {
				err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
			}
		} else {
			fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err == nil {
				err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
			}
			if err == nil {
				err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1)
			}
		}
		if err != nil {
			n.t.Fatalf("UDP socket: %v", err)
		}
	})
	n.t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// SendTo sends size zero octets to dst port 9 on fd.
func SendTo(fd int, dst netip.Addr, size int) error {
	payload := make([]byte, size)
	if dst.Is4() {
		return unix.Sendto(fd, payload, 0, &unix.SockaddrInet4{Port: 9, Addr: dst.As4()})
	}
	return unix.Sendto(fd, payload, 0, &unix.SockaddrInet6{Port: 9, Addr: dst.As16()})
}

// PMTU returns the MTU the kernel's route lookup for dst reports (the
// cached PMTU exception or the route's MTU metric; 0 = the link's).
func (n *NS) PMTU(dst netip.Addr) int {
	n.t.Helper()
	routes, err := n.NL.RouteGet(dst.AsSlice())
	if err != nil {
		n.t.Fatalf("route get %s: %v", dst, err)
	}
	if len(routes) == 0 {
		n.t.Fatalf("route get %s: no route", dst)
	}
	return routes[0].MTU
}

// WaitPMTU polls until dst's PMTU is want or the timeout passes, and
// returns the last value seen.
func (n *NS) WaitPMTU(dst netip.Addr, want int, timeout time.Duration) int {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := n.PMTU(dst)
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}
