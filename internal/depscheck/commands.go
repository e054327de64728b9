package main

import (
	"path"
	"strings"
)

// commandsIn returns the commands a command line runs: its first word and,
// through the prefixes below, the commands it runs in turn (`timeout 90
// ping`, `ip netns exec NS ping`, `testnet exec NAME K ping`). Scripts
// given to `bash -c` or `trap` come back in scripts. wrapper is true when
// a command position holds a parameter of the enclosing function (Go) or
// its positional arguments (shell): that function runs whatever its
// callers name, and must be in the runner tables.
func commandsIn(ws []word) (names, scripts []string, wrapper bool) {
	for len(ws) > 0 {
		w := ws[0]
		if w.param || positional[w.raw] {
			return names, scripts, true
		}
		if isTestnet(w) && len(ws) > 1 && ws[1].lit == "exec" {
			ws = after(ws, 4) // testnet exec NAME K CMD...
			continue
		}
		if !w.ok {
			return names, scripts, false // "$GO", "$IPOIBD", a variable: not ours to check
		}
		names = append(names, w.lit)
		rest := ws[1:]
		switch path.Base(w.lit) {
		case "exec", "nohup":
			ws = rest
		case "command":
			if len(rest) > 0 && (rest[0].lit == "-v" || rest[0].lit == "-V") {
				return names, scripts, false // a probe, not a call
			}
			ws = rest
		case "timeout": // timeout [-k DUR] [-s SIG] [--flags] DURATION CMD
			for len(rest) > 0 && strings.HasPrefix(rest[0].lit, "-") {
				if rest[0].lit == "-k" || rest[0].lit == "-s" {
					rest = after(rest, 1)
				}
				rest = after(rest, 1)
			}
			ws = after(rest, 1)
		case "env": // env [-i] [VAR=VAL]... CMD
			for len(rest) > 0 && (isOption(rest[0]) || assignPrefix.MatchString(rest[0].raw)) {
				rest = rest[1:]
			}
			ws = rest
		case "setpriv": // setpriv --opt=VAL... CMD
			for len(rest) > 0 && isOption(rest[0]) {
				rest = rest[1:]
			}
			ws = rest
		case "ip":
			if len(rest) < 3 || rest[0].lit != "netns" || rest[1].lit != "exec" {
				return names, scripts, false
			}
			ws = after(rest, 3)
		case "bash", "sh":
			// With an expansion, lit is the script without it: enough to
			// find command names.
			if len(rest) > 1 && rest[0].lit == "-c" {
				scripts = append(scripts, rest[1].lit)
			}
			return names, scripts, false
		case "trap":
			if len(rest) > 0 && rest[0].ok {
				scripts = append(scripts, rest[0].lit)
			}
			return names, scripts, false
		default:
			return names, scripts, false
		}
	}
	return names, scripts, false
}

var positional = map[string]bool{`"$@"`: true, `$@`: true, `"$*"`: true, `$*`: true, `"$1"`: true, `$1`: true}

// isTestnet: internal/testnet's command (bin/testnet) or its wrapper
// scripts/cluster.sh, by path or through the variable the scripts keep
// it in ("$testnet").
func isTestnet(w word) bool {
	if w.ok {
		return path.Base(w.lit) == "testnet" || path.Base(w.lit) == "cluster.sh"
	}
	return w.raw == `"$testnet"`
}

// isOption: a word that starts with '-', also when quoted or built from a
// Go string ("--caps="+set).
func isOption(w word) bool { return strings.HasPrefix(strings.TrimLeft(w.raw, `"'`), "-") }

func after(ws []word, n int) []word {
	if n >= len(ws) {
		return nil
	}
	return ws[n:]
}

// shellBuiltins run inside bash: no package to install.
var shellBuiltins = map[string]bool{}

func init() {
	for _, b := range strings.Fields(`. : [ alias bg bind break builtin caller cd command compgen complete
		compopt continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash help
		history jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly return set
		shift shopt source suspend test times trap true type typeset ulimit umask unalias unset wait`) {
		shellBuiltins[b] = true
	}
}
