package main

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/internal/testnet"
	"golang.org/x/sys/unix"
)

// TestTwoSubnetsKeepTheirSource: with two subnets on ib0, traffic to a
// peer on the second installs no route that steals the source address:
// `ip route get` keeps our address in that subnet, ping loses nothing on
// either subnet, only the datagram-only peer (MTU below the link's) gets a
// host route, with that source, and the route goes with our address.
func TestTwoSubnetsKeepTheirSource(t *testing.T) {
	c := newCluster(t, "subnets", 3)
	c.start(1)
	c.start(2)
	c.start(3, "--mode", "datagram")
	second := func(k int) string { return fmt.Sprintf("10.99.%d.%d", c.net, k) }
	for _, k := range []int{1, 2, 3} {
		c.on(k, "ip", "addr", "add", second(k)+"/24", "dev", "ib0")
	}
	c.on(3, "ip", "addr", "del", c.ip4(3)+"/24", "dev", "ib0") // h3 is only on the second subnet
	udMTU := fmt.Sprint(c.show(1).UDMTU)

	for _, dst := range []string{second(2), second(3), c.ip4(2)} {
		if out := c.on(1, "ping", "-c", "5", "-i", "0.2", "-W", "2", dst); !strings.Contains(out, " 0% packet loss") {
			t.Errorf("ping %s: want 0%% loss:\n%s", dst, out)
		}
	}
	for _, tc := range []struct {
		dst, src string
		mtu      string // "": no host route of ours
	}{
		{second(2), second(1), ""},
		{c.ip4(2), c.ip4(1), ""},
		{second(3), second(1), udMTU},
	} {
		out := c.on(1, "ip", "route", "get", tc.dst)
		if !strings.Contains(out, "src "+tc.src+" ") {
			t.Errorf("ip route get %s: want src %s:\n%s", tc.dst, tc.src, out)
		}
		ours := c.on(1, "ip", "route", "show", tc.dst+"/32", "proto", "105")
		switch {
		case tc.mtu == "" && strings.TrimSpace(ours) != "":
			t.Errorf("host route to %s although its MTU is the link's: %s", tc.dst, ours)
		case tc.mtu != "" && (!strings.Contains(ours, "src "+tc.src) || !strings.Contains(ours, "mtu "+tc.mtu)):
			t.Errorf("host route to %s: %q, want src %s mtu %s", tc.dst, ours, tc.src, tc.mtu)
		}
	}
	// Our address in the second subnet goes: so does the route to h3
	// (the kernel drops routes whose source went, and the daemon, which
	// sets them again on the address change, finds h3 off our subnets).
	c.on(1, "ip", "addr", "del", second(1)+"/24", "dev", "ib0")
	if out := c.on(1, "ip", "route", "show", "proto", "105"); strings.TrimSpace(out) != "" {
		t.Errorf("host routes left after the subnet went: %s", out)
	}
	if out := c.on(1, "ping", "-c", "3", "-i", "0.2", "-W", "2", c.ip4(2)); !strings.Contains(out, " 0% packet loss") {
		t.Errorf("ping %s after the address change:\n%s", c.ip4(2), out)
	}
}

// TestUnresolvableAddressFailsFast: connect() to an on-link address nobody
// answers for fails with EHOSTUNREACH when resolution gives up (3 s), not
// at TCP's own timeout, and ping reports the host unreachable, from our
// own address.
func TestUnresolvableAddressFailsFast(t *testing.T) {
	c := newCluster(t, "unreach", 2)
	c.start(1)
	c.start(2)
	for _, dead := range []string{fmt.Sprintf("192.168.%d.9", c.net), fmt.Sprintf("fd00:%d::9", c.net)} {
		t.Run(dead, func(t *testing.T) {
			var took time.Duration
			var err error
			testnet.InNamed(t, c.host(1), func() {
				took, err = tcpConnect(netip.MustParseAddr(dead), 8*time.Second)
			})
			t.Logf("connect to %s: %v after %v", dead, err, took.Round(time.Millisecond))
			if !errors.Is(err, unix.EHOSTUNREACH) {
				t.Fatalf("connect to %s: %v, want EHOSTUNREACH", dead, err)
			}
			if took > 3500*time.Millisecond {
				t.Errorf("connect to %s failed after %v, want within 3.5 s", dead, took)
			}
			out, _ := c.try(1, "ping", "-c", "1", "-W", "5", dead)
			if !strings.Contains(out, "Destination Host Unreachable") && !strings.Contains(out, "Address unreachable") {
				t.Errorf("ping %s: want Destination Host Unreachable / Address unreachable:\n%s", dead, out)
			}
			// IPv6: as the kernel's, from our own address, not the dead
			// host's. (IPv4's from our own would be a martian to the
			// kernel: errorSource.)
			if own := c.ip6(1); strings.Contains(dead, ":") && !strings.Contains(out, "From "+own+" ") {
				t.Errorf("ping %s: the error does not come from our own %s:\n%s", dead, own, out)
			}
		})
	}
	if s := c.stats(1); s["tx_unreachable_sent"] < 4 {
		t.Errorf("tx_unreachable_sent = %d, want at least 4", s["tx_unreachable_sent"])
	}
	c.ping(1, c.ip4(2), 2) // the live peer is unaffected
}

// tcpConnect makes one blocking TCP connect to dst:80 in the calling
// thread's namespace and returns how long it took and its error.
func tcpConnect(dst netip.Addr, timeout time.Duration) (time.Duration, error) {
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: 80, Addr: dst.As16()})
	if dst.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: 80, Addr: dst.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return 0, err
	}
	start := time.Now()
	err = unix.Connect(fd, sa)
	return time.Since(start), err
}

// TestSecondDaemonOnTheSameUnderlay: a second daemon on an underlay
// address in use is refused with one line that names the way out
// (--softib-port), and the first one's traffic is unaffected.
func TestSecondDaemonOnTheSameUnderlay(t *testing.T) {
	c := newCluster(t, "second", 2)
	c.start(1)
	c.start(2)
	c.ping(1, c.ip4(2), 1)
	out, err := c.try(1, "timeout", "10", binary, "--underlay", c.underlay(1), "--ifname", "ib1",
		"--pkey", "0x8001", "--addr", fmt.Sprintf("192.168.%d.101/24", c.net))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err == nil || len(lines) != 1 || !strings.Contains(out, c.underlay(1)) || !strings.Contains(out, "in use") || !strings.Contains(out, "--softib-port") {
		t.Fatalf("second daemon on %s: %v, want one line saying the address is in use:\n%s", c.underlay(1), err, out)
	}
	t.Logf("second daemon: %s", lines[0])
	if out := c.on(1, "ping", "-c", "10", "-i", "0.1", "-W", "2", c.ip4(2)); !strings.Contains(out, " 0% packet loss") {
		t.Errorf("ping from the first daemon:\n%s", out)
	}
}
