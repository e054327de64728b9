package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

var routeMTU = regexp.MustCompile(`mtu (\d+)`)

// routeGetMTU returns the MTU `ip route get` reports from host k to dst.
func routeGetMTU(t *testing.T, c *cluster, k int, dst string) string {
	t.Helper()
	out := c.on(k, "ip", "route", "get", dst)
	m := routeMTU.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("h%d: ip route get %s shows no MTU:\n%s", k, dst, out)
	}
	return m[1]
}

// TestPerDestinationMTU checks what the kernel learns from the daemon: a
// connected peer gets 65520 (the link's MTU, no host route), a
// datagram-only peer the UD MTU (a host route marked proto 105), an oversize DF packet draws ICMP with the UD MTU, and
// a route the operator set by hand is left alone.
func TestPerDestinationMTU(t *testing.T) {
	if _, err := lookTools("tracepath"); err != nil {
		t.Skip(err)
	}
	c := newCluster(t, "mtu", 3)
	c.start(1)
	c.start(2)
	c.start(3, "--mode", "datagram")
	// The operator pins h2's IPv6 path to 9000 before the daemon learns it.
	c.on(1, "ip", "-6", "route", "add", c.ip6(2)+"/128", "dev", "ib0", "mtu", "9000")
	udMTU := fmt.Sprint(c.show(1).UDMTU)

	// Oversize with DF to the datagram-only host, before it is resolved:
	// the daemon answers with ICMP carrying the UD MTU.
	for _, dst := range []string{c.ip4(3), c.ip6(3)} {
		out, _ := c.try(1, "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "8000", dst)
		if !strings.Contains(out, "mtu = "+udMTU) && !strings.Contains(out, "mtu="+udMTU) {
			t.Errorf("oversize DF ping to %s: want an ICMP error with mtu %s, got:\n%s", dst, udMTU, out)
		}
	}
	if s := c.stats(1); s["tx_icmp_too_big"] < 2 {
		t.Errorf("tx_icmp_too_big = %d, want 2", s["tx_icmp_too_big"])
	}
	c.ping(1, c.ip4(2), 1)
	c.ping(1, c.ip6(2), 1)

	// The connected peer's MTU is the link's: no host route for it.
	if out := c.on(1, "ip", "route", "show", c.ip4(2), "proto", "105"); strings.TrimSpace(out) != "" {
		t.Errorf("host route to %s although its MTU is the link's: %s", c.ip4(2), out)
	}
	for _, tc := range []struct {
		dst, want string
	}{
		{c.ip4(3), udMTU},
		{c.ip6(3), udMTU},
		{c.ip6(2), "9000"}, // the operator's
	} {
		if got := routeGetMTU(t, c, 1, tc.dst); got != tc.want {
			t.Errorf("ip route get %s: mtu %s, want %s", tc.dst, got, tc.want)
		}
	}
	routes := c.on(1, "ip", "-6", "route", "show", c.ip6(2)+"/128")
	if strings.Contains(routes, "proto 105") || !strings.Contains(routes, "mtu 9000") {
		t.Errorf("the operator's route was changed: %s", routes)
	}
	for _, tc := range []struct {
		dst, want string
	}{
		{c.ip4(2), "pmtu 65520"},
		{c.ip4(3), "pmtu " + udMTU},
	} {
		if out := c.on(1, "tracepath", "-n", tc.dst); !strings.Contains(out, tc.want) {
			t.Errorf("tracepath %s: want %q in:\n%s", tc.dst, tc.want, out)
		}
	}
	// Big packets flow to the connected peer without fragmenting.
	c.on(1, "ping", "-c", "2", "-i", "0.1", "-M", "do", "-s", "60000", c.ip4(2))

	// Our routes go with the daemon.
	c.stop(1, "TERM")
	if out, _ := c.try(1, "ip", "route", "show", "proto", "105"); strings.TrimSpace(out) != "" {
		t.Errorf("routes left after exit:\n%s", out)
	}
}
