package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOperatorMistakes: every bad flag ends the daemon with one clear line
// on stderr and exit status 1, and leaves no interface behind.
func TestOperatorMistakes(t *testing.T) {
	c := newCluster(t, "flags", 1)
	// Occupies a name for the "exists" case; on a port of its own, since
	// the underlay address on the default port is each daemon's alone.
	c.start(1, "--ifname", "ibbusy", "--softib-port", "4792")
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error line
	}{
		{"no underlay", []string{"--addr", "10.1.1.1/24"}, "--underlay is required"},
		{"underlay not here", []string{"--underlay", "192.0.2.77", "--underlay-wait", "0"}, "not on any interface"},
		{"underlay not here in time", []string{"--underlay", "192.0.2.77", "--underlay-wait", "200ms"}, "did not appear on any interface within 200ms"},
		{"negative underlay wait", []string{"--underlay", c.underlay(1), "--underlay-wait", "-1s"}, "--underlay-wait -1s"},
		{"bad underlay", []string{"--underlay", "nonsense"}, "--underlay"},
		{"bad mode", []string{"--underlay", c.underlay(1), "--mode", "fast"}, "--mode"},
		{"bad policy", []string{"--underlay", c.underlay(1), "--cm-policy", "bsd"}, "--cm-policy"},
		{"bad cm modes", []string{"--underlay", c.underlay(1), "--cm-modes", "rd"}, "--cm-modes"},
		{"bad pkey", []string{"--underlay", c.underlay(1), "--pkey", "0x8000"}, "P_Key"},
		{"bad addr", []string{"--underlay", c.underlay(1), "--addr", "10.1.1.1"}, "--addr"},
		{"mtu too big", []string{"--underlay", c.underlay(1), "--mtu", "70000"}, "MTU 70000"},
		{"datagram mtu too big", []string{"--underlay", c.underlay(1), "--mode", "datagram", "--mtu", "9000"}, "MTU 9000"},
		{"verbs without rdma", []string{"--provider", "verbs", "--device", "mlx5_0"}, "-tags rdma"},
		{"verbs without a device", []string{"--provider", "verbs"}, "--device is required"},
		{"verbs with an underlay", []string{"--provider", "verbs", "--device", "mlx5_0", "--underlay", c.underlay(1)}, "--underlay is for --provider softib"},
		{"verbs port out of range", []string{"--provider", "verbs", "--device", "mlx5_0", "--port", "0"}, "--port 0"},
		{"netns that does not exist", []string{"--underlay", c.underlay(1), "--netns", "ipoibd-no-such-ns"}, "ipoibd-no-such-ns"},
		{"kernel CM on softib", []string{"--underlay", c.underlay(1), "--cm", "kernel"}, "--cm kernel is for --provider verbs"},
		{"bad cm", []string{"--underlay", c.underlay(1), "--cm", "theirs"}, "--cm \"theirs\""},
		{"bad peers", []string{"--underlay", c.underlay(1), "--peers", "all"}, "--peers \"all\""},
		{"unknown provider", []string{"--provider", "mlx"}, "--provider"},
		{"unknown flag", []string{"--fast"}, "unknown flag"},
		{"name taken", []string{"--underlay", c.underlay(1), "--ifname", "ibbusy"}, "already"},
		{"name too long", []string{"--underlay", c.underlay(1), "--ifname", "averyverylongname0"}, "interface name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := c.command(1, binary, append([]string{"run", "--ifname", "ibtest"}, tc.args...)...)
			if strings.Contains(strings.Join(tc.args, " "), "--ifname") {
				cmd = c.command(1, binary, append([]string{"run"}, tc.args...)...)
			}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err == nil || !asExit(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit %v, want status 1; output:\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "ipoibd: ") || !strings.Contains(last, tc.want) {
				t.Errorf("error line %q, want it to mention %q", last, tc.want)
			}
			if links := c.on(1, "ip", "-br", "link"); strings.Contains(links, "ibtest") {
				t.Errorf("interface left behind:\n%s", links)
			}
		})
	}
}

func asExit(err error, exit **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*exit = e
	return ok
}
