package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ipoib"
)

// TestInterfaceInAnotherNetns runs the daemon in h1's namespace (where its
// underlay is) with --netns putting the interface in a separate one, as
// containers and the verbs test bed use it: traffic, the control socket and
// the kernel's multicast groups all follow the interface there.
func TestInterfaceInAnotherNetns(t *testing.T) {
	c := newCluster(t, "netns", 2)
	app := fmt.Sprintf("ipoibd-app%d", c.net)
	_ = exec.Command("ip", "netns", "del", app).Run() // a leftover of an interrupted run
	if out, err := exec.Command("ip", "netns", "add", app).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", app, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", app).Run() })
	inApp := func(args ...string) (string, error) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", app}, args...)...).CombinedOutput()
		return string(out), err
	}

	c.start(1, "--netns", app)
	c.start(2)
	if out, err := c.try(1, "ip", "link", "show", "ib0"); err == nil {
		t.Errorf("ib0 is in the daemon's namespace too:\n%s", out)
	}
	if out, err := inApp("ping", "-c", "2", "-i", "0.1", "-W", "2", c.ip4(2)); err != nil {
		t.Fatalf("ping from %s: %v\n%s", app, err, out)
	}
	if out, err := inApp("ping", "-c", "2", "-i", "0.1", "-W", "2", c.ip6(2)); err != nil {
		t.Fatalf("ping6 from %s: %v\n%s", app, err, out)
	}
	c.ping(2, c.ip4(1), 2)
	// The kernel joins 224.0.0.1 on every IPv4 interface; the daemon must
	// read that from the interface's namespace (it syncs once a second).
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := inApp(binary, "show", "--json")
		if err != nil {
			t.Fatalf("ipoibd show in %s: %v\n%s", app, err, out)
		}
		var info ipoib.Info
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			t.Fatalf("ipoibd show --json: %v\n%s", err, out)
		}
		// The link's state is read in the interface's namespace too.
		if info.AdminState != "up" || !info.Carrier {
			t.Fatalf("show in %s: admin_state %q carrier %v, want up and on", app, info.AdminState, info.Carrier)
		}
		if slices.Contains(info.Groups, "224.0.0.1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("groups %v after 10 s: the kernel's 224.0.0.1 was not picked up in %s", info.Groups, app)
		}
		time.Sleep(100 * time.Millisecond) // polling the daemon's state; it announces nothing
	}
	if out, err := c.try(1, binary, "show"); err == nil || !strings.Contains(out, "no ipoibd serves") {
		t.Errorf("ipoibd show in the daemon's namespace found an interface that lives elsewhere (err %v):\n%s", err, out)
	}
}
