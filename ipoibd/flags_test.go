package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestOperatorMistakes: every bad flag ends the daemon with one clear line
// on stderr and leaves no interface behind: exit status 2 for a flag that
// does not parse, 1 for one the host or the port refuses.
func TestOperatorMistakes(t *testing.T) {
	c := newCluster(t, "flags", 1)
	// Occupies a name for the "exists" case; on a port of its own, since
	// the underlay address on the default port is each daemon's alone.
	c.start(1, "--ifname", "ibbusy", "--softib-port", "4792")
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error line
		code int
	}{
		{"no underlay", []string{"--addr", "10.1.1.1/24"}, "--underlay is required", exitUsage},
		{"underlay not here", []string{"--underlay", "192.0.2.77", "--underlay-wait", "0"}, "not on any interface", exitStart},
		{"underlay not here in time", []string{"--underlay", "192.0.2.77", "--underlay-wait", "200ms"}, "did not appear on any interface within 200ms", exitStart},
		{"negative underlay wait", []string{"--underlay", c.underlay(1), "--underlay-wait", "-1s"}, "--underlay-wait -1s", exitUsage},
		{"bad underlay", []string{"--underlay", "nonsense"}, "--underlay", exitUsage},
		{"bad mode", []string{"--underlay", c.underlay(1), "--mode", "fast"}, "--mode", exitUsage},
		{"bad policy", []string{"--underlay", c.underlay(1), "--cm-policy", "bsd"}, "--cm-policy", exitUsage},
		{"bad cm modes", []string{"--underlay", c.underlay(1), "--cm-modes", "rd"}, "--cm-modes", exitUsage},
		{"bad pkey", []string{"--underlay", c.underlay(1), "--pkey", "0x8000"}, "P_Key", exitUsage},
		{"bad addr", []string{"--underlay", c.underlay(1), "--addr", "10.1.1.1"}, `--addr "10.1.1.1": no prefix length`, exitUsage},
		{"addr with prefix 0", []string{"--underlay", c.underlay(1), "--addr", "10.33.7.1/0"}, "prefix /0", exitUsage},
		{"multicast addr", []string{"--underlay", c.underlay(1), "--addr", "239.0.0.1/24"}, "a multicast address", exitUsage},
		{"child not in the P_Key table", []string{"--underlay", c.underlay(1), "--child", "8033"}, "P_Key 0x8033 is not in the port's P_Key table [0xffff]", exitStart},
		{"mtu too big", []string{"--underlay", c.underlay(1), "--mtu", "70000"}, "MTU 70000", exitStart},
		{"datagram mtu too big", []string{"--underlay", c.underlay(1), "--mode", "datagram", "--mtu", "9000"}, "MTU 9000 is above the datagram-mode limit 4092", exitStart},
		{"verbs without rdma", []string{"--provider", "verbs", "--device", "mlx5_0"}, "./ipoibd` (needs libibverbs-dev, librdmacm-dev and libibumad-dev)", exitStart},
		{"addr twice", []string{"--underlay", c.underlay(1), "--addr", "10.1.1.1/24", "--addr", "10.1.1.1/24"}, "--addr 10.1.1.1/24 is given twice", exitUsage},
		{"datagram with cm modes", []string{"--underlay", c.underlay(1), "--mode", "datagram", "--cm-modes", "uc"}, "--mode datagram makes no connections", exitUsage},
		{"verbs without a device", []string{"--provider", "verbs"}, "--device is required", exitUsage},
		{"verbs with an underlay", []string{"--provider", "verbs", "--device", "mlx5_0", "--underlay", c.underlay(1)}, "--underlay is for --provider softib", exitUsage},
		{"verbs port out of range", []string{"--provider", "verbs", "--device", "mlx5_0", "--port", "0"}, "--port 0", exitUsage},
		{"netns that does not exist", []string{"--underlay", c.underlay(1), "--netns", "ipoibd-no-such-ns"}, "ipoibd-no-such-ns", exitStart},
		{"kernel CM on softib", []string{"--underlay", c.underlay(1), "--cm", "kernel"}, "--cm kernel is for --provider verbs", exitUsage},
		{"bad cm", []string{"--underlay", c.underlay(1), "--cm", "theirs"}, "--cm \"theirs\"", exitUsage},
		{"bad peers", []string{"--underlay", c.underlay(1), "--peers", "all"}, "--peers \"all\"", exitUsage},
		{"unknown provider", []string{"--provider", "mlx"}, "--provider", exitUsage},
		{"unknown flag", []string{"--fast"}, "unknown flag", exitUsage},
		{"name taken", []string{"--underlay", c.underlay(1), "--ifname", "ibbusy"}, "already", exitStart},
		{"name too long", []string{"--underlay", c.underlay(1), "--ifname", "averyverylongname0"}, "interface name", exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := c.command(1, binary, append([]string{"run", "--ifname", "ibtest"}, tc.args...)...)
			if strings.Contains(strings.Join(tc.args, " "), "--ifname") {
				cmd = c.command(1, binary, append([]string{"run"}, tc.args...)...)
			}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err == nil || !asExit(err, &exit) || exit.ExitCode() != tc.code {
				t.Fatalf("exit %v, want status %d; output:\n%s", err, tc.code, out)
			}
			if strings.Contains(string(out), "connected_mode=") {
				t.Errorf("a start that failed said which connection service it runs:\n%s", out)
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
