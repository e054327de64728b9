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
//
// With -sm-node it forwards by the tables the subnet manager of an ibsim
// fabric programmed instead: it reads them with infiniband-diags
// (ibroute, ibroute -M, smpquery sl2vl) run as that node under ibsim's
// libumad2sim.so, and again every -refresh, so that a join's new MFT
// entry takes effect (fabric.go). The -port flags then only register the
// ports (GUIDs and LIDs are the fabric's, e.g. from ibstat):
//
//	IBSIM_SERVER_NAME=10.77.0.254 IBSIM_SERVER_PORT=7070 \
//	softib-ibfwd -listen 10.77.0.254:4790 -sm-node sm \
//	    -port 0x0000000000100001,1@10.77.0.1:4791 ...
//
// -capture writes the MADs (QP1 frames) the ports send as a pcap file of
// link type 247 (InfiniBand, LRH through VCRC).
//
// -cross-reqs 3s holds each CM REQ from one port to another until the
// REQ back comes, at most that long, so that two peers' REQs cross
// (ibfwd.Forwarder.CrossREQs); each outcome is printed ("crossed: ..." or
// "alone: ...") and counted (reqs_crossed, reqs_held_alone). -paths
// prints the way the unicast packets of each (SLID, DLID) pair went
// ("path: slid 1 dlid 3 from GUID to GUID hops SWITCH:IN>OUT ..."), when
// first seen and when new tables change it, for comparison with
// ibtracert.
//
// The counters are printed on one line, "counters: name=value ...".
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

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
	var fc fabricConfig
	flag.StringVar(&fc.node, "sm-node", "", "read the tables the subnet manager programmed, running infiniband-diags as this ibsim `node` (under -umad2sim; IBSIM_SOCKNAME or IBSIM_SERVER_NAME/_PORT from the environment); -group and -sl2vl are then refused")
	flag.StringVar(&fc.umad2sim, "umad2sim", defaultUmad2sim, "ibsim's libumad2sim.so, preloaded into the infiniband-diags commands of -sm-node")
	flag.StringVar(&fc.swLID, "switch", "", "with -sm-node: read only this switch's tables, `LID` (default: every switch, walked hop by hop)")
	flag.DurationVar(&fc.refresh, "refresh", time.Second, "with -sm-node: how often the tables are read again (0: once)")
	var o outputs
	flag.StringVar(&o.capture, "capture", "", "write the MADs (QP1 frames) ports send to this pcap `file`, link type 247")
	flag.DurationVar(&o.crossREQs, "cross-reqs", 0, "hold each CM REQ from one port to another up to this `long` until the REQ back comes, so that both peers' REQs cross (0: never)")
	flag.BoolVar(&o.paths, "paths", false, "print the way each (SLID, DLID) pair's unicast packets went through the switches, when first seen and when it changes")
	flag.Parse()
	if err := run(*listen, *sl2vl, ports, groups, fc, o); err != nil {
		fmt.Fprintln(os.Stderr, "softib-ibfwd:", err)
		os.Exit(1)
	}
}

// outputs are the options of what the forwarder does besides forwarding.
type outputs struct {
	capture   string
	crossREQs time.Duration
	paths     bool
}

// start sets f up as o asks; the returned function closes the capture.
func (o outputs) start(f *ibfwd.Forwarder) (func(), error) {
	if o.crossREQs < 0 {
		return nil, fmt.Errorf("-cross-reqs %v: want a duration from 0 on", o.crossREQs)
	}
	if o.crossREQs > 0 {
		f.CrossREQs(o.crossREQs, func(c ibfwd.Crossing) { fmt.Println(c) })
	}
	if o.paths {
		f.RecordPaths(func(p ibfwd.PathRecord) { fmt.Println("path:", p) })
	}
	if o.capture == "" {
		return func() {}, nil
	}
	w, err := newCapture(o.capture)
	if err != nil {
		return nil, err
	}
	f.SetTap(w.tap)
	return func() { w.Close() }, nil
}

func run(listen, sl2vl string, ports, groups []string, fc fabricConfig, o outputs) error {
	addr, err := netip.ParseAddrPort(listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	if fc.node != "" {
		if sl2vl != "" || len(groups) > 0 {
			return fmt.Errorf("-sm-node reads the multicast and SL-to-VL tables from the fabric: no -group or -sl2vl with it")
		}
		return runFabric(addr, ports, fc, o)
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
	closeOutputs, err := o.start(f)
	if err != nil {
		return err
	}
	defer closeOutputs()
	for _, p := range regs {
		if err := f.Register(p); err != nil {
			return err
		}
	}
	fmt.Printf("forwarding on %v for %d ports\n", f.Addr(), len(regs))
	serveSignals(f, nil)
	return nil
}

// serveSignals prints the counters, one line, on SIGUSR1 and at the end
// (SIGINT, SIGTERM); stop, if not nil, is closed at the end.
func serveSignals(f *ibfwd.Forwarder, stop chan struct{}) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGINT, syscall.SIGTERM)
	for s := range sig {
		var b strings.Builder
		b.WriteString("counters:")
		for _, c := range f.Counters() {
			fmt.Fprintf(&b, " %s=%d", c.Name, c.Value)
		}
		fmt.Println(b.String())
		if s != syscall.SIGUSR1 {
			if stop != nil {
				close(stop)
			}
			return
		}
	}
}
