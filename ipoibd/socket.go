package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"text/tabwriter"

	"github.com/ipoibd/ipoibd/control"
	"github.com/ipoibd/ipoibd/counterdoc"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"golang.org/x/sys/unix"
)

// The control socket is an abstract Unix socket named after the interface
// (package control speaks its protocol). Abstract sockets belong to the
// network namespace, like the interface, so `ip netns exec h1 ipoibd
// neigh` reaches the daemon of that namespace. Only root may ask.

// controlServer is one interface's control socket: its handler answers
// what the daemon knows of the interface.
type controlServer struct {
	ln    *net.UnixListener
	iface netif
	d     *daemon
}

func listenControl(ifname string, iface netif, d *daemon) (*controlServer, error) {
	// The socket lives in the interface's namespace, where `ipoibd show`
	// finds it (abstract names are per namespace).
	var ln *net.UnixListener
	err := iface.InNetns(func() (err error) {
		ln, err = control.Listen(ifname)
		return err
	})
	if err != nil {
		if errors.Is(err, unix.EADDRINUSE) {
			return nil, fmt.Errorf("another ipoibd already serves %s in this network namespace", ifname)
		}
		return nil, fmt.Errorf("control socket: %w", err)
	}
	s := &controlServer{ln: ln, iface: iface, d: d}
	go s.serve()
	return s, nil
}

func (s *controlServer) Close() error { return s.ln.Close() }

func (s *controlServer) serve() {
	// A client that connects earlier waits in the listen backlog.
	<-s.d.ready
	_ = (&control.Server{Handler: s}).Serve(s.ln)
}

// ServeControl answers one request (control.Handler).
func (s *controlServer) ServeControl(req *control.Request) (any, error) {
	switch req.Cmd {
	case control.CmdShow:
		r := showReply{Info: s.iface.Show(), ConnService: s.d.choice, Children: []control.ChildInfo{}}
		if s.iface == s.d.first() {
			r.Children = s.d.children()
			r.Unserved = s.d.unserved()
		} else {
			r.Parent = s.d.parentName()
		}
		return r, nil
	case control.CmdChildAdd, control.CmdChildDel:
		return s.child(req)
	case control.CmdMode:
		return s.mode(req.Name)
	case control.CmdStop:
		if s.iface != s.d.first() {
			return nil, control.Errorf(control.CodeNotParent, "%s is a child: stop its parent %s", s.iface.Name(), s.d.parentName())
		}
		return s.d.requestStop()
	case control.CmdNeigh:
		return s.iface.Neighbors(), nil
	case control.CmdNeighFlush:
		return s.flush(req.IP)
	case control.CmdConn:
		return s.iface.Connections(), nil
	case control.CmdStats:
		return s.iface.Stats(), nil
	}
	return nil, control.Errorf(control.CodeUnknownCommand, "unknown command %s", req.Cmd)
}

// child answers child-add and child-del, which only the first
// interface's socket takes (children have no children).
func (s *controlServer) child(req *control.Request) (any, error) {
	if s.iface != s.d.first() {
		return nil, control.Errorf(control.CodeNotParent, "%s is a child: ask its parent %s", s.iface.Name(), s.d.parentName())
	}
	if req.Cmd == control.CmdChildDel {
		name, err := s.d.delChild(req.Name)
		return control.ChildReply{Name: name}, err
	}
	if req.Child == nil {
		return nil, control.ErrBadRequest
	}
	r, err := s.d.addChild(*req.Child)
	if err != nil {
		return nil, err
	}
	return undoableChild{r, func() { s.d.undoChild(*req.Child, r.Name) }}, nil
}

// undoableChild is a child made; control.Server calls Undo when its
// client cannot have the reply (gone, or past the exchange's deadline).
type undoableChild struct {
	control.ChildReply
	undo func()
}

func (u undoableChild) Undo() { u.undo() }

// mode switches the interface between connected and datagram mode.
func (s *controlServer) mode(name string) (any, error) {
	m, err := ipoib.ParseMode(name)
	if err != nil {
		return nil, control.WithCode(control.CodeInvalid, err)
	}
	if err := s.iface.SetMode(m); err != nil {
		return nil, err
	}
	info := s.iface.Show()
	return control.ModeReply{Name: info.Name, Mode: info.Mode, MTU: info.MTU}, nil
}

// flush forgets one neighbor or all (ip empty).
func (s *controlServer) flush(ip string) (any, error) {
	var a netip.Addr
	if ip != "" {
		var err error
		if a, err = netip.ParseAddr(ip); err != nil {
			return nil, control.Errorf(control.CodeInvalid, "%q is not an IP address", ip)
		}
	}
	return control.FlushReply{Name: s.iface.Name(), Flushed: s.iface.FlushNeighbors(a)}, nil
}

// query asks a running daemon and prints its answer as a table or JSON.
func query(cmd string, args []string, out io.Writer) error {
	c := newIfCommand(cmd)
	wide, all := queryOwnFlags(c.fs, cmd)
	if _, done, err := c.parse(args, out); done || err != nil {
		return err
	}
	raw, err := ask(*c.ifname, control.Request{Cmd: control.Cmd(cmd)})
	if err != nil {
		return err
	}
	if cmd == "conn" && !*c.asJSON {
		return printConns(out, raw, *wide)
	}
	if !*c.asJSON {
		return printTable(out, cmd, raw, *all)
	}
	if cmd == "stats" {
		// One {name: value} object, in the daemon's order.
		if raw, err = statsObject(raw); err != nil {
			return err
		}
	}
	_, err = out.Write(append(raw, '\n'))
	return err
}

// ask sends one request and returns the reply, or the daemon's error.
func ask(ifname string, req control.Request) (json.RawMessage, error) {
	var raw json.RawMessage
	err := control.Call(context.Background(), ifname, &req, &raw)
	var ce *control.CallError
	switch {
	case err == nil:
		return raw, nil
	case !errors.As(err, &ce):
		return nil, withExit(exitRefused, err)
	case ce.Op == "dial":
		return nil, withExit(exitNoDaemon, fmt.Errorf("no ipoibd serves %s in this network namespace (%v)", ifname, ce.Err))
	case ce.Op == "write":
		return nil, withExit(exitNoDaemon, fmt.Errorf("asking the daemon of %s: %w", ifname, ce.Err))
	}
	return nil, withExit(exitNoDaemon, fmt.Errorf("reading the answer of the daemon of %s: %w", ifname, ce.Err))
}

// statsObject turns the daemon's counter list into one JSON object.
func statsObject(raw json.RawMessage) (json.RawMessage, error) {
	var cs []ib.Counter
	if err := json.Unmarshal(raw, &cs); err != nil {
		return nil, fmt.Errorf("the daemon's counters: %w", err)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for k, c := range cs {
		if k > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(c.Name)
		fmt.Fprintf(&b, "%s:%d", name, c.Value)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func printTable(out io.Writer, cmd string, raw json.RawMessage, all bool) error {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	defer w.Flush()
	switch cmd {
	case "show":
		var i showReply
		if err := json.Unmarshal(raw, &i); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %s mode, mtu %d (UD %d, IB %d), device %s (%s)\n", i.Name, i.Mode, i.MTU, i.UDMTU, i.IBMTU, i.Device, i.LinkLayer)
		fmt.Fprintf(w, "    link/infiniband %s\n", i.LinkAddr)
		carrier := "off"
		if i.Carrier {
			carrier = "on"
		}
		fmt.Fprintf(w, "    admin %s, carrier %s, operstate %s\n", orDash(i.AdminState), carrier, orDash(i.OperState))
		if len(i.Ports) > 1 {
			for _, p := range i.Ports {
				fmt.Fprintf(w, "    port %s %s link %s tx %d rx %d\n", p.Device, p.State, p.LinkAddr, p.TxPackets, p.RxPackets)
			}
			fmt.Fprintf(w, "    failovers %d (last took %.3f ms)\n", i.Failovers, i.LastFailoverMs)
		}
		if i.Offloads != "" {
			fmt.Fprintf(w, "    tun offloads %s\n", i.Offloads)
		}
		fmt.Fprintf(w, "    gid %s port_guid %s pkey %v qkey %#x\n", i.GID, i.PortGUID, ib.PKey(i.PKey), i.QKey)
		if i.Subnet != "" {
			fmt.Fprintf(w, "    subnet %s, broadcast mlid %#04x\n", i.Subnet, i.BcastMLID)
		}
		if i.CMModes != "" {
			fmt.Fprintf(w, "    cm modes %s policy %s, %d connections\n", i.CMModes, i.Policy, i.Conns)
			fmt.Fprintf(w, "    cm %s\n", i.Info.CM)
		}
		fmt.Fprintf(w, "    connected mode %s: %s\n", advertised(i.ConnService.Advertise), i.ConnService.Why)
		for _, a := range i.Addrs {
			fmt.Fprintf(w, "    inet %s\n", a)
		}
		if len(i.Groups) > 0 {
			fmt.Fprintf(w, "    groups %s\n", strings.Join(i.Groups, " "))
		}
		fmt.Fprintf(w, "    %d neighbors\n", i.Neighbors)
		if i.Parent != "" {
			fmt.Fprintf(w, "    child of %s\n", i.Parent)
		}
		for _, c := range i.Children {
			fmt.Fprintf(w, "    child %s pkey %v", c.Name, ib.PKey(c.PKey))
			if c.Netns != "" {
				fmt.Fprintf(w, " netns %s owner %s", c.Netns, orDash(c.Owner))
			}
			fmt.Fprintln(w)
		}
		for _, u := range i.Unserved {
			fmt.Fprintf(w, "    unserved %s", u.Name)
			if u.Netns != "" {
				fmt.Fprintf(w, " netns %s owner %s", u.Netns, orDash(u.Owner))
			}
			fmt.Fprintf(w, ": %s\n", u.Why)
		}
	case "neigh":
		var ns []ipoib.NeighInfo
		if err := json.Unmarshal(raw, &ns); err != nil {
			return err
		}
		fmt.Fprintln(w, "ADDRESS\tVIA\tMTU\tSTATE\tQPN\tPENDING\tLLADDR")
		for _, n := range ns {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", n.IP, n.Via, dash(n.MTU), n.State, qpn(n.QPN), n.Pending, orDash(n.LinkAddr))
		}
	case "stats":
		var cs []ib.Counter
		if err := json.Unmarshal(raw, &cs); err != nil {
			return err
		}
		printStats(w, cs, all)
	}
	return nil
}

// printStats prints the counters above 0 (all: every one), marking those
// whose value means trouble (a loss or a failure) with what they count;
// the man page's COUNTERS section explains every one.
func printStats(w io.Writer, cs []ib.Counter, all bool) {
	hidden := 0
	for _, c := range cs {
		if c.Value == 0 && !all {
			hidden++
			continue
		}
		if c.Value > 0 && counterdoc.IsTrouble(c.Name) {
			e, _ := counterdoc.Lookup(c.Name)
			fmt.Fprintf(w, "%s\t%d\tTROUBLE: %s\n", c.Name, c.Value, e.Meaning)
			continue
		}
		fmt.Fprintf(w, "%s\t%d\n", c.Name, c.Value)
	}
	if hidden > 0 {
		fmt.Fprintf(w, "(%d counters at 0 not shown; ipoibd stats --all shows every one, man ipoibd explains them)\n", hidden)
	}
}

func qpn(q uint32) string {
	if q == 0 {
		return "-"
	}
	return fmt.Sprintf("0x%06x", q)
}

func dash(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// showReply is `show`: the interface, and the daemon's choice of
// connection service. Its fields include control.Show's, which the CNI
// plugin reads.
type showReply struct {
	ipoib.Info
	ConnService connServiceChoice   `json:"cm_choice"`
	Parent      string              `json:"parent"`   // a child's parent, "" for the first interface
	Children    []control.ChildInfo `json:"children"` // the first interface's P_Key children
	// Unserved, on the first interface, are interfaces an earlier daemon
	// left that none serves (carrier off, unreachable).
	Unserved []unservedInfo `json:"unserved,omitempty"`
}

func advertised(b bool) string {
	if b {
		return "advertised"
	}
	return "not advertised"
}
