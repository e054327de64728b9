// Command ipoibd is the IP-over-InfiniBand connected-mode daemon: it brings
// up a TUN interface and carries its packets over InfiniBand queue pairs
// (softib, or rdma-core adapters with the verbs provider).
//
//	ipoibd --underlay 10.0.0.1 --addr 192.168.77.1/24   run the daemon
//	ipoibd show|neigh|conn|stats [IFNAME] [-j]          ask a running one
//	ipoibd child add|del [PARENT] PKEY                  P_Key child interfaces
//	ipoibd mode [IFNAME] connected|datagram             switch mode at run time
//	ipoibd help | version | man                         usage, build, man page
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/ipoibd/ipoibd/umadsa"
	"github.com/spf13/pflag"
)

// main leaves through C's exit (umadsa.Exit) in builds with libibumad:
// under ibsim's libumad2sim.so (softib --softib-link ib) the simulated
// port's slot is freed only in an atexit handler.
func main() {
	if err := dispatch(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ipoibd:", err)
		umadsa.Exit(exitCode(err))
	}
	umadsa.Exit(0)
}

// The exit statuses; exitStatuses explains them (usage text, man page).
const (
	exitStart    = 1  // the daemon could not start
	exitUsage    = 64 // the command line is wrong (sysexits' EX_USAGE: not 2, the status of a Go program that panics or dies of SIGABRT, as systemd's watchdog kills it)
	exitNoDaemon = 3  // no daemon answered a query
	exitRefused  = 4  // the daemon refused the request
	exitLost     = 5  // the daemon stopped on an error after it was up
)

var exitStatuses = []struct {
	code int
	what string
}{
	{0, "success; a running daemon exits 0 after SIGTERM or SIGINT"},
	{exitStart, "the daemon could not start: the provider's port, the underlay or the interface could not be opened, or a setting does not fit them (the message says which); restarting will not help until that is fixed"},
	{exitUsage, "the command line is wrong: an unknown command or flag, or a flag's value that does not parse (nothing was started or asked)"},
	{exitNoDaemon, "no ipoibd serves IFNAME in this network namespace, or it did not answer"},
	{exitRefused, "the daemon refused the request (not root, a P_Key not in the port's table, a child that exists, ...): its reason is printed"},
	{exitLost, "the daemon was up and stopped on an error: its port or interface went away"},
}

// exitError carries the exit status of an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withExit gives err the exit status code (nil stays nil).
func withExit(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// exitCode is err's exit status: the one it carries, else exitStart.
func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return exitStart
}

// dispatch runs one command; what it prints for the operator goes to out.
// The flags every query command takes (-j, --ifname, --help) may also
// come before the command: `ipoibd --json show`.
func dispatch(args []string, out io.Writer) error {
	cmd := "run"
	if k := commandAt(args); k >= 0 {
		// The flags go after the command's own words (neigh flush ...).
		cmd, args = args[k], append(slices.Clone(args[k+1:]), args[:k]...)
	}
	return runCommand(cmd, args, out)
}

// commandAt is the index of the command word in args: the first argument,
// or the first after the flags a query command shares (-j, --json,
// --ifname NAME, -h, --help); -1 when there is none (run's flags).
func commandAt(args []string) int {
	for k := 0; k < len(args); k++ {
		a := args[k]
		switch {
		case a == "" || a[0] != '-':
			if k == 0 || isCommand(a) {
				return k
			}
			return -1
		case a == "-j" || a == "--json" || a == "-h" || a == "--help" || strings.HasPrefix(a, "--ifname="):
		case a == "--ifname":
			k++ // its value
		default:
			return -1
		}
	}
	return -1
}

func isCommand(a string) bool {
	for _, c := range commands {
		if name, _, _ := strings.Cut(c.synopsis, " "); strings.Trim(name, "[]") == a {
			return true
		}
	}
	return false
}

// usageError is a command-line mistake: exit status 64 (exitUsage).
func usageError(format string, args ...any) error {
	return withExit(exitUsage, fmt.Errorf(format, args...))
}

func runCommand(cmd string, args []string, out io.Writer) error {
	switch cmd {
	case "run":
		return run(args, out)
	case "neigh":
		if len(args) > 0 && args[0] == "flush" {
			return neighFlushCommand(args[1:], out)
		}
		return query(cmd, args, out)
	case "show", "conn", "stats":
		return query(cmd, args, out)
	case "child":
		return childCommand(args, out)
	case "mode":
		return modeCommand(args, out)
	case "stop":
		return stopCommand(args, out)
	case "help":
		return noArgs(cmd, args, out, func() { usage(out) })
	case "version":
		return noArgs(cmd, args, out, func() { fmt.Fprintln(out, version()) })
	case "man":
		return noArgs(cmd, args, out, func() { manPage(out) })
	}
	return usageError("unknown command %q (want run, show, neigh, conn, stats, child, mode, stop, help, version or man; see ipoibd --help)", cmd)
}

// noArgs runs f for a command that takes no arguments; --help prints
// the command's usage.
func noArgs(cmd string, args []string, out io.Writer, f func()) error {
	if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
		fs := pflag.NewFlagSet("ipoibd "+cmd, pflag.ContinueOnError)
		fs.BoolP("help", "h", false, "print this command's usage and exit")
		commandUsage(out, cmd, fs)
		return nil
	}
	if len(args) > 0 {
		return usageError("%s takes no arguments, got %q", cmd, strings.Join(args, " "))
	}
	f()
	return nil
}

// The commands, for the usage text and the man page.
var commands = []struct{ synopsis, what string }{
	{"[run] [FLAGS]", "run the daemon for one interface (flags below)"},
	{"show [IFNAME] [-j]", "the interface: link address, GID, P_Key, mode, MTUs, connection service"},
	{"neigh [IFNAME] [-j]", "the neighbors: how each is reached (RC, UC or UD), its MTU and link address"},
	{"neigh flush [IFNAME] [IP]", "forget the neighbor IP, or all: resolved again on the next packet"},
	{"conn [IFNAME] [-j|-w]", "the connections: peer, octets each way, RNR NAKs, retransmits, UD fallbacks, time up; -w: every figure"},
	{"stats [IFNAME] [-j] [-a]", "the counters above 0 (-a: all), every drop under its cause, those that mean trouble marked; never going backwards"},
	{"child add [PARENT] PKEY", "a P_Key child PARENT.PPPP in the parent's daemon (--name, --addr, --mode, --mtu; --netns, --owner: a pod's, as ipoibd-cni makes them)"},
	{"child del [PARENT] NAME|PKEY|OWNER", "remove a child: DREQs on its connections, the interface goes"},
	{"mode [IFNAME] connected|datagram", "switch mode at run time, as the kernel's sysfs mode: the MTU follows (65520, or the UD MTU)"},
	{"stop [IFNAME]", "stop the daemon for good: its children, pods' too, are removed (SIGTERM keeps them for the next daemon)"},
	{"help", "this text"},
	{"version", "the module version, VCS revision and Go version of this build"},
	{"man", "the man page ipoibd(8) in roff (man -l <(ipoibd man))"},
}

// Query flags; IFNAME may also be given as --ifname.
func queryFlags(cmd string) (*pflag.FlagSet, *string, *bool) {
	fs := pflag.NewFlagSet("ipoibd "+cmd, pflag.ContinueOnError)
	ifname := fs.String("ifname", "ib0", "interface whose daemon to ask (or give IFNAME after the command)")
	asJSON := fs.BoolP("json", "j", false, "print JSON: objects with the same keys in every state, lists never null, stats as one {name: value} object")
	return fs, ifname, asJSON
}

// queryOwnFlags adds to fs the flags of query cmd alone: conn's -w,
// stats' -a (the usage and the man page list both).
func queryOwnFlags(fs *pflag.FlagSet, cmd string) (wide, all *bool) {
	wide, all = new(bool), new(bool)
	switch cmd {
	case "conn":
		fs.BoolVarP(wide, "wide", "w", false, "conn: every figure of each connection, exact, and the peers' full link addresses, on lines wider than 100 columns")
	case "stats":
		fs.BoolVarP(all, "all", "a", false, "stats: list every counter, those at 0 too (the table hides them; --json always has every one)")
	}
	return wide, all
}

// allQueryFlags are the query commands' flags, those of one command
// among them (the usage and the man page list them all).
func allQueryFlags() *pflag.FlagSet {
	fs, _, _ := queryFlags("show")
	queryOwnFlags(fs, "conn")
	queryOwnFlags(fs, "stats")
	return fs
}

const signalsText = `SIGTERM, SIGINT: send a DREQ on every connection, remove the routes and the interface, exit; P_Key children (pods' too) stay, unserved (carrier off), and the next daemon takes them back (ipoibd stop removes them).
SIGHUP: log the interface's state (addresses, neighbors, connections, drops); nothing is re-read, the daemon keeps running.`

func usage(out io.Writer) {
	fmt.Fprintln(out, "ipoibd: IP over InfiniBand in connected mode, in userspace")
	fmt.Fprintln(out, "\nusage:")
	for _, c := range commands {
		fmt.Fprintf(out, "  ipoibd %-32s %s\n", c.synopsis, c.what)
	}
	fmt.Fprintln(out, "\nrun flags:")
	fmt.Fprint(out, runFlags(&options{}).FlagUsages())
	fmt.Fprintln(out, "\nquery flags (show, neigh, conn, stats):")
	fmt.Fprint(out, allQueryFlags().FlagUsages())
	fmt.Fprintln(out, "\nsignals:")
	for _, l := range strings.Split(signalsText, "\n") {
		fmt.Fprintln(out, "  "+l)
	}
	fmt.Fprintln(out, "\nexit status:")
	for _, e := range exitStatuses {
		fmt.Fprintf(out, "  %d  %s\n", e.code, e.what)
	}
	fmt.Fprintln(out, "\nQueries reach the daemon of IFNAME (default ib0) in the caller's network namespace; only root may ask.")
	fmt.Fprintln(out, "Each command has its own help: ipoibd COMMAND --help. Query flags may come before the command (ipoibd --json show).")
}

// commandUsage is the help of one command (name, e.g. "child" or "child
// add"): its synopses and what they do, and its flags.
func commandUsage(out io.Writer, name string, fs *pflag.FlagSet) {
	fmt.Fprintln(out, "usage:")
	for _, c := range commands {
		if c.synopsis == name || strings.HasPrefix(c.synopsis, name+" ") {
			fmt.Fprintf(out, "  ipoibd %-32s %s\n", c.synopsis, c.what)
		}
	}
	fmt.Fprintln(out, "\nflags:")
	fmt.Fprint(out, fs.FlagUsages())
	fmt.Fprintln(out, "\nipoibd --help lists every command; man ipoibd explains them.")
}

// version describes the build from the binary's own build information.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "ipoibd (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(unknown)"
	}
	rev, when, dirty := "unknown", "", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = " " + s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = " (modified)"
			}
		}
	}
	return fmt.Sprintf("ipoibd %s %s revision %s%s%s, %s", bi.Main.Path, v, rev, when, dirty, bi.GoVersion)
}
