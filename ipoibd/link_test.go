package main

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// await polls cond until it holds, failing the test after limit.
func await(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// linkLocalOf is RFC 4391 §8's link-local address for a port GID: fe80::
// and the GID's low half (the port GUID) with the U/L bit inverted.
func linkLocalOf(t *testing.T, gid string) string {
	t.Helper()
	g, err := ib.ParseGID(gid)
	if err != nil {
		t.Fatal(err)
	}
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	copy(a[8:], g[8:])
	a[8] ^= 0x02
	return netip.AddrFrom16(a).String()
}

// TestLinkFollowsTheOperator: the interface behaves as a NIC does when an
// operator changes it. Its link-local address comes from the port GUID and
// survives a restart; a new MTU caps every path; down and up bring back the
// addresses and paths; the carrier follows the underlay.
func TestLinkFollowsTheOperator(t *testing.T) {
	c := newCluster(t, "link", 2)
	c.start(1)
	c.start(2)
	c.ping(1, c.ip4(2), 1)
	c.ping(1, c.ip6(2), 1)

	// Link-local: from the GUID, the only one, the same after a restart.
	info := c.show(2)
	want := linkLocalOf(t, info.GID)
	if g, _ := ib.ParseGID(info.GID); info.PortGUID != fmt.Sprintf("0x%x", g[8:]) {
		t.Errorf("show: port_guid %q for GID %s", info.PortGUID, info.GID)
	}
	linkLocals := func(k int) string {
		return c.on(k, "ip", "-6", "-o", "addr", "show", "dev", "ib0", "scope", "link")
	}
	if got := linkLocals(2); !strings.Contains(got, want+"/64") || strings.Count(got, "fe80:") != 1 {
		t.Errorf("h2 link-local: want only %s/64, got:\n%s", want, got)
	}
	c.stop(2, "KILL")
	c.start(2)
	if got := linkLocals(2); !strings.Contains(got, want+"/64") {
		t.Errorf("h2 link-local after a restart: want %s/64, got:\n%s", want, got)
	}
	c.ping(1, want+"%ib0", 2)

	// MTU: 9000 on h1 caps its paths; 30000-octet DF pings no longer leave.
	c.on(1, "ip", "link", "set", "ib0", "mtu", "9000")
	await(t, 5*time.Second, "show reports MTU 9000", func() bool { return c.show(1).MTU == 9000 })
	c.on(1, "ping", "-c", "2", "-i", "0.1", "-W", "2", "-M", "do", "-s", "8000", c.ip4(2))
	if out, err := c.try(1, "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "30000", c.ip4(2)); err == nil {
		t.Errorf("a 30000-octet DF ping left an MTU-9000 interface:\n%s", out)
	}
	for _, dst := range []string{c.ip4(2), c.ip6(2)} {
		if m := routeMTU.FindStringSubmatch(c.on(1, "ip", "route", "get", dst)); m != nil && atoi(m[1]) > 9000 {
			t.Errorf("ip route get %s: mtu %s above the link's 9000", dst, m[1])
		}
	}
	c.on(1, "ip", "link", "set", "ib0", "mtu", "65520")
	await(t, 5*time.Second, "show reports MTU 65520", func() bool { return c.show(1).MTU == 65520 })
	c.on(1, "ping", "-c", "2", "-i", "0.1", "-W", "2", "-M", "do", "-s", "30000", c.ip4(2))

	// Down and up: the kernel drops IPv6 addresses and the link's routes;
	// the daemon puts back its own.
	c.on(1, "ip", "link", "set", "ib0", "down")
	c.on(1, "ip", "link", "set", "ib0", "up")
	await(t, 5*time.Second, "h1's IPv6 addresses back after down/up", func() bool {
		out := c.on(1, "ip", "-6", "-o", "addr", "show", "dev", "ib0")
		return strings.Contains(out, c.ip6(1)+"/64") && strings.Contains(out, linkLocalOf(t, c.show(1).GID)+"/64")
	})
	c.ping(1, c.ip6(2), 2)
	c.ping(2, c.ip6(1), 2)
	c.on(1, "ping", "-c", "2", "-i", "0.1", "-W", "2", "-M", "do", "-s", "30000", c.ip4(2))

	// Carrier: the underlay goes down, ib0 loses LOWER_UP; it comes back,
	// and so does traffic, by itself.
	lowerUp := func() bool {
		return strings.Contains(c.on(1, "ip", "link", "show", "ib0"), "LOWER_UP")
	}
	c.on(1, "ip", "link", "set", "eth0", "down")
	await(t, 5*time.Second, "ib0 loses its carrier with the underlay", func() bool { return !lowerUp() })
	if out := c.on(1, "ip", "link", "show", "ib0"); !strings.Contains(out, "NO-CARRIER") {
		t.Errorf("ib0 without carrier does not say NO-CARRIER:\n%s", out)
	}
	c.on(1, "ip", "link", "set", "eth0", "up")
	await(t, 5*time.Second, "ib0 gets its carrier back", lowerUp)
	await(t, 30*time.Second, "traffic back after the underlay returned", func() bool {
		_, err := c.try(1, "ping", "-c", "1", "-W", "1", c.ip4(2))
		return err == nil
	})
	c.ping(1, c.ip4(2), 3)
	c.ping(2, c.ip6(1), 3)
	log := c.logOf(1)
	for _, line := range []string{"link MTU changed", "carrier off", "carrier on"} {
		if !strings.Contains(log, line) {
			t.Errorf("h1's log has no %q line", line)
		}
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// logOf returns host k's daemon log.
func (c *cluster) logOf(k int) string {
	c.t.Helper()
	out, err := os.ReadFile(c.tn.LogPath(k))
	if err != nil {
		c.t.Fatal(err)
	}
	return string(out)
}
