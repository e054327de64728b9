package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestUnderlayAppearsLater: a unit started before its network. A daemon
// whose underlay address is not there yet waits for it (one log line),
// comes up when it appears and carries pings; one whose address never
// comes gives up after --underlay-wait with one clear line and a non-zero
// exit, instead of failing at once into systemd's start limit.
func TestUnderlayAppearsLater(t *testing.T) {
	c := newCluster(t, "late", 2)
	c.start(2)
	underlay := c.underlay(1) + "/24"
	c.on(1, "ip", "addr", "del", underlay, "dev", "eth0")
	started := make(chan error, 1)
	go func() { started <- c.tn.Start(1) }()
	awaitLog(t, c.tn.LogPath(1), "waiting for the underlay address", 10*time.Second)
	c.on(1, "ip", "addr", "add", underlay, "dev", "eth0", "nodad")
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	c.ping(1, c.ip4(2), 3)
	c.ping(2, c.ip6(1), 3)
	if log, _ := os.ReadFile(c.tn.LogPath(1)); strings.Count(string(log), "waiting for the underlay address") != 1 {
		t.Errorf("want one line about the wait:\n%s", log)
	}

	// An address that never comes: the bound ends the wait.
	never := fmt.Sprintf("10.%d.0.77", c.net)
	start := time.Now()
	out, err := c.try(1, "timeout", "20", binary, "--underlay", never, "--underlay-wait", "1s", "--ifname", "ib7",
		"--addr", fmt.Sprintf("192.168.%d.77/24", c.net))
	took := time.Since(start)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("daemon on an address that never comes: %v, want exit status 1:\n%s", err, out)
	}
	if !strings.Contains(out, "ipoibd: underlay address "+never+" did not appear on any interface within 1s") {
		t.Errorf("want the reason as the last line:\n%s", out)
	}
	if took > 15*time.Second { // timeout(1) would have ended it at 20
		t.Errorf("gave up after %v, want about 1 s", took)
	}
	if out, err := c.try(1, "ip", "link", "show", "ib7"); err == nil {
		t.Errorf("ib7 stayed behind:\n%s", out)
	}
}

// awaitLog waits until the file at path holds want. The daemon announces
// its wait only in its log, which is read again every 50 ms.
func awaitLog(t *testing.T, path, want string, bound time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(bound); ; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in %s within %v:\n%s", want, path, bound, b)
		}
	}
}
