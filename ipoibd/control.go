package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// The control socket is an abstract Unix socket named after the interface.
// Abstract sockets belong to the network namespace, like the interface, so
// `ip netns exec h1 ipoibd neigh` reaches the daemon of that namespace.
// Only root may ask (checked with SO_PEERCRED).

func socketName(ifname string) string { return "@ipoibd/" + ifname }

type request struct {
	Cmd string `json:"cmd"`
}

type controlServer struct {
	ln    *net.UnixListener
	iface *ipoib.Interface
	cm    cmChoice
}

func listenControl(ifname string, iface *ipoib.Interface, choice cmChoice) (*controlServer, error) {
	// The socket lives in the interface's namespace, where `ipoibd show`
	// finds it (abstract names are per namespace).
	var ln *net.UnixListener
	err := iface.InNetns(func() (err error) {
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: socketName(ifname), Net: "unix"})
		return err
	})
	if err != nil {
		if errors.Is(err, unix.EADDRINUSE) {
			return nil, fmt.Errorf("another ipoibd already serves %s in this network namespace", ifname)
		}
		return nil, fmt.Errorf("control socket: %w", err)
	}
	s := &controlServer{ln: ln, iface: iface, cm: choice}
	go s.serve()
	return s, nil
}

func (s *controlServer) Close() error { return s.ln.Close() }

func (s *controlServer) serve() {
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		go s.handle(conn)
	}
}

func (s *controlServer) handle(conn *net.UnixConn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	enc := json.NewEncoder(conn)
	if !peerIsRoot(conn) {
		_ = enc.Encode(map[string]string{"error": "permission denied: only root may query ipoibd"})
		return
	}
	var req request
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&req); err != nil {
		_ = enc.Encode(map[string]string{"error": "bad request"})
		return
	}
	var reply any
	switch req.Cmd {
	case "show":
		reply = showReply{Info: s.iface.Show(), CM: s.cm}
	case "neigh":
		reply = s.iface.Neighbors()
	case "conn":
		reply = s.iface.Connections()
	case "stats":
		reply = s.iface.Stats()
	default:
		reply = map[string]string{"error": "unknown command " + req.Cmd}
	}
	_ = enc.Encode(reply)
}

func peerIsRoot(conn *net.UnixConn) bool {
	raw, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	return err == nil && cred != nil && cred.Uid == 0
}

// query asks a running daemon and prints its answer as a table or JSON.
func query(cmd string, args []string) error {
	fs := pflag.NewFlagSet("ipoibd "+cmd, pflag.ContinueOnError)
	ifname := fs.String("ifname", "ib0", "interface whose daemon to ask")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socketName(*ifname), Net: "unix"})
	if err != nil {
		return fmt.Errorf("no ipoibd serves %s in this network namespace (%v)", *ifname, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := json.NewEncoder(conn).Encode(request{Cmd: cmd}); err != nil {
		return err
	}
	var raw json.RawMessage
	if err := json.NewDecoder(conn).Decode(&raw); err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		return errors.New(e.Error)
	}
	if *asJSON {
		_, err := os.Stdout.Write(append(raw, '\n'))
		return err
	}
	return printTable(cmd, raw)
}

func printTable(cmd string, raw json.RawMessage) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
	defer w.Flush()
	switch cmd {
	case "show":
		var i showReply
		if err := json.Unmarshal(raw, &i); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %s mode, mtu %d (UD %d, IB %d), device %s (%s)\n", i.Name, i.Mode, i.MTU, i.UDMTU, i.IBMTU, i.Device, i.LinkLayer)
		fmt.Fprintf(w, "    link/infiniband %s\n", i.LinkAddr)
		fmt.Fprintf(w, "    gid %s pkey %s\n", i.GID, i.PKey)
		if i.CMModes != "" {
			fmt.Fprintf(w, "    cm modes %s policy %s, %d connections\n", i.CMModes, i.Policy, i.Conns)
			fmt.Fprintf(w, "    cm %s\n", i.Info.CM)
		}
		fmt.Fprintf(w, "    connected mode %s: %s\n", advertised(i.CM.Advertise), i.CM.Why)
		for _, a := range i.Addrs {
			fmt.Fprintf(w, "    inet %s\n", a)
		}
		if len(i.Groups) > 0 {
			fmt.Fprintf(w, "    groups %s\n", strings.Join(i.Groups, " "))
		}
		fmt.Fprintf(w, "    %d neighbors\n", i.Neighbors)
	case "neigh":
		var ns []ipoib.NeighInfo
		if err := json.Unmarshal(raw, &ns); err != nil {
			return err
		}
		fmt.Fprintln(w, "ADDRESS\tVIA\tMTU\tSTATE\tQPN\tPENDING\tLLADDR")
		for _, n := range ns {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", n.IP, n.Via, dash(n.MTU), n.State, qpn(n.QPN), n.Pending, orDash(n.LinkAddr))
		}
	case "conn":
		var cs []ipoib.ConnInfo
		if err := json.Unmarshal(raw, &cs); err != nil {
			return err
		}
		fmt.Fprintln(w, "PEER\tTYPE\tDIR\tSTATE\tQP\tSENDS\tQPN\tMTU\tPACKETS\tAGE")
		for _, c := range cs {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", c.Peer, c.Type, c.Direction, c.State, c.QPState, yesNo(c.Sends), qpn(c.LocalQPN), c.MTU, c.Packets, c.Age)
		}
	case "stats":
		var cs []ib.Counter
		if err := json.Unmarshal(raw, &cs); err != nil {
			return err
		}
		for _, c := range cs {
			if c.Value != 0 || !strings.Contains(c.Name, "drop") {
				fmt.Fprintf(w, "%s\t%d\n", c.Name, c.Value)
			}
		}
	}
	return nil
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
// connection service.
type showReply struct {
	ipoib.Info
	CM cmChoice `json:"cm_choice"`
}

func advertised(b bool) string {
	if b {
		return "advertised"
	}
	return "not advertised"
}
