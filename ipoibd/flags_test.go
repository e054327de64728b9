package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/ipoib"
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
		{"underlay not here", []string{"--underlay", "192.0.2.77"}, "not on any interface"},
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

// TestChooseCM: which connection service runs and whether connected mode
// is advertised, for every combination that matters; never the kernel CM
// advertising connected mode unless the operator said every peer is
// ipoibd.
func TestChooseCM(t *testing.T) {
	loaded := func() (bool, []string) { return true, []string{"rdma_cm", "ib_ipoib"} }
	unloaded := func() (bool, []string) { return false, nil }
	for _, tc := range []struct {
		name, provider, cm, peers string
		mode                      ipoib.Mode
		cmLoaded                  func() (bool, []string)
		service                   string
		advertise                 bool
		err                       string // in the error, or in Why
	}{
		{"softib default", "softib", "auto", "any", ipoib.Connected, loaded, cmOwn, true, "software adapter"},
		{"softib own", "softib", "own", "any", ipoib.Connected, loaded, cmOwn, true, ""},
		{"softib kernel", "softib", "kernel", "any", ipoib.Connected, unloaded, "", false, "--cm kernel is for --provider verbs"},
		{"verbs auto, ib_cm unloaded", "verbs", "auto", "any", ipoib.Connected, unloaded, cmOwn, true, "ib_cm is not loaded"},
		{"verbs auto, ib_cm loaded", "verbs", "auto", "any", ipoib.Connected, loaded, cmKernel, false, "ib_cm is loaded (used by rdma_cm, ib_ipoib)"},
		{"verbs auto, ib_cm loaded, ipoibd peers", "verbs", "auto", "ipoibd-only", ipoib.Connected, loaded, cmKernel, true, "ipoibd-only"},
		{"verbs own, ib_cm unloaded", "verbs", "own", "any", ipoib.Connected, unloaded, cmOwn, true, "ib_umad"},
		{"verbs own, ib_cm loaded", "verbs", "own", "any", ipoib.Connected, loaded, "", false, "ib_cm is loaded (used by rdma_cm, ib_ipoib)"},
		{"verbs kernel", "verbs", "kernel", "any", ipoib.Connected, unloaded, cmKernel, false, "datagram only"},
		{"verbs kernel, ipoibd peers", "verbs", "kernel", "ipoibd-only", ipoib.Connected, unloaded, cmKernel, true, "--peers ipoibd-only"},
		{"verbs datagram", "verbs", "kernel", "any", ipoib.Datagram, loaded, "", false, "--mode datagram"},
		{"bad cm", "verbs", "kernel-ish", "any", ipoib.Connected, loaded, "", false, "--cm \"kernel-ish\""},
		{"bad peers", "verbs", "auto", "some", ipoib.Connected, loaded, "", false, "--peers \"some\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := chooseCM(tc.provider, tc.cm, tc.peers, tc.mode, tc.cmLoaded)
			if err != nil {
				if tc.service != "" || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v; want service %q (or an error with %q)", err, tc.service, tc.err)
				}
				return
			}
			if got.Service != tc.service || got.Advertise != tc.advertise || !strings.Contains(got.Why, tc.err) {
				t.Errorf("%+v; want service %q advertise %v, why with %q", got, tc.service, tc.advertise, tc.err)
			}
		})
	}
}
