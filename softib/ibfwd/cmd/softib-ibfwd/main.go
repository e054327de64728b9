// Command softib-ibfwd runs the fabric forwarder of a simulated
// InfiniBand subnet for softib ports on the InfiniBand link layer, with
// tables given on the command line:
//
//	softib-ibfwd -listen 10.77.0.254:4790 \
//	    -port 0x0002c90300000001,0x11@10.77.0.1:4791 \
//	    -port 0x0002c90300000002,0x12@10.77.0.2:4791 \
//	    -group 0xc001=0x0002c90300000001,0x0002c90300000002 -sl2vl 0=0,1=15
//
// Each -port is registered and its LIDs routed to it. It prints its
// counters on SIGUSR1 and when it ends (SIGINT, SIGTERM).
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ipoibd/ipoibd/softib/ibfwd"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, " ") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	listen := flag.String("listen", "127.0.0.1:4790", "underlay `address:port` the ports send to")
	sl2vl := flag.String("sl2vl", "", "SL-to-VL map, `SL=VL,...` (unlisted SLs: VL0; VL 15 drops)")
	var ports, groups list
	flag.Var(&ports, "port", "a port, `GUID,LID[,LMC]@addr:port` (repeat)")
	flag.Var(&groups, "group", "a multicast table entry, `MLID=GUID,...` (repeat)")
	flag.Parse()
	if err := run(*listen, *sl2vl, ports, groups); err != nil {
		fmt.Fprintln(os.Stderr, "softib-ibfwd:", err)
		os.Exit(1)
	}
}

func run(listen, sl2vl string, ports, groups []string) error {
	addr, err := netip.ParseAddrPort(listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	routes := ibfwd.NewStatic()
	if sl2vl != "" {
		if err := ibfwd.ParseSL2VL(sl2vl, &routes.SL2VL); err != nil {
			return err
		}
	}
	var regs []ibfwd.Port
	for _, s := range ports {
		p, err := ibfwd.ParsePort(s)
		if err != nil {
			return err
		}
		if err := routes.AddPort(p.GUID, p.LID, p.LMC); err != nil {
			return err
		}
		regs = append(regs, p)
	}
	for _, s := range groups {
		mlid, guids, err := ibfwd.ParseGroup(s)
		if err != nil {
			return err
		}
		if err := routes.AddGroup(mlid, guids...); err != nil {
			return err
		}
	}
	f, err := ibfwd.New(addr, routes)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range regs {
		if err := f.Register(p); err != nil {
			return err
		}
	}
	fmt.Printf("forwarding on %v for %d ports\n", f.Addr(), len(regs))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGINT, syscall.SIGTERM)
	for s := range sig {
		for _, c := range f.Counters() {
			fmt.Printf("%s %d\n", c.Name, c.Value)
		}
		if s != syscall.SIGUSR1 {
			return nil
		}
	}
	return nil
}
