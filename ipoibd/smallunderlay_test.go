package main

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
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

// ownIPv6 reports whether ib0 on host k has its --addr IPv6 address and
// its GUID-derived link-local, and no other link-local.
func (c *cluster) ownIPv6(k int) bool {
	c.t.Helper()
	out := c.on(k, "ip", "-6", "-o", "addr", "show", "dev", "ib0")
	return strings.Contains(out, c.ip6(k)+"/64") && strings.Contains(out, linkLocalOf(c.t, c.show(k).GID)+"/64") &&
		strings.Count(out, "fe80:") == 1
}

// TestModeRoundTripKeepsIPv6: `ipoibd mode datagram` then `mode
// connected` leaves every address and the GUID link-local on the link,
// with the kernel's addrgenmode none, also where the datagram MTU is below
// IPv6's minimum and the kernel took IPv6 off the link meanwhile.
func TestModeRoundTripKeepsIPv6(t *testing.T) {
	for _, underlay := range []int{1500, 9000} {
		t.Run(fmt.Sprint(underlay), func(t *testing.T) {
			c := newCluster(t, fmt.Sprintf("moderound%d", underlay/1000), 2)
			for k := 1; k <= 2; k++ {
				c.on(k, "ip", "link", "set", "eth0", "mtu", fmt.Sprint(underlay))
				c.start(k)
			}
			c.ping(1, c.ip6(2), 1)
			c.on(1, binary, "mode", "datagram")
			if underlay == 1500 {
				if n := strings.Count(c.logOf(1), "IPv6 off on this link"); n != 1 {
					t.Errorf("%d lines say IPv6 went off with the datagram MTU, want 1", n)
				}
			}
			c.on(1, binary, "mode", "connected")
			await(t, 5*time.Second, "h1's IPv6 addresses and only its own link-local back", func() bool { return c.ownIPv6(1) })
			if out := c.on(1, "ip", "-d", "link", "show", "ib0"); !strings.Contains(out, "addrgenmode none") {
				t.Errorf("h1's addrgenmode is not none:\n%s", out)
			}
			if out := c.on(1, "ip", "-4", "-o", "addr", "show", "dev", "ib0"); !strings.Contains(out, c.ip4(1)+"/24") {
				t.Errorf("h1 lost its IPv4 address:\n%s", out)
			}
			c.ping(1, c.ip6(2), 2)
			c.ping(2, c.ip6(1), 2)
		})
	}
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

// TestDatagramIPv6OnSmallUnderlayRefused: datagram mode on a 1500-octet
// underlay has an MTU of 1020 for good (an interface started in datagram
// mode stays in it), so an IPv6 address asked for would never come: the
// start is refused with one line that names the address, the MTU and where
// it comes from, exit status 1, and no interface is left behind.
func TestDatagramIPv6OnSmallUnderlayRefused(t *testing.T) {
	c := newCluster(t, "dgram6", 1)
	c.smallUnderlay(1)
	cmd := c.command(1, binary, "--underlay", c.underlay(1), "--mode", "datagram",
		"--addr", c.ip4(1)+"/24", "--addr", c.ip6(1)+"/64")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(20 * time.Second): // a bound for a daemon that runs, not an expectation
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("the daemon started instead of refusing; its output:\n%s", buf.String())
	}
	out := buf.Bytes()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitStart {
		t.Fatalf("the daemon ended with %v, want exit status %d; its output:\n%s", err, exitStart, out)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, "ipoibd: ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d lines of error, want 1:\n%s", len(lines), out)
	}
	for _, want := range []string{c.ip6(1) + "/64", "1280", "at most 1020", "IB MTU 1024", "underlay's MTU: 1500 gives 1024"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("the refusal does not say %q: %s", want, lines[0])
		}
	}
	if out, err := c.try(1, "ip", "link", "show", "ib0"); err == nil {
		t.Errorf("ib0 left behind:\n%s", out)
	}
}
