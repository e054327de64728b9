package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// The usual Ethernet underlay is 1500 octets: softib's IB MTU is then 1024
// and its UD MTU 1020, below IPv6's 1280. These tests hold the daemon to
// what a new user found there (issue 40).

// smallUnderlay sets host k's underlay MTU to 1500 before its daemon
// starts: softib takes its IB MTU from it.
func (c *cluster) smallUnderlay(k int) {
	c.t.Helper()
	c.on(k, "ip", "link", "set", "eth0", "mtu", "1500")
}

// warnLine matches a log line at level WARN (or above: ERROR).
var warnLine = regexp.MustCompile(`(?m)^.*level=(WARN|ERROR).*$`)

// TestNoWarningsOnPeerRestart: a peer that stops (SIGTERM) or dies
// (SIGKILL) and comes back is a healthy event on a 1500-octet underlay
// too: neither daemon logs a warning, while the peer is reached over UD
// at 1020 octets (an IPv6 route cannot carry that MTU) and when it is
// connected again.
func TestNoWarningsOnPeerRestart(t *testing.T) {
	c := newCluster(t, "restartwarn", 2)
	for k := 1; k <= 2; k++ {
		c.smallUnderlay(k)
		c.start(k)
	}
	both := func() {
		for _, dst := range []string{c.ip4(2), c.ip6(2)} {
			c.ping(1, dst, 2)
		}
		for _, dst := range []string{c.ip4(1), c.ip6(1)} {
			c.ping(2, dst, 2)
		}
	}
	both()
	for _, sig := range []string{"TERM", "KILL"} {
		c.stop(2, sig)
		c.start(2)
		// Back over RC both ways: pings until each answers, then more.
		for _, dst := range []string{c.ip6(2), c.ip4(2)} {
			await(t, 30*time.Second, "h1 reaches the restarted h2 at "+dst, func() bool {
				_, err := c.try(1, "ping", "-c", "1", "-W", "1", dst)
				return err == nil
			})
		}
		both()
	}
	for k := 1; k <= 2; k++ {
		if warns := warnLine.FindAllString(c.logOf(k), -1); len(warns) > 0 {
			t.Errorf("h%d logged %d warnings on healthy peer restarts:\n%s", k, len(warns), strings.Join(warns, "\n"))
		}
	}
}
