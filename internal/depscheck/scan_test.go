package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func names(uses []use) []string {
	var out []string
	for _, u := range uses {
		if !slices.Contains(out, u.name) {
			out = append(out, u.name)
		}
	}
	slices.Sort(out)
	return out
}

// TestScanScript: the commands the shell scanner finds in what our
// scripts write, and what it must not take for a command.
func TestScanScript(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"ip link add a type veth\necho hi | grep -q h && sed s/x/y/ || true", "grep ip sed"},
		{`x=$(dpkg-query -W "$(basename "$f")") y=1 cpio -o`, "basename cpio dpkg-query"},
		{"for f in $(ip netns list | awk '{print $1}'); do rm \"$f\"; done", "awk ip rm"},
		{"case $m in\nrun | prepare) depmod -a ;;\n*) echo \"no $m\" ;;\nesac\nmodprobe x", "depmod modprobe"},
		{"case $m in up) a ;; down) b\nesac", "a b"},
		{"if [[ \" $* \" != *\" --addr \"* && -n $x ]]; then jq .; fi", "jq"},
		{"for ((k = 1; k <= n; k++)); do sleep 1; done; ((n > 0)) && tail -n1", "sleep tail"},
		{"die() { echo \"$*\" >&2; exit 1; }\ndie now\nflock 9 2>/dev/null", "flock"},
		{"cat >/x <<'EOF'\nibv_rc_pingpong -d rxe0\nEOF\nchmod 755 /x", "cat chmod"},
		{"nft -f - <<-EOF\n\tmod $((p * 10)) $(date +%s)\n\tEOF\nfindmnt", "date findmnt nft"},
		{"while read -r l; do :; done < <(tail -f \"$log\") 2>&1", "tail"},
		{"timeout -k 10 \"$T\" qemu-system-x86_64 -m 2G\nexec ip netns exec \"$h\" \"$@\"", "ip qemu-system-x86_64 timeout"},
		{"trap 'rm -rf \"$d\"; umount -l /x' EXIT\n\"$GO\" build ./...", "rm umount"},
		{"need=(a b $(uname -r))\nlocal x=$(nproc)", "nproc uname"},
		{"on() { \"$testnet\" exec \"$name\" \"$@\"; }\non 1 ping -c 1 x\n\"$testnet\" exec \"$name\" 2 env A=1 wireguard-go -f wg0", "env ping wireguard-go"},
		{"bin/testnet exec demo 1 tracepath x\nscripts/cluster.sh exec demo 2 jq .\n\"$testnet\" down demo", "jq tracepath"},
		{"command -v tshark >/dev/null || apt-get install tshark", "apt-get"},
		{"sed 's/)/(/' x # a comment with ls in it\n`whoami`", "sed whoami"},
		{"printf '%s' \"${x:-$(hostname)}\" | sha256sum | cut -c1-16", "cut hostname sha256sum"},
		{"x=\"a\nb\" mkdir -p \"$d\"\nbin/ipoibd show; scripts/cluster.sh down x", "mkdir"},
	} {
		uses, errs := scanScript("t.sh", c.src, 1)
		if got := strings.Join(names(uses), " "); got != c.want || len(errs) > 0 {
			t.Errorf("%q:\n got %q %v\nwant %q", c.src, got, errs, c.want)
		}
	}
}

// TestScanScriptWrapper: a function that runs its arguments is reported
// unless it is a known runner.
func TestScanScriptWrapper(t *testing.T) {
	_, errs := scanScript("t.sh", "inns() { ip netns exec x \"$@\"; }\ninns ping\n", 1)
	if len(errs) != 1 || !strings.Contains(errs[0], "inns") {
		t.Errorf("errs %q, want one about inns", errs)
	}
}

// TestScanGo: the commands found in exec.Command and the runners' calls.
func TestScanGo(t *testing.T) {
	src := `package x

import (
	"os/exec"
	"testing"
)

/*
#include <infiniband/verbs.h>
*/
import "C"

func f(t *testing.T, c *cluster, set string) {
	tshark, _ := exec.LookPath("nft")
	exec.Command("ip", append([]string{"netns", "exec", "h1"}, "ping", "-c", "1")...).Run()
	exec.Command("ip", "netns", "exec", "h1", "setpriv", "--inh-caps="+set, "iperf3", "-s").Run()
	exec.Command(tshark, "-r", "x").Run()
	c.on(1, "timeout", "10", "tracepath", "x")
	c.on(1, "sh", "-c", "echo hi | socat - UDP:"+addr)
	c.command(1, "dumpcap", "-i", "eth0")
	tn.Command(2, "iperf3", "-s")
	nsCommand("h1-br", "tcpdump", "-i", "br0")
	lookTools("jq", "curl")
}

func inns(args ...string) { exec.Command("ip", append([]string{"netns", "exec", "x"}, args...)...).Run() }
func ipIn(args ...string) { exec.Command("ip", append([]string{"-n", "x"}, args...)...).Run() }
`
	uses, errs, err := scanGo("x.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := "curl dumpcap gcc infiniband/verbs.h ip iperf3 jq nft ping setpriv sh socat tcpdump timeout tracepath"
	if got := strings.Join(names(uses), " "); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if len(errs) != 1 || !strings.Contains(errs[0], "inns") {
		t.Errorf("errs %q, want one about inns (ipIn runs only ip)", errs)
	}
}

// TestRuntimeGo: what internal/testnet runs for the demo and the bench
// (ip, nft) counts as their runtime; what its tests run does not.
func TestRuntimeGo(t *testing.T) {
	uses, _, err := scan(root)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, u := range uses {
		if !strings.HasPrefix(u.where, "internal/testnet/") {
			continue
		}
		test := strings.Contains(u.where, "_test.go:")
		if u.runtime == test {
			t.Errorf("%s %s at %s: runtime %v", u.kind, u.name, u.where, u.runtime)
		}
		if u.runtime {
			seen[u.name] = true
		}
	}
	for _, want := range []string{"ip", "nft"} {
		if !seen[want] {
			t.Errorf("internal/testnet's %s is not found as a runtime use (seen %v)", want, seen)
		}
	}
}

// TestScanMakefile: recipes, with make's own variables unknown.
func TestScanMakefile(t *testing.T) {
	src := "x: y\n\t$(GO) build ./...\n\t@mkdir -p $(dir $(UNIT))\n\tsed 's|a|$(B)|' x >$@\n\tif command -v systemctl >/dev/null; then \\\n\t\tsystemctl daemon-reload; fi\n"
	uses, _ := scanMakefile("Makefile", src)
	if got := strings.Join(names(uses), " "); got != "mkdir sed systemctl" {
		t.Errorf("got %q", got)
	}
}

// TestParseShellCutShort: the scanner ends on any prefix of our scripts
// (unclosed quotes, substitutions, heredocs) without a panic.
func TestParseShellCutShort(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(root, "scripts", "*", "*.sh"))
	more, _ := filepath.Glob(filepath.Join(root, "scripts", "*.sh"))
	for _, f := range append(files, more...) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(src); i += 23 {
			parseShell(string(src[:i]), 1)
		}
	}
}
