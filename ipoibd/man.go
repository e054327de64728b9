package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/ipoibd/ipoibd/counterdoc"
	"github.com/spf13/pflag"
)

// manPage writes ipoibd(8) in roff, made from the same commands and flag
// sets as --help, so the two cannot drift apart (`make man` writes it to
// dist/ipoibd.8).
func manPage(out io.Writer) {
	fmt.Fprint(out, `.TH IPOIBD 8 "" "ipoibd" "System Administration"
.SH NAME
ipoibd \- IP over InfiniBand in connected mode, in userspace
.SH SYNOPSIS
`)
	for _, c := range commands {
		fmt.Fprintf(out, ".B ipoibd\n%s\n.br\n", roff(c.synopsis))
	}
	fmt.Fprint(out, `.SH DESCRIPTION
ipoibd brings up a TUN network interface and carries its packets over
InfiniBand queue pairs it drives itself: a UD queue pair for ARP, neighbor
discovery and multicast, and RC or UC connections set up through the IB
Communication Manager (RFC 4755) for unicast with MTUs up to 65520 octets.
The softib provider is a software adapter over UDP; verbs drives rdma-core
adapters.
.PP
Datagram mode's MTU is the port's IB MTU less the 4-octet IPoIB header.
softib takes as its IB MTU the largest of 256 to 4096 octets whose packets,
with their headers (52 octets on an IPv4 underlay, 72 on IPv6, 50 more with
--softib-link ib), fit the underlay interface's MTU: a 1500-octet underlay
gives 1024 (datagram MTU 1020), 2100 octets give 2048, 4148 give 4096.
Below IPv6's 1280 the kernel runs no IPv6 on a link, so IPv6 addresses
asked for with --addr wait, said at start, until the link's MTU allows
them (an operator's ip link set mtu, or a switch to connected mode), and
come back when it does; a start in datagram mode on a port whose datagram
MTU is below 1280, with an IPv6 address, is refused, since such an
interface cannot leave datagram mode.
.SH COMMANDS
`)
	for _, c := range commands {
		fmt.Fprintf(out, ".TP\n.B %s\n%s\n", roff(c.synopsis), roff(c.what))
	}
	fmt.Fprint(out, ".SH RUN FLAGS\n")
	manFlags(out, runFlags(&options{}))
	fmt.Fprint(out, ".SH QUERY FLAGS\n")
	manFlags(out, allQueryFlags())
	fmt.Fprint(out, ".SH SIGNALS\n")
	for _, l := range strings.Split(signalsText, "\n") {
		name, what, _ := strings.Cut(l, ": ")
		fmt.Fprintf(out, ".TP\n.B %s\n%s\n", roff(name), roff(what))
	}
	fmt.Fprint(out, ".SH EXIT STATUS\n")
	for _, e := range exitStatuses {
		fmt.Fprintf(out, ".TP\n.B %d\n%s\n", e.code, roff(e.what))
	}
	manCounters(out)
	fmt.Fprint(out, ".SH EXAMPLES\n")
	for _, e := range examples {
		fmt.Fprintf(out, ".PP\n%s\n.PP\n.RS\n.nf\n", roff(e.what))
		for _, c := range e.cmds {
			fmt.Fprintln(out, roff(c))
		}
		fmt.Fprint(out, ".fi\n.RE\n")
	}
	fmt.Fprint(out, `.SH FILES
.TP
.I /etc/ipoibd/IFNAME.env
IPOIBD_FLAGS for the unit ipoibd@IFNAME.service.
.SH SEE ALSO
.BR ip (8),
.BR systemd.exec (5)
`)
}

// counterGroups are the COUNTERS section's subsections, by the prefix the
// daemon gives each source's counters; the rest are the interface's.
var counterGroups = []struct{ prefix, title string }{
	{"", "The interface"},
	{"cm_", "The connection manager (cm_)"},
	{"conn_", "The connections' queue pairs, summed over every connection, gone ones included (conn_)"},
	{"sa_path_", "The subnet administrator's path cache (sa_path_)"},
	{"dev_", "The device (dev_)"},
}

func counterGroup(name string) int {
	g := 0
	for k, c := range counterGroups {
		if c.prefix != "" && strings.HasPrefix(name, c.prefix) {
			g = k
		}
	}
	return g
}

// manCounters writes the COUNTERS section from the counter table.
func manCounters(out io.Writer) {
	fmt.Fprint(out, `.SH COUNTERS
.B ipoibd stats
lists these (with \-j, every one; else those above 0).
.B TROUBLE
marks a counter whose value above 0 means a packet or message was lost or
something failed; a healthy interface keeps those at 0 (SIGHUP's
.I drops
sums the ones named drop, and
.I trouble
names every one above 0). The others also grow on a healthy host. A name
ending in * stands for a family: one counter per kind, reason, event or
file. The Prometheus metric of a counter is ipoibd_NAME_total.
`)
	entries := counterdoc.All()
	for g, grp := range counterGroups {
		fmt.Fprintf(out, ".SS %s\n", roff(grp.title))
		for _, e := range entries {
			if counterGroup(e.Name) != g {
				continue
			}
			head := `\fB` + roff(e.Name) + `\fR`
			if e.Trouble {
				head += " (TROUBLE)"
			}
			what := e.Meaning
			if e.Only != "" {
				what += " Counts with " + e.Only + "."
			}
			fmt.Fprintf(out, ".TP\n%s\n%s\n", head, roff(what))
		}
	}
}

func manFlags(out io.Writer, fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		name, usage := pflag.UnquoteUsage(f)
		head := `\-\-` + roff(f.Name)
		if f.Shorthand != "" {
			head = `\-` + f.Shorthand + ", " + head
		}
		if name != "" {
			head += " " + `\fI` + roff(name) + `\fR`
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" && f.DefValue != "0s" {
			usage += " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(out, ".TP\n.B %s\n%s\n", head, roff(usage))
	})
}

// roff escapes text for a roff line: backslashes, hyphens, and a leading
// dot or quote that would read as a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// examples are the man page's EXAMPLES: what each does, then the command
// lines, "PROMPT# ipoibd ..." (a test parses every ipoibd line).
var examples = []struct {
	what string
	cmds []string
}{
	{"Two hosts over softib, whose underlay (any IP network, e.g. Ethernet) has 10.0.0.1 and 10.0.0.2: ib0 in connected mode on each, then a ping across.", []string{
		"host1# ipoibd --underlay 10.0.0.1 --addr 192.168.100.1/24 --addr fd00:100::1/64 &",
		"host2# ipoibd --underlay 10.0.0.2 --addr 192.168.100.2/24 --addr fd00:100::2/64 &",
		"host1# ping 192.168.100.2",
	}},
	{"A P_Key child: partition 0x8001 as ib0.8001, made at start with its address (softib's P_Key table must list it; on InfiniBand the subnet manager's does), and 0x8002 added and removed at run time.", []string{
		"# ipoibd --underlay 10.0.0.1 --addr 192.168.100.1/24 --softib-pkeys ffff,8001,8002 --child 8001=192.168.101.1/24 &",
		"# ipoibd child add 8002 --addr 192.168.102.1/24",
		"# ipoibd child del ib0.8002",
	}},
	{"Queries: the interface, its neighbors and connections, its counters (those above 0; trouble marked), all of them as JSON, a child's, and a daemon in another network namespace.", []string{
		"# ipoibd show",
		"# ipoibd neigh",
		"# ipoibd conn",
		"# ipoibd stats",
		"# ipoibd --json stats",
		"# ipoibd stats ib0.8001",
		"# ip netns exec h1 ipoibd show",
	}},
	{"A systemd instance for ib0: its flags in /etc/ipoibd/ib0.env, then the unit; reload (SIGHUP) logs the state, with drops and trouble counters, to the journal.", []string{
		"# echo 'IPOIBD_FLAGS=\"--underlay 10.0.0.1 --addr 192.168.100.1/24\"' >/etc/ipoibd/ib0.env",
		"# systemctl enable --now ipoibd@ib0",
		"# systemctl reload ipoibd@ib0",
		"# journalctl -u ipoibd@ib0",
	}},
}
