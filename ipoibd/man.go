package main

import (
	"fmt"
	"io"
	"strings"

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
.SH COMMANDS
`)
	for _, c := range commands {
		fmt.Fprintf(out, ".TP\n.B %s\n%s\n", roff(c.synopsis), roff(c.what))
	}
	fmt.Fprint(out, ".SH RUN FLAGS\n")
	manFlags(out, runFlags(&options{}))
	fmt.Fprint(out, ".SH QUERY FLAGS\n")
	fs, _, _ := queryFlags("show")
	manFlags(out, fs)
	fmt.Fprint(out, ".SH SIGNALS\n")
	for _, l := range strings.Split(signalsText, "\n") {
		name, what, _ := strings.Cut(l, ": ")
		fmt.Fprintf(out, ".TP\n.B %s\n%s\n", roff(name), roff(what))
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
