// Package dist holds no code: its tests run the real configuration tools on
// the recipes shipped here (README, "Configuration tools"), without booting
// anything. dist/networkd/ib0.network and the hand-off files
// (networkd/ib0-unmanaged.network, NetworkManager/ipoibd-unmanaged.conf) are
// judged by the tools running in the test bed's systemd boot instead
// (scripts/testbed.systemd.d).
package dist

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// settings reads systemd INI text (a .network file, a drop-in, the output of
// systemd-analyze cat-config) as "[Section] Key=Value" lines, sorted,
// comments and blank lines left out.
func settings(text string) []string {
	var out []string
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "", line[0] == '#', line[0] == ';':
		case line[0] == '[':
			section = line
		default:
			k, v, _ := strings.Cut(line, "=")
			out = append(out, section+" "+strings.TrimSpace(k)+"="+strings.TrimSpace(v))
		}
	}
	slices.Sort(out)
	return out
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dropInRe finds, in the netplan recipe's header, the drop-in it tells users
// to add: "# Add the drop-in PATH:" and the indented comment lines under it.
var dropInRe = regexp.MustCompile(`(?m)^# Add the drop-in (/\S+):\n((?:#   .*\n)+)`)

// TestNetplanRecipe: netplan generate turns dist/netplan/60-ipoibd-ib0.yaml
// into the .network file its header names, and that file with the drop-in
// the header gives says what dist/networkd/ib0.network says, setting for
// setting (systemd-analyze cat-config merges them as networkd does).
func TestNetplanRecipe(t *testing.T) {
	netplan, err := exec.LookPath("netplan")
	if err != nil {
		t.Skip("no netplan (Debian package netplan.io; scripts/deps.sh installs it)")
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze (Debian package systemd; scripts/deps.sh installs it)")
	}
	yaml := readFile(t, "netplan/60-ipoibd-ib0.yaml")
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/netplan"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Mode 0600, as the header says: netplan warns about a readable one.
	if err := os.WriteFile(filepath.Join(root, "etc/netplan/60-ipoibd-ib0.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(netplan, "generate", "--root-dir", root).CombinedOutput()
	if err != nil {
		t.Fatalf("netplan generate: %v\n%s", err, out)
	}
	if len(out) > 0 {
		t.Errorf("netplan generate warned:\n%s", out)
	}

	const generated = "/run/systemd/network/10-netplan-ib0.network"
	if !strings.Contains(yaml, "netplan writes\n# "+generated) {
		t.Errorf("the yaml's header does not name %s, the file netplan writes", generated)
	}
	got := settings(readFile(t, filepath.Join(root, generated)))
	want := settings(readFile(t, "networkd/ib0.network"))
	// netplan cannot say the generation mode: the one setting the drop-in adds.
	const genMode = "[Network] IPv6LinkLocalAddressGenerationMode=none"
	if !slices.Contains(want, genMode) {
		t.Fatalf("networkd/ib0.network lacks %q", genMode)
	}
	wantNetplan := slices.DeleteFunc(slices.Clone(want), func(s string) bool { return s == genMode })
	if !slices.Equal(got, wantNetplan) {
		t.Errorf("netplan wrote\n  %s\nwant networkd/ib0.network without the generation mode:\n  %s",
			strings.Join(got, "\n  "), strings.Join(wantNetplan, "\n  "))
	}

	m := dropInRe.FindStringSubmatch(yaml)
	if m == nil {
		t.Fatal("the yaml's header gives no drop-in (# Add the drop-in PATH: and #   lines)")
	}
	dropIn := strings.ReplaceAll(m[2], "#   ", "")
	if !strings.HasPrefix(m[1], "/etc/systemd/network/10-netplan-ib0.network.d/") || !strings.HasSuffix(m[1], ".conf") {
		t.Errorf("drop-in %s is not a .conf in the generated file's .network.d", m[1])
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(m[1])), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, m[1]), []byte(dropIn), 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := exec.Command(analyze, "--root="+root, "cat-config", "systemd/network/10-netplan-ib0.network").CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze cat-config: %v\n%s", err, cat)
	}
	if !strings.Contains(string(cat), "# "+filepath.Join(root, m[1])+"\n") {
		t.Errorf("systemd does not read the drop-in %s:\n%s", m[1], cat)
	}
	if merged := settings(string(cat)); !slices.Equal(merged, want) {
		t.Errorf("netplan's file with the drop-in says\n  %s\nwant networkd/ib0.network's\n  %s",
			strings.Join(merged, "\n  "), strings.Join(want, "\n  "))
	}
}
