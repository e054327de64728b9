package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// runBinary runs the test build of ipoibd and returns stdout, stderr and
// the exit status.
func runBinary(t *testing.T, name string, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	return "", "", 0
}

// TestCLIHelp: every way of asking for the whole usage prints it (every
// command and every run and query flag) to stdout and exits 0; a
// command's --help prints its own (TestCommandLine).
func TestCLIHelp(t *testing.T) {
	var want []string
	for _, c := range commands {
		want = append(want, "ipoibd "+c.synopsis)
	}
	var flags []string
	runFlags(&options{}).VisitAll(func(f *pflag.Flag) { flags = append(flags, "--"+f.Name) })
	want = append(want, "-j, --json", "-a, --all", "-w, --wide", "SIGHUP")
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"run", "--help"}, {"run", "-h"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, errOut, code := runBinary(t, binary, args...)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, errOut)
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("usage lacks %q:\n%s", w, out)
				}
			}
			for _, f := range flags {
				if !strings.Contains(out, f+" ") && !strings.Contains(out, f+"[") {
					t.Errorf("usage lacks the run flag %s", f)
				}
			}
		})
	}
}

// TestCLIVersion: --version and version name the module, the VCS revision
// of a stamped build and the Go version.
func TestCLIVersion(t *testing.T) {
	bin := binary
	rev := ""
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		// The test build may be unstamped (GOFLAGS=-buildvcs=false): make a
		// stamped one, as make build does.
		rev = strings.TrimSpace(string(out))
		bin = filepath.Join(t.TempDir(), "ipoibd")
		if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("go build -buildvcs=true: %v\n%s", err, out)
		}
	}
	for _, args := range [][]string{{"--version"}, {"version"}, {"run", "--version"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, errOut, code := runBinary(t, bin, args...)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			for _, w := range []string{"ipoibd github.com/ipoibd/ipoibd ", "revision " + rev, runtime.Version()} {
				if !strings.Contains(out, w) {
					t.Errorf("version %q lacks %q", out, w)
				}
			}
			if strings.Count(out, "\n") != 1 {
				t.Errorf("version is not one line: %q", out)
			}
		})
	}
}

// TestCLIArguments: what the command line cannot mean is refused with one
// line naming the problem, exit status 2 (a usage error), before any
// daemon is asked.
func TestCLIArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"show", "ib7", "ib8"}, `show takes one interface name, got "ib7 ib8"`},
		{[]string{"conn", "-j", "ib7", "extra"}, "conn takes one interface name"},
		{[]string{"show", "--ifname", "ib1", "ib2"}, `interface "ib2" and --ifname "ib1" disagree`},
		{[]string{"neigh", "a/b"}, `"a/b" is not an interface name`},
		{[]string{"stats", "averyverylongname0"}, "is not an interface name"},
		{[]string{"show", "--jsn"}, "unknown flag: --jsn"},
		{[]string{"help", "me"}, "help takes no arguments"},
		{[]string{"version", "x"}, "version takes no arguments"},
		{[]string{"man", "1"}, "man takes no arguments"},
		{[]string{"run", "extra"}, `unexpected argument "extra"`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := runBinary(t, binary, tc.args...)
			if code != exitUsage || out != "" {
				t.Fatalf("exit %d, stdout %q; want %d and nothing", code, out, exitUsage)
			}
			if !strings.HasPrefix(errOut, "ipoibd: ") || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q, want one line with %q", errOut, tc.want)
			}
		})
	}
}

// TestCLIValuesThatDoNotParse: a value that does not parse is a usage
// error (64, as the man page says) in every command, named in one line,
// before any daemon is asked: none serves ib7 here, so a value that
// reached one would exit 3, and one the daemon refused 4.
func TestCLIValuesThatDoNotParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--pkey", "0xzz"}, `"0xzz"`},
		{[]string{"run", "--mode", "fast"}, `"fast"`},
		{[]string{"run", "--mtu", "big"}, `"big"`},
		{[]string{"run", "--addr", "10.0.0.300/24"}, `"10.0.0.300"`},
		{[]string{"show", "ib7", "--ifname"}, "--ifname"},
		{[]string{"neigh", "a/b"}, `"a/b"`},
		{[]string{"conn", "-w=maybe", "ib7"}, `"maybe"`},
		{[]string{"stats", "-a=maybe", "ib7"}, `"maybe"`},
		{[]string{"neigh", "flush", "ib7", "10.40.0.300"}, `"10.40.0.300" is not an IP address`},
		{[]string{"neigh", "flush", "fd40::zz"}, `"fd40::zz" is not an IP address`},
		{[]string{"mode", "ib7", "fast"}, `"fast"`},
		{[]string{"mode", "fast"}, `"fast"`},
		{[]string{"child", "add", "ib7", "0xzz"}, `"0xzz"`},
		{[]string{"child", "add", "ib7", "0x8001", "--addr", "10.0.0.300/24"}, `"10.0.0.300"`},
		{[]string{"child", "add", "ib7", "0x8001", "--mode", "fast"}, `"fast"`},
		{[]string{"child", "add", "ib7", "0x8001", "--mtu", "big"}, `"big"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := runBinary(t, binary, tc.args...)
			if code != exitUsage || out != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d and nothing on stdout", code, out, errOut, exitUsage)
			}
			if !strings.HasPrefix(errOut, "ipoibd: ") || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q, want one line with %q", errOut, tc.want)
			}
		})
	}
}

// TestManPageGenerated: dist/ipoibd.8 is what `ipoibd man` prints (make
// man), and it documents every run flag.
func TestManPageGenerated(t *testing.T) {
	out, errOut, code := runBinary(t, binary, "man")
	if code != 0 || errOut != "" {
		t.Fatalf("ipoibd man: exit %d, stderr %q", code, errOut)
	}
	runFlags(&options{}).VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(out, `\-\-`+strings.ReplaceAll(f.Name, "-", `\-`)+" ") && !strings.Contains(out, `\-\-`+strings.ReplaceAll(f.Name, "-", `\-`)+"\n") {
			t.Errorf("man page lacks --%s", f.Name)
		}
	})
	committed, err := os.ReadFile("../dist/ipoibd.8")
	if err != nil {
		t.Fatal(err)
	}
	if string(committed) != out {
		t.Errorf("dist/ipoibd.8 differs from ipoibd man: run make man")
	}
}
