package mtu

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/inetsum"
	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// testNS is a throw-away network namespace, deleted when the test ends.
type testNS struct {
	t    *testing.T
	name string
	h    netns.NsHandle
	nl   *netlink.Handle
}

func newNS(t *testing.T) *testNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	n := &testNS{t: t, name: "ipoibd-mtu-" + hex.EncodeToString(id[:])}

	if out, err := exec.Command("ip", "netns", "add", n.name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = netns.DeleteNamed(n.name) })
	h, err := netns.GetFromName(n.name)
	if err != nil {
		t.Fatalf("open netns %s: %v", n.name, err)
	}
	n.h = h
	t.Cleanup(func() { h.Close() })

	n.nl, err = netlink.NewHandleAt(h)
	if err != nil {
		t.Fatalf("netlink in netns: %v", err)
	}
	t.Cleanup(n.nl.Close)
	lo, err := n.nl.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.nl.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	return n
}

// do runs f on an OS thread inside the namespace. Sockets and TUN devices
// f opens stay in the namespace.
func (n *testNS) do(f func()) {
	n.t.Helper()
	testnet.InNamed(n.t, n.name, f)
}

// sysctl writes a /proc/sys/net value inside the namespace.
func (n *testNS) sysctl(path, value string) {
	n.t.Helper()
	n.do(func() {
		if err := os.WriteFile("/proc/sys/"+path, []byte(value), 0o644); err != nil {
			n.t.Fatal(err)
		}
	})
}

// tun creates a TUN device (IFF_TUN|IFF_NO_PI) in the namespace with the
// given MTU and addresses, up, and returns its file (non-blocking, so
// read deadlines work) and link.
func (n *testNS) tun(name string, mtu int, addrs ...string) (*os.File, netlink.Link) {
	n.t.Helper()
	var fd int
	n.do(func() {
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
	link, err := n.nl.LinkByName(name)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := n.nl.LinkSetMTU(link, mtu); err != nil {
		n.t.Fatal(err)
	}
	for _, a := range addrs {
		p := netip.MustParsePrefix(a)
		ipn := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
		if err := n.nl.AddrAdd(link, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}); err != nil {
			n.t.Fatalf("address %s: %v", a, err)
		}
	}
	if err := n.nl.LinkSetUp(link); err != nil {
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
			rs, err := n.nl.RouteListFiltered(family, &netlink.Route{Dst: host, Table: unix.RT_TABLE_LOCAL},
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

// readUDPTo reads packets from the TUN until one is a UDP datagram to dst
// and returns it (a slice of buf). Other traffic (MLD, RS) is skipped.
func readUDPTo(t *testing.T, f *os.File, buf []byte, dst netip.Addr) []byte {
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

// udpDF opens, inside the namespace, a UDP socket of dst's family that
// never fragments (IP_PMTUDISC_DO / IPV6_PMTUDISC_DO + IPV6_DONTFRAG).
func (n *testNS) udpDF(dst netip.Addr) int {
	n.t.Helper()
	var fd int
	n.do(func() {
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

func sendTo(fd int, dst netip.Addr, size int) error {
	payload := make([]byte, size)
	if dst.Is4() {
		return unix.Sendto(fd, payload, 0, &unix.SockaddrInet4{Port: 9, Addr: dst.As4()})
	}
	return unix.Sendto(fd, payload, 0, &unix.SockaddrInet6{Port: 9, Addr: dst.As16()})
}

// pmtu returns the MTU the kernel's route lookup for dst reports (the
// cached PMTU exception or the route's MTU metric; 0 = the link's).
func (n *testNS) pmtu(dst netip.Addr) int {
	n.t.Helper()
	routes, err := n.nl.RouteGet(dst.AsSlice())
	if err != nil {
		n.t.Fatalf("route get %s: %v", dst, err)
	}
	if len(routes) == 0 {
		n.t.Fatalf("route get %s: no route", dst)
	}
	return routes[0].MTU
}

// waitPMTU polls until dst's PMTU is want or the timeout passes, and
// returns the last value seen.
func (n *testNS) waitPMTU(dst netip.Addr, want int, timeout time.Duration) int {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := n.pmtu(dst)
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// verify checks an ICMP error as a receiver would: IP header, checksums,
// types and quoted packet. It returns a description of the first problem.
func verify(p []byte) string { return verifyAs(p, false) }

// verifyAs is verify for TooBig's output or, with unreachable, for
// Unreachable's.
func verifyAs(p []byte, unreachable bool) string {
	if len(p) < 1 {
		return "empty"
	}
	switch p[0] >> 4 {
	case 4:
		if len(p) < 28 || p[0] != 0x45 {
			return "ipv4 header"
		}
		if int(binary.BigEndian.Uint16(p[2:])) != len(p) {
			return "ipv4 total length"
		}
		if len(p) > MaxLen4 {
			return "longer than 576"
		}
		if inetsum.Checksum(0, p[:20]) != 0 {
			return "ipv4 header checksum"
		}
		if p[9] != protoICMP || p[8] == 0 {
			return "ipv4 protocol/ttl"
		}
		if inetsum.Checksum(0, p[20:]) != 0 {
			return "icmp checksum"
		}
		switch {
		case unreachable && (p[20] != 3 || p[21] != 1 || binary.BigEndian.Uint32(p[24:]) != 0):
			return "icmp type/code/unused"
		case unreachable:
		case p[20] != 3 || p[21] != 4 || binary.BigEndian.Uint16(p[24:]) != 0:
			return "icmp type/code/unused"
		case binary.BigEndian.Uint16(p[26:]) < 68:
			return "next-hop mtu"
		}
		if p[28]>>4 != 4 || len(p) < 28+int(p[28]&0xf)*4+8 && len(p) < 28+int(binary.BigEndian.Uint16(p[30:])) {
			return "quote"
		}
		if [4]byte(p[16:20]) != [4]byte(p[40:44]) {
			return "destination is not the quoted source"
		}
	case 6:
		if len(p) < 48 {
			return "ipv6 length"
		}
		if int(binary.BigEndian.Uint16(p[4:]))+40 != len(p) || len(p) > MaxLen6 {
			return "ipv6 payload length"
		}
		if p[6] != protoICMPv6 || p[7] == 0 {
			return "ipv6 next header/hop limit"
		}
		if inetsum.Checksum(inetsum.Add(0, p[8:40])+uint64(len(p)-40)+protoICMPv6, p[40:]) != 0 {
			return "icmpv6 checksum"
		}
		if unreachable && (p[40] != 1 || p[41] != 3 || binary.BigEndian.Uint32(p[44:]) != 0) ||
			!unreachable && (p[40] != 2 || p[41] != 0 || binary.BigEndian.Uint32(p[44:]) < 1280) {
			return "icmpv6 type/code/mtu"
		}
		if p[48]>>4 != 6 {
			return "quote"
		}
		if [16]byte(p[24:40]) != [16]byte(p[56:72]) {
			return "destination is not the quoted source"
		}
	default:
		return "ip version"
	}
	return ""
}
