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
	"fmt"
	"io"
	"os"
	"runtime/debug"
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
		umadsa.Exit(1)
	}
	umadsa.Exit(0)
}

// dispatch runs one command; what it prints for the operator goes to out.
func dispatch(args []string, out io.Writer) error {
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
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
	case "help":
		return noArgs(cmd, args, func() { usage(out) })
	case "version":
		return noArgs(cmd, args, func() { fmt.Fprintln(out, version()) })
	case "man":
		return noArgs(cmd, args, func() { manPage(out) })
	}
	return fmt.Errorf("unknown command %q (want run, show, neigh, conn, stats, child, mode, help, version or man; see ipoibd --help)", cmd)
}

func noArgs(cmd string, args []string, f func()) error {
	if len(args) > 0 {
		return fmt.Errorf("%s takes no arguments, got %q", cmd, strings.Join(args, " "))
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
	{"conn [IFNAME] [-j]", "the connections: direction, state, QPNs, whether they carry our sends"},
	{"stats [IFNAME] [-j]", "the counters, every drop under its cause; never going backwards"},
	{"child add [PARENT] PKEY", "a P_Key child PARENT.PPPP in the parent's daemon (--name, --addr, --mode, --mtu; --netns, --owner: a pod's, as ipoibd-cni makes them)"},
	{"child del [PARENT] NAME|PKEY|OWNER", "remove a child: DREQs on its connections, the interface goes"},
	{"mode [IFNAME] connected|datagram", "switch mode at run time, as the kernel's sysfs mode: the MTU follows (65520, or the UD MTU)"},
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

const signalsText = `SIGTERM, SIGINT: send a DREQ on every connection, remove the routes and the interface, exit.
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
	fs, _, _ := queryFlags("show")
	fmt.Fprint(out, fs.FlagUsages())
	fmt.Fprintln(out, "\nsignals:")
	for _, l := range strings.Split(signalsText, "\n") {
		fmt.Fprintln(out, "  "+l)
	}
	fmt.Fprintln(out, "\nQueries reach the daemon of IFNAME (default ib0) in the caller's network namespace; only root may ask.")
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
