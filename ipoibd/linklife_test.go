package main

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
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
