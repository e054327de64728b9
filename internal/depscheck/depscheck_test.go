package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const root = "../.."

// TestHostDeps: every command (and cgo header) the host scripts, the
// Makefile and the Go code use comes from a package that is on a fresh
// machine or that scripts/deps.sh installs; what make demo and make bench
// use, from one that `deps.sh runtime` installs. It runs after deps.sh (make
// test runs it first), so a command that is not here at all is one deps.sh
// does not install.
func TestHostDeps(t *testing.T) {
	env := newDepsEnv(t)
	for _, p := range env.problems(env.all, env.runtime) {
		t.Error(p)
	}
	for _, p := range env.all {
		if !env.fresh[p] && !env.owning[p] {
			t.Logf("note: scripts/deps.sh installs %s, which owns nothing the sources use", p)
		}
	}
}

// TestOmissionCaught: the check fails without any one package deps.sh
// installs for a command or header in use (such as kmod for depmod, which
// the rxe test bed calls: CI once lacked it).
func TestOmissionCaught(t *testing.T) {
	env := newDepsEnv(t)
	before := env.problems(env.all, env.runtime)
	tried := 0
	for _, p := range env.all {
		if env.fresh[p] || !env.owning[p] {
			continue
		}
		tried++
		without := slices.DeleteFunc(slices.Clone(env.all), func(q string) bool { return q == p })
		got := slices.DeleteFunc(env.problems(without, env.runtime), func(q string) bool { return slices.Contains(before, q) })
		if len(got) == 0 {
			t.Errorf("with %s left out of deps.sh the check finds nothing more wrong", p)
		} else {
			t.Logf("without %s: %s", p, got[0])
		}
	}
	if tried == 0 {
		t.Fatal("no package of deps.sh owns a command in use: is the scan blind?")
	}
}

// depsEnv is this machine's view: where each command and header in use
// is, which packages own it, and the package lists to judge by.
type depsEnv struct {
	t            *testing.T
	uses         []summary
	owners       map[string][]string // command or header -> packages
	missing      map[string]bool     // not on this machine
	probe        map[string]string   // what deps.sh's want looks for: the command, or the header's path
	fresh        map[string]bool
	all, runtime []string        // the packages of deps.sh and deps.sh runtime
	owning       map[string]bool // packages owning something in use
}

func newDepsEnv(t *testing.T) *depsEnv {
	t.Helper()
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian machine (no dpkg-query)")
	}
	uses, errs, err := scan(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Error(e)
	}
	e := &depsEnv{t: t, owners: map[string][]string{}, missing: map[string]bool{}, probe: map[string]string{}, owning: map[string]bool{}}
	for _, s := range summarize(uses) {
		if _, ok := given[s.name]; !ok || s.kind != "command" {
			e.uses = append(e.uses, s)
		}
	}
	e.fresh = readFresh(t)
	e.all, e.runtime = depsList(t, "all"), depsList(t, "runtime")

	// Each use's file, with its /usr-merged twin and what it links to:
	// dpkg knows a file by the path its package ships it at.
	paths := map[string][]string{}
	var all []string
	for _, s := range e.uses {
		p, err := locate(s)
		if err != nil {
			e.missing[s.kind+" "+s.name] = true
			continue
		}
		e.probe[s.kind+" "+s.name] = s.name
		if s.kind == "header" {
			e.probe[s.kind+" "+s.name] = p
		}
		for _, c := range candidates(p) {
			paths[s.kind+" "+s.name] = append(paths[s.kind+" "+s.name], c)
			all = append(all, c)
		}
	}
	owner := dpkgOwners(all)
	for k, ps := range paths {
		for _, p := range ps {
			for _, pkg := range owner[p] {
				if !slices.Contains(e.owners[k], pkg) {
					e.owners[k] = append(e.owners[k], pkg)
				}
				e.owning[pkg] = true
			}
		}
	}
	return e
}

// problems judges the uses against deps.sh's packages all and runtime.
func (e *depsEnv) problems(all, runtime []string) []string {
	var out []string
	for _, s := range e.uses {
		k := s.kind + " " + s.name
		what := fmt.Sprintf("%s %s (%s)", s.kind, s.name, s.where)
		pkgs := e.owners[k]
		switch {
		case e.missing[k]:
			out = append(out, fmt.Sprintf("%s is not on this machine: scripts/deps.sh must install it", what))
		case len(pkgs) == 0:
			out = append(out, fmt.Sprintf("%s: no Debian package owns it here, so no fresh machine will have it", what))
		case !slices.ContainsFunc(pkgs, func(p string) bool { return e.fresh[p] || slices.Contains(all, p) }):
			out = append(out, fmt.Sprintf("%s comes from %s, which is neither on a fresh machine (scripts/fresh-machine-packages.txt) "+
				"nor installed by scripts/deps.sh: add `want %s %s` there", what, strings.Join(pkgs, " or "), pkgs[0], e.probe[k]))
		case s.runtime && !slices.ContainsFunc(pkgs, func(p string) bool { return e.fresh[p] || slices.Contains(runtime, p) }):
			out = append(out, fmt.Sprintf("%s, used by make demo or make bench, comes from %s, which `scripts/deps.sh runtime` does not install",
				what, strings.Join(pkgs, " or ")))
		}
	}
	return out
}

// locate finds a command as root's shell would (with the sbin directories
// also for other users), or a header as gcc would.
func locate(s summary) (string, error) {
	var dirs []string
	name := s.name
	if s.kind == "command" {
		if filepath.IsAbs(name) {
			return name, isFile(name, true)
		}
		dirs = append(filepath.SplitList(os.Getenv("PATH")), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
	} else {
		dirs = []string{"/usr/local/include"}
		if out, err := exec.Command("gcc", "-print-multiarch").Output(); err == nil {
			dirs = append(dirs, "/usr/include/"+strings.TrimSpace(string(out)))
		}
		dirs = append(dirs, "/usr/include")
		if out, err := exec.Command("gcc", "-print-file-name=include").Output(); err == nil {
			dirs = append(dirs, strings.TrimSpace(string(out)))
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if isFile(p, s.kind == "command") == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s %s not found", s.kind, name)
}

func isFile(p string, executable bool) error {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return err
	case fi.IsDir() || executable && fi.Mode()&0o111 == 0:
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// candidates: p and the file it links to, each also under its twin name
// across the /usr merge (/usr/sbin/ip is the /sbin/ip of iproute2).
func candidates(p string) []string {
	ps := []string{p}
	if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
		ps = append(ps, r)
	}
	for _, q := range ps {
		if rest, ok := strings.CutPrefix(q, "/usr/"); ok {
			ps = append(ps, "/"+rest)
		} else {
			ps = append(ps, "/usr"+q)
		}
	}
	return ps
}

// dpkgOwners maps each path to the packages that ship it.
func dpkgOwners(paths []string) map[string][]string {
	m := map[string][]string{}
	if len(paths) == 0 {
		return m
	}
	// Exit status 1 when a path has no owner: the others are still listed.
	out, _ := exec.Command("dpkg-query", append([]string{"-S"}, paths...)...).Output()
	for _, l := range strings.Split(string(out), "\n") {
		pkgs, p, ok := strings.Cut(l, ": ")
		if !ok || strings.HasPrefix(l, "diversion ") {
			continue
		}
		for _, pkg := range strings.Split(pkgs, ", ") {
			pkg, _, _ = strings.Cut(pkg, ":") // libc6-dev:amd64
			m[p] = append(m[p], pkg)
		}
	}
	return m
}

func readFresh(t *testing.T) map[string]bool {
	f, err := os.Open(filepath.Join(root, "scripts", "fresh-machine-packages.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		l, _, _ = strings.Cut(l, ":")
		m[l] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// depsList: the packages `deps.sh MODE` is responsible for.
// The runtime list is IB=1's, a superset: make demo IB=1 runs the demo
// on an ibsim subnet after `IB=1 deps.sh runtime`.
func depsList(t *testing.T, mode string) []string {
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "deps.sh"), mode, "--list")
	cmd.Env = append(os.Environ(), "IB=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("deps.sh %s --list: %v", mode, err)
	}
	return strings.Fields(string(out))
}
