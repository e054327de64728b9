package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
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
// own address, in IPv4 and IPv6; also with the interface in another
// namespace (--netns), where the IPv4 error's raw socket must be.
func TestUnresolvableAddressFailsFast(t *testing.T) {
	for _, tc := range []struct {
		name   string
		netns  bool // h1's ib0 in a namespace of its own (--netns)
		loDown bool // whose lo is down: no local delivery, the error comes through the TUN from the dead host
	}{{"own namespace", false, false}, {"--netns", true, false}, {"--netns, lo down", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, "unreach", 2).forTest(t)
			where := c.host(1) // the namespace h1's ib0 is in
			if tc.netns {
				where = fmt.Sprintf("ipoibd-unreach%d", c.net)
				_ = exec.Command("ip", "netns", "del", where).Run() // a leftover of an interrupted run
				if out, err := exec.Command("ip", "netns", "add", where).CombinedOutput(); err != nil {
					t.Fatalf("ip netns add %s: %v\n%s", where, err, out)
				}
				t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", where).Run() })
				// As in any container: the error to our own sender is
				// delivered through lo.
				if out, err := exec.Command("ip", "-n", where, "link", "set", "lo", "up").CombinedOutput(); err != nil || tc.loDown {
					if err != nil {
						t.Fatalf("ip -n %s link set lo up: %v\n%s", where, err, out)
					}
					c.on(1, "ip", "-n", where, "link", "set", "lo", "down")
				}
				c.start(1, "--netns", where)
			} else {
				c.start(1)
			}
			c.start(2)
			inApp := func(args ...string) (string, error) {
				out, err := exec.Command("ip", append([]string{"netns", "exec", where}, args...)...).CombinedOutput()
				return string(out), err
			}
			dead := []string{fmt.Sprintf("192.168.%d.9", c.net), fmt.Sprintf("fd00:%d::9", c.net)}
			if tc.netns {
				dead = dead[:1] // what --netns changes: the IPv4 error's raw socket
			}
			for _, dead := range dead {
				var took time.Duration
				var err error
				testnet.InNamed(t, where, func() {
					took, err = tcpConnect(netip.MustParseAddr(dead), 8*time.Second)
				})
				t.Logf("connect to %s: %v after %v", dead, err, took.Round(time.Millisecond))
				if !errors.Is(err, unix.EHOSTUNREACH) {
					t.Fatalf("connect to %s: %v, want EHOSTUNREACH", dead, err)
				}
				if took > 3500*time.Millisecond {
					t.Errorf("connect to %s failed after %v, want within 3.5 s", dead, took)
				}
				out, _ := inApp("ping", "-c", "1", "-W", "5", dead)
				if !strings.Contains(out, "Destination Host Unreachable") && !strings.Contains(out, "Address unreachable") {
					t.Errorf("ping %s: want Destination Host Unreachable / Address unreachable:\n%s", dead, out)
				}
				// As the kernel's, from our own address, not the dead
				// host's (IPv4's through a raw socket: from the TUN it
				// would be a martian to the kernel).
				from := c.ip4(1)
				switch {
				case strings.Contains(dead, ":"):
					from = c.ip6(1)
				case tc.loDown:
					from = dead
				}
				if !strings.Contains(out, "From "+from+" ") {
					t.Errorf("ping %s: the error does not come from %s:\n%s", dead, from, out)
				}
			}
			out, err := inApp(binary, "stats", "--json")
			var s map[string]uint64
			if err == nil {
				err = json.Unmarshal([]byte(out), &s)
			}
			if err != nil {
				t.Fatalf("ipoibd stats: %v\n%s", err, out)
			}
			if s["tx_unreachable_sent"] < uint64(2*len(dead)) {
				t.Errorf("tx_unreachable_sent = %d, want at least %d", s["tx_unreachable_sent"], 2*len(dead))
			}
			if out, err := inApp("ping", "-c", "2", "-i", "0.1", "-W", "2", c.ip4(2)); err != nil { // the live peer is unaffected
				t.Errorf("ping %s: %v\n%s", c.ip4(2), err, out)
			}
		})
	}
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
