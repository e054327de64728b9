package main

// The commands that change a running daemon: child add|del and mode.

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// childCommand is `ipoibd child add|del`: P_Key child interfaces made and
// removed in the running daemon of their parent, as the kernel's
// create_child and delete_child do.
//
//	ipoibd child add [PARENT] PKEY [--name N] [--addr A]... [--mode M] [--mtu N]
//	ipoibd child del [PARENT] NAME|PKEY
func childCommand(args []string, out io.Writer) error {
	if len(args) == 0 || (args[0] != "add" && args[0] != "del") {
		return fmt.Errorf("child: want add or del (see ipoibd --help)")
	}
	verb, args := args[0], args[1:]
	fs := pflag.NewFlagSet("ipoibd child "+verb, pflag.ContinueOnError)
	fs.Usage = func() {}
	parent := fs.String("ifname", "ib0", "the parent interface, whose daemon makes the child (or give PARENT before PKEY)")
	var r childRequest
	if verb == "add" {
		fs.StringVar(&r.Name, "name", "", "the child's name (default PARENT.PPPP, the P_Key in four hex digits)")
		fs.StringArrayVar(&r.Addrs, "addr", nil, "address with prefix length for the child (repeatable)")
		fs.StringVar(&r.Mode, "mode", "", "connected or datagram (default the parent's)")
		fs.IntVar(&r.MTU, "mtu", 0, "the child's MTU (default the mode's)")
	}
	asJSON := fs.BoolP("json", "j", false, "print the answer as JSON")
	help := fs.BoolP("help", "h", false, "print the whole usage and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *help {
		usage(out)
		return nil
	}
	pos := fs.Args()
	switch {
	case len(pos) == 2 && fs.Changed("ifname") && pos[0] != *parent:
		return fmt.Errorf("child %s: interface %q and --ifname %q disagree", verb, pos[0], *parent)
	case len(pos) == 2:
		*parent, pos = pos[0], pos[1:]
	case len(pos) != 1:
		what := "PKEY"
		if verb == "del" {
			what = "NAME or PKEY"
		}
		return fmt.Errorf("child %s takes [PARENT] %s, got %q", verb, what, strings.Join(pos, " "))
	}
	req := request{Cmd: "child-del", Name: pos[0]}
	if verb == "add" {
		r.PKey = pos[0]
		req = request{Cmd: "child-add", Child: &r}
	}
	raw, err := ask(*parent, req)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err = out.Write(append(raw, '\n'))
		return err
	}
	var reply childReply
	if err := json.Unmarshal(raw, &reply); err != nil {
		return fmt.Errorf("the daemon's answer: %w", err)
	}
	done := "added"
	if verb == "del" {
		done = "removed"
	}
	_, err = fmt.Fprintf(out, "%s %s\n", reply.Name, done)
	return err
}

// modeCommand is `ipoibd mode [IFNAME] connected|datagram`.
func modeCommand(args []string, out io.Writer) error {
	fs := pflag.NewFlagSet("ipoibd mode", pflag.ContinueOnError)
	fs.Usage = func() {}
	ifname := fs.String("ifname", "ib0", "the interface (or give IFNAME before the mode)")
	asJSON := fs.BoolP("json", "j", false, "print the answer as JSON")
	help := fs.BoolP("help", "h", false, "print the whole usage and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *help {
		usage(out)
		return nil
	}
	pos := fs.Args()
	switch {
	case len(pos) == 2 && fs.Changed("ifname") && pos[0] != *ifname:
		return fmt.Errorf("mode: interface %q and --ifname %q disagree", pos[0], *ifname)
	case len(pos) == 2:
		*ifname, pos = pos[0], pos[1:]
	case len(pos) != 1:
		return fmt.Errorf("mode takes [IFNAME] connected|datagram, got %q", strings.Join(pos, " "))
	}
	raw, err := ask(*ifname, request{Cmd: "mode", Name: pos[0]})
	if err != nil {
		return err
	}
	if *asJSON {
		_, err = out.Write(append(raw, '\n'))
		return err
	}
	var r modeReply
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("the daemon's answer: %w", err)
	}
	_, err = fmt.Fprintf(out, "%s: %s mode, mtu %d\n", r.Name, r.Mode, r.MTU)
	return err
}
