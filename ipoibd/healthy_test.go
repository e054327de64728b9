package main

import (
	"fmt"
	"regexp"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/counterdoc"
)

// TestHealthyHostsCountNoTrouble: two hosts doing what healthy hosts do —
// pings both ways over IPv4 and IPv6, iperf3 both ways, new addresses
// resolved by ARP and ND, the link taken down and up (the kernel's router
// solicitations) — end with every counter the counter table calls trouble
// at 0, every counter documented, and SIGHUP's summary saying drops=0 and
// no trouble. A counter that grows on a healthy host under a trouble
// entry (as rx_drop_loop and tx_drop_kernel_nd did) fails here.
func TestHealthyHostsCountNoTrouble(t *testing.T) {
	c := newCluster(t, "healthy", 2)
	c.start(1)
	c.start(2)
	for _, p := range [][2]int{{1, 2}, {2, 1}} {
		c.ping(p[0], c.ip4(p[1]), 3)
		c.ping(p[0], c.ip6(p[1]), 3)
	}
	iperf3(t, c, 1, 2, c.ip4(2), 2)
	iperf3(t, c, 2, 1, c.ip6(1), 2)
	// The link down and up again: the kernel solicits routers anew (IPv6
	// addresses the daemon did not put there go with the link).
	c.on(1, "ip", "link", "set", "ib0", "down")
	c.on(1, "ip", "link", "set", "ib0", "up")
	await(t, 5*time.Second, "h1 ib0 running again", func() bool {
		_, err := c.try(1, "ping", "-c", "1", "-W", "1", c.ip4(2))
		return err == nil
	})
	// New addresses on both hosts: resolved afresh by ARP and ND.
	extra4 := func(k int) string { return fmt.Sprintf("192.168.%d.%d", c.net, 100+k) }
	extra6 := func(k int) string { return fmt.Sprintf("fd00:%d::%d", c.net, 100+k) }
	for k := 1; k <= 2; k++ {
		c.on(k, "ip", "addr", "add", extra4(k)+"/24", "dev", "ib0")
		c.on(k, "ip", "addr", "add", extra6(k)+"/64", "dev", "ib0", "nodad")
	}
	c.ping(1, extra4(2), 3)
	c.ping(2, extra4(1), 3)
	c.ping(1, extra6(2), 3)
	c.ping(2, extra6(1), 3)
	c.ping(1, c.ip6(2), 2)

	for k := 1; k <= 2; k++ {
		s := c.stats(k)
		names := make([]string, 0, len(s))
		for n := range s {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if _, ok := counterdoc.Lookup(n); !ok {
				t.Errorf("h%d: counter %s has no entry in the counter table", k, n)
			}
			if s[n] > 0 && counterdoc.IsTrouble(n) {
				t.Errorf("h%d: trouble counter %s = %d on a healthy host", k, n, s[n])
			}
		}
		if s["arp_in"] == 0 || s["nd_in"] == 0 || s["tx_connected"] == 0 {
			t.Errorf("h%d: arp_in %d, nd_in %d, tx_connected %d: the run did not resolve or connect", k, s["arp_in"], s["nd_in"], s["tx_connected"])
		}
		if err := syscall.Kill(c.pid(k), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		summary := regexp.MustCompile(`SIGHUP: nothing re-read\)" if=ib0 .* drops=(\d+) trouble=(\S*)`)
		var m []string
		await(t, 5*time.Second, fmt.Sprintf("h%d logs its state", k), func() bool {
			m = summary.FindStringSubmatch(c.logOf(k))
			return m != nil
		})
		if m[1] != "0" || m[2] != `""` {
			t.Errorf("h%d SIGHUP: drops=%s trouble=%s, want drops=0 and none", k, m[1], m[2])
		}
	}
}
