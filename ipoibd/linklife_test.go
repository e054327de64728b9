package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runOwn runs ipoibd on host k as the test's own child (not through
// testnet.Start, which reaps it), so that its exit status can be read;
// it returns once the daemon answers `show`.
func (c *cluster) runOwn(k int, flags ...string) (*exec.Cmd, *bytes.Buffer, <-chan error) {
	c.t.Helper()
	args := append([]string{"--underlay", c.underlay(k), "--addr", c.ip4(k) + "/24", "--addr", c.ip6(k) + "/64"}, flags...)
	var out bytes.Buffer
	cmd := c.command(k, binary, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	exited, reaped := make(chan error, 1), make(chan struct{})
	go func() { exited <- cmd.Wait(); close(reaped) }()
	c.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-reaped
	})
	await(c.t, 10*time.Second, "the daemon answers show", func() bool {
		_, err := c.try(k, binary, "show")
		return err == nil
	})
	return cmd, &out, exited
}

// TestDaemonEndsWithItsInterface: `ip link del ib0` under a running daemon
// ends it with one line saying so and a non-zero status (so systemd's
// Restart= applies and the watchdog stops); a deleted child goes alone.
func TestDaemonEndsWithItsInterface(t *testing.T) {
	c := newCluster(t, "linkdel", 2)
	c.start(2)
	_, out, exited := c.runOwn(1, "--softib-pkeys", "0xffff,0x8001")
	c.ping(1, c.ip4(2), 1)

	// A child deleted: the daemon removes it and keeps serving ib0.
	c.on(1, binary, "child", "add", "0x8001")
	c.on(1, "ip", "link", "del", "ib0.8001")
	await(t, 5*time.Second, "the deleted child leaves show", func() bool {
		return !strings.Contains(c.on(1, binary, "show"), "ib0.8001")
	})
	c.ping(1, c.ip4(2), 1)

	c.on(1, "ip", "link", "del", "ib0")
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Errorf("the daemon ended with %v, want a non-zero exit status", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the daemon outlives its deleted interface; its output:\n%s", out)
	}
	log := out.String()
	if n := strings.Count(log, "ib0: the interface was deleted"); n != 1 {
		t.Errorf("%d lines say the interface was deleted, want 1:\n%s", n, log)
	}
	last := strings.TrimSpace(log[strings.LastIndex(strings.TrimSpace(log), "\n")+1:])
	if !strings.HasPrefix(last, "ipoibd: ib0: the interface was deleted") {
		t.Errorf("the last line does not say ib0 was deleted: %q", last)
	}
	if strings.Contains(log, "bad state") {
		t.Errorf("the log still reports the TUN's read error:\n%s", log)
	}
}

// TestSmallMTUsKeepIPv4AndBringIPv6Back: an MTU below IPv6's 1280 leaves
// IPv6 off on the link, as the kernel does, and IPv4 running; when the MTU
// allows IPv6 again, the addresses and the RFC 4391 link-local (the only
// link-local) come back. A daemon may start so: --mtu 1000 (saying which
// addresses wait), and datagram mode on a 1500-octet underlay (UD MTU
// 1020) with IPv4 alone (with an IPv6 address it is refused:
// TestDatagramIPv6OnSmallUnderlayRefused).
func TestSmallMTUsKeepIPv4AndBringIPv6Back(t *testing.T) {
	c := newCluster(t, "smallmtu", 3)
	c.start(1)
	c.start(2, "--mtu", "1000")
	c.on(3, "ip", "link", "set", "eth0", "mtu", "1500")
	c.start(3, "--mode", "datagram", "--addr", c.ip4(3)+"/24")
	for _, k := range []int{2, 3} {
		if m := c.show(k).MTU; m >= 1280 {
			t.Errorf("h%d: MTU %d, want below 1280", k, m)
		}
		c.ping(1, c.ip4(k), 2)
		c.ping(k, c.ip4(1), 2)
	}
	if n := strings.Count(c.logOf(2), "IPv6 left off on this link until its MTU is at least 1280: its IPv6 addresses are added then"); n != 1 {
		t.Errorf("h2: %d lines say IPv6 is left off, want 1", n)
	}
	if !strings.Contains(c.logOf(2), "waiting="+c.ip6(2)+"/64") {
		t.Errorf("h2's log does not name the IPv6 address that waits")
	}

	ipv6Back := func(k int) bool {
		out := c.on(k, "ip", "-6", "-o", "addr", "show", "dev", "ib0")
		return strings.Contains(out, c.ip6(k)+"/64") && strings.Contains(out, linkLocalOf(t, c.show(k).GID)+"/64") &&
			strings.Count(out, "fe80:") == 1
	}
	c.on(1, "ip", "link", "set", "ib0", "mtu", "100")
	c.ping(2, c.ip4(1), 1) // IPv4 at MTU 100
	c.on(1, "ip", "link", "set", "ib0", "mtu", "65520")
	await(t, 5*time.Second, "h1's IPv6 addresses and only its own link-local back", func() bool { return ipv6Back(1) })
	c.on(1, "ip", "link", "set", "ib0", "down")
	c.on(1, "ip", "link", "set", "ib0", "up")
	await(t, 5*time.Second, "the same after down and up", func() bool { return ipv6Back(1) })
	if out := c.on(1, "ip", "-d", "link", "show", "ib0"); !strings.Contains(out, "addrgenmode none") {
		t.Errorf("h1's addrgenmode is not none:\n%s", out)
	}
	c.on(2, "ip", "link", "set", "ib0", "mtu", "65520")
	await(t, 5*time.Second, "h2's IPv6 on once its MTU allows it", func() bool { return ipv6Back(2) })
	c.ping(1, c.ip6(2), 2)
	c.ping(2, c.ip6(1), 2)
}

// TestRenameIsFollowed: `ip link set ib0 name ibx` moves the control
// socket, the logs and the metrics labels to the new name.
func TestRenameIsFollowed(t *testing.T) {
	if _, err := lookTools("curl"); err != nil {
		t.Skip(err)
	}
	c := newCluster(t, "rename", 2)
	const metricsAt = "127.0.0.1:9469"
	c.start(1, "--metrics-listen", metricsAt)
	c.start(2)
	c.ping(1, c.ip4(2), 1)
	// A TUN is renamed while down, as most NICs.
	c.on(1, "ip", "link", "set", "ib0", "down")
	c.on(1, "ip", "link", "set", "ib0", "name", "ibx")
	c.on(1, "ip", "link", "set", "ibx", "up")
	var info struct {
		Name string `json:"ifname"`
	}
	await(t, 5*time.Second, "show ibx answers", func() bool {
		out, err := c.try(1, binary, "show", "ibx", "--json")
		return err == nil && json.Unmarshal([]byte(out), &info) == nil && info.Name == "ibx"
	})
	if out, err := c.try(1, binary, "show", "ib0"); err == nil {
		t.Errorf("show ib0 still answers after the rename:\n%s", out)
	}
	c.ping(1, c.ip4(2), 2)
	c.ping(2, c.ip4(1), 2)
	if err := syscall.Kill(c.pid(1), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	await(t, 5*time.Second, "a log line under the new name", func() bool {
		return strings.Contains(c.logOf(1), "SIGHUP: nothing re-read)\" if=ibx")
	})
	out := c.on(1, "curl", "-sS", "--fail", "--max-time", "5", "http://"+metricsAt+"/metrics")
	if !strings.Contains(out, `interface="ibx"`) || strings.Contains(out, `interface="ib0"`) {
		t.Errorf("the metrics do not label ibx alone:\n%.2000s", out)
	}
}

// TestUnderlayAddressIsTheCarrier: the underlay address deleted under a
// softib daemon turns ib0's carrier off, with a WARN line; put back, the
// carrier and the traffic come back.
func TestUnderlayAddressIsTheCarrier(t *testing.T) {
	c := newCluster(t, "uaddr", 2)
	c.start(1)
	c.start(2)
	c.ping(1, c.ip4(2), 1)
	lowerUp := func() bool {
		return strings.Contains(c.on(1, "ip", "link", "show", "ib0"), "LOWER_UP")
	}
	c.on(1, "ip", "addr", "del", c.underlay(1)+"/24", "dev", "eth0")
	await(t, 5*time.Second, "ib0 loses its carrier with the underlay address", func() bool { return !lowerUp() })
	if log := c.logOf(1); !strings.Contains(log, "level=WARN msg=\"port down: carrier off\"") {
		t.Errorf("no WARN line says the carrier went off:\n%s", log)
	}
	c.on(1, "ip", "addr", "add", c.underlay(1)+"/24", "dev", "eth0")
	await(t, 5*time.Second, "ib0's carrier back with the address", lowerUp)
	await(t, 10*time.Second, "traffic back", func() bool {
		_, err := c.try(1, "ping", "-c", "1", "-W", "1", c.ip4(2))
		return err == nil
	})
	c.ping(2, c.ip4(1), 2)
}

// TestShowLinkState: `show` (JSON and text) gives the kernel's admin
// state, carrier and operstate of the interface, as `ip link` has them,
// through link down and up and a carrier lost with the underlay address.
func TestShowLinkState(t *testing.T) {
	c := newCluster(t, "lstate", 2)
	c.start(1)
	c.start(2)
	for _, tc := range []struct {
		name    string
		do      []string // on h1
		admin   string
		carrier bool
	}{
		{"running", nil, "up", true},
		{"link down", []string{"ip", "link", "set", "ib0", "down"}, "down", false},
		{"link up", []string{"ip", "link", "set", "ib0", "up"}, "up", true},
		{"underlay address gone", []string{"ip", "addr", "del", c.underlay(1) + "/24", "dev", "eth0"}, "up", false},
		{"underlay address back", []string{"ip", "addr", "add", c.underlay(1) + "/24", "dev", "eth0"}, "up", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := c.forTest(t)
			if tc.do != nil {
				c.on(1, tc.do...)
			}
			// The kernel's view, which show must repeat (operstate as
			// the kernel has it: a TUN's is "unknown" until its carrier
			// first changes).
			type state struct {
				admin     string
				carrier   bool
				operstate string
			}
			kernel := func() state {
				var links []struct {
					Flags     []string `json:"flags"`
					OperState string   `json:"operstate"`
				}
				out := c.on(1, "ip", "-j", "link", "show", "ib0")
				if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
					t.Fatalf("ip -j link show ib0: %v\n%s", err, out)
				}
				s := state{admin: "down", carrier: slices.Contains(links[0].Flags, "LOWER_UP"), operstate: strings.ToLower(links[0].OperState)}
				if slices.Contains(links[0].Flags, "UP") {
					s.admin = "up"
				}
				return s
			}
			var k, shown state
			await(t, 5*time.Second, tc.name+": the kernel's state, and show's the same", func() bool {
				k = kernel()
				info := c.show(1)
				shown = state{info.AdminState, info.Carrier, info.OperState}
				return k.admin == tc.admin && k.carrier == tc.carrier && shown == k
			})
			t.Logf("%+v", shown)
			carrier := map[bool]string{true: "on", false: "off"}[k.carrier]
			want := fmt.Sprintf("admin %s, carrier %s, operstate %s", k.admin, carrier, k.operstate)
			if out := c.on(1, binary, "show"); !strings.Contains(out, want) {
				t.Errorf("show: want %q:\n%s", want, out)
			}
		})
	}
}
