package main

// The commands that change a running daemon: child add|del and mode.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"

	"github.com/ipoibd/ipoibd/control"
)

// childCommand is `ipoibd child add|del`: P_Key child interfaces made and
// removed in the running daemon of their parent, as the kernel's
// create_child and delete_child do.
//
//	ipoibd child add [PARENT] PKEY [--name N] [--addr A]... [--mode M] [--mtu N] [--netns NS [--owner O]]
//	ipoibd child del [PARENT] NAME|PKEY|OWNER
func childCommand(args []string, out io.Writer) error {
	if len(args) == 0 || (args[0] != "add" && args[0] != "del") {
		if len(args) > 0 && (args[0] == "--help" || args[0] == "-h") {
			c := newIfCommand("child")
			childAddFlags(c, &control.ChildRequest{})
			commandUsage(out, "child", c.fs)
			return nil
		}
		return usageError("child: want add or del (see ipoibd child --help)")
	}
	verb, args := args[0], args[1:]
	c := newIfCommand("child " + verb)
	var r control.ChildRequest
	want := "NAME|PKEY"
	if verb == "add" {
		want = "PKEY"
		childAddFlags(c, &r)
	}
	pos, done, err := c.parse(args, out, want)
	if done || err != nil {
		return err
	}
	req := control.Request{Cmd: control.CmdChildDel, Name: pos[0]}
	if verb == "add" {
		r.PKey = pos[0]
		req = control.Request{Cmd: control.CmdChildAdd, Child: &r}
	}
	var reply control.ChildReply
	if printed, err := c.exchange(req, out, &reply); printed || err != nil {
		return err
	}
	what := "added"
	if verb == "del" {
		what = "removed"
	}
	_, err = fmt.Fprintf(out, "%s %s\n", reply.Name, what)
	return err
}

// childAddFlags are child add's own flags.
func childAddFlags(c *ifCommand, r *control.ChildRequest) {
	c.fs.StringVar(&r.Name, "name", "", "child add: the child's name (default PARENT.PPPP, the P_Key in four hex digits)")
	c.fs.StringArrayVar(&r.Addrs, "addr", nil, "child add: address with prefix length for the child (repeatable)")
	c.fs.StringVar(&r.Mode, "mode", "", "child add: connected or datagram (default the parent's)")
	c.fs.IntVar(&r.MTU, "mtu", 0, "child add: the child's MTU (default the mode's)")
	c.fs.StringVar(&r.Netns, "netns", "", "child add: make the child in this network namespace (a path or an ip netns name), a pod's interface; such children may share a P_Key")
	c.fs.StringVar(&r.Owner, "owner", "", "child add: with --netns, who owns the child (a pod's attachment; del takes it in place of NAME)")
}

// modeCommand is `ipoibd mode [IFNAME] connected|datagram`.
func modeCommand(args []string, out io.Writer) error {
	c := newIfCommand("mode")
	pos, done, err := c.parse(args, out, "connected|datagram")
	if done || err != nil {
		return err
	}
	var r control.ModeReply
	if printed, err := c.exchange(control.Request{Cmd: control.CmdMode, Name: pos[0]}, out, &r); printed || err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s: %s mode, mtu %d\n", r.Name, r.Mode, r.MTU)
	return err
}

// exchange sends req to the daemon. With -j it prints the answer as it
// came and reports printed; otherwise it decodes the answer into reply.
func (c *ifCommand) exchange(req control.Request, out io.Writer, reply any) (printed bool, err error) {
	raw, err := ask(*c.ifname, req)
	if err != nil {
		return false, err
	}
	if *c.asJSON {
		_, err = out.Write(append(raw, '\n'))
		return true, err
	}
	if err := json.Unmarshal(raw, reply); err != nil {
		return false, fmt.Errorf("the daemon's answer: %w", err)
	}
	return false, nil
}

// neighFlushCommand is `ipoibd neigh flush [IFNAME] [IP]`: the daemon
// forgets the neighbor IP, or all, and resolves it again on the next
// packet, as `ip neigh flush` does for a kernel NIC.
func neighFlushCommand(args []string, out io.Writer) error {
	c := newIfCommand("neigh flush")
	var ip string
	// The IP is the last argument that reads as one; an IFNAME never does.
	for k := len(args) - 1; k >= 0; k-- {
		if a, err := netip.ParseAddr(args[k]); err == nil {
			ip, args = a.String(), slices.Delete(slices.Clone(args), k, k+1)
			break
		}
	}
	if _, done, err := c.parse(args, out); done || err != nil {
		return err
	}
	var r control.FlushReply
	if printed, err := c.exchange(control.Request{Cmd: control.CmdNeighFlush, IP: ip}, out, &r); printed || err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "%s: %d neighbors flushed\n", r.Name, r.Flushed)
	return err
}
