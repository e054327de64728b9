package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// use is one command (or C header) the sources need on the host.
type use struct {
	kind    string // "command" or "header"
	name    string
	where   string // file:line
	runtime bool   // also needed by make demo and make bench, which run deps.sh runtime
}

// given are commands no package of ours provides.
var given = map[string]string{
	"go":    "Go's toolchain comes from go.dev, not apt",
	"gofmt": "part of Go's toolchain",
}

// runtimeScripts run after `deps.sh runtime` (make demo, make bench).
var runtimeScripts = map[string]bool{"scripts/demo.sh": true, "scripts/bench.sh": true, "scripts/cluster.sh": true}

// runtimeGo are the Go packages those scripts run (bin/testnet builds the
// hosts of the demo and the bench): what their non-test code calls must
// come from `deps.sh runtime` too.
var runtimeGo = map[string]bool{"internal/testnet": true, "internal/testnet/cmd/testnet": true}

// shellRunners are script functions whose arguments, after the first
// `from`, are a command line: demo.sh and bench.sh's `on K CMD...`,
// demo.sh's `node NAME CMD...` and `await WHAT CMD...`.
var shellRunners = map[string]int{"on": 1, "node": 1, "await": 1}

// skipDirs hold no host code: the guest's programs (internal/testbed, run
// in the rxe test bed's QEMU guest, whose image gets its own packages from
// scripts/rxe-testbed.sh) and what is not source.
var skipDirs = map[string]bool{".git": true, "internal/testbed": true, "bin": true, "testdata": true, "vendor": true}

// guestScripts are the scripts/*.sh that run only in the test bed's guest:
// the helpers its hooks source.
var guestScripts = map[string]bool{"scripts/testbed-lib.sh": true}

// scan finds every command and C header that the host scripts
// (scripts/*.sh, not scripts/testbed.d/* which run in the guest), .ci/run,
// the Makefile and the Go code under root use. errs are wrappers the scan
// cannot see through.
func scan(root string) (uses []use, errs []string, err error) {
	add := func(us []use, es []string) {
		uses = append(uses, us...)
		errs = append(errs, es...)
	}
	scripts, _ := filepath.Glob(filepath.Join(root, "scripts", "*.sh"))
	scripts = append(scripts, filepath.Join(root, ".ci", "run"))
	for _, f := range scripts {
		rel, _ := filepath.Rel(root, f)
		rel = filepath.ToSlash(rel)
		if guestScripts[rel] {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		us, es := scanScript(rel, string(src), 1)
		for i := range us {
			us[i].runtime = runtimeScripts[rel]
		}
		add(us, es)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return nil, nil, err
	}
	add(scanMakefile("Makefile", string(mk)))
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skipDirs[rel] || skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		us, es, err := scanGo(rel, src)
		if err != nil {
			return err
		}
		for i := range us {
			us[i].runtime = runtimeGo[path.Dir(rel)] && !strings.HasSuffix(rel, "_test.go")
		}
		add(us, es)
		return nil
	})
	return uses, errs, err
}

// scanScript finds the commands of a shell script whose first line is line0.
func scanScript(name, src string, line0 int) ([]use, []string) {
	calls, funcs := parseShell(src, line0)
	var uses []use
	var errs []string
	for _, c := range calls {
		where := fmt.Sprintf("%s:%d", name, c.line)
		ws := c.words
		if from, ok := shellRunners[ws[0].lit]; ok && funcs[ws[0].lit] {
			ws = after(ws, from+1)
		}
		names, nested, wrapper := commandsIn(ws)
		if _, listed := shellRunners[c.fn]; wrapper && c.fn != "" && !listed {
			errs = append(errs, fmt.Sprintf("%s: the function %s runs its arguments as a command: "+
				"add it to shellRunners (internal/depscheck/scan.go) so that the commands its callers name are checked", where, c.fn))
		}
		for _, n := range names {
			if !funcs[n] {
				uses = append(uses, use{kind: "command", name: n, where: where})
			}
		}
		for _, s := range nested {
			uses = append(uses, scriptUses(s, where, c.line, funcs)...)
		}
	}
	return filterShell(uses), errs
}

// scriptUses: the commands of a script given as a string (bash -c, trap),
// which may call the functions of the script it is in (outer).
func scriptUses(src, where string, line int, outer map[string]bool) []use {
	calls, funcs := parseShell(src, line)
	for f := range outer {
		funcs[f] = true
	}
	var uses []use
	for _, c := range calls {
		names, nested, _ := commandsIn(c.words)
		for _, n := range names {
			if !funcs[n] {
				uses = append(uses, use{kind: "command", name: n, where: where})
			}
		}
		for _, s := range nested {
			uses = append(uses, scriptUses(s, where, line, funcs)...)
		}
	}
	return filterShell(uses)
}

// filterShell drops builtins, and repository paths.
func filterShell(uses []use) []use {
	out := uses[:0]
	for _, u := range uses {
		if !shellBuiltins[u.name] {
			out = append(out, u)
		}
	}
	return filterRepo(out)
}

// filterRepo drops paths in the repository (scripts/x.sh, bin/ipoibd):
// they are built or scanned themselves, not installed.
func filterRepo(uses []use) []use {
	out := uses[:0]
	for _, u := range uses {
		if u.kind == "command" && strings.Contains(u.name, "/") && !path.IsAbs(u.name) {
			continue
		}
		out = append(out, u)
	}
	return out
}

var makeVar = regexp.MustCompile(`\$(\([^()]*(\([^()]*\)[^()]*)*\)|\{[^{}]*\}|[^$])`)

// scanMakefile finds the commands of the Makefile's recipes (tab-indented
// lines, with their continuations); make's own $(VARS) are unknown words.
func scanMakefile(name, src string) ([]use, []string) {
	var uses []use
	var errs []string
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "\t") {
			continue
		}
		first := i
		recipe := lines[i]
		for strings.HasSuffix(recipe, "\\") && i+1 < len(lines) {
			i++
			recipe += "\n" + lines[i]
		}
		recipe = strings.TrimLeft(recipe, "\t@-+")
		recipe = strings.ReplaceAll(recipe, "$$", "\x00")
		recipe = makeVar.ReplaceAllString(recipe, "$$MAKEVAR")
		recipe = strings.ReplaceAll(recipe, "\x00", "$")
		us, es := scanScript(name, recipe, first+1)
		uses, errs = append(uses, us...), append(errs, es...)
	}
	return uses, errs
}

// summary is one command or header with the first place that uses it.
type summary struct {
	use
	count int
}

// summarize merges the uses by kind and name, in name order.
func summarize(uses []use) []summary {
	byKey := map[string]*summary{}
	for _, u := range uses {
		k := u.kind + " " + u.name
		s, ok := byKey[k]
		if !ok {
			s = &summary{use: u}
			byKey[k] = s
		}
		s.count++
		s.runtime = s.runtime || u.runtime
	}
	out := make([]summary, 0, len(byKey))
	for _, s := range byKey {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].kind != out[j].kind {
			return out[i].kind < out[j].kind
		}
		return out[i].name < out[j].name
	})
	return out
}
