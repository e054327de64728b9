// Command sibpingpong is rdma-core's ibv_rc_pingpong, ibv_uc_pingpong,
// ibv_ud_pingpong and ibv_srq_pingpong on softib: it speaks their
// out-of-band exchange (TCP, "LID:QPN:PSN:GID") and their message pattern,
// so that either role can be played against the real programs on a real
// RDMA stack (rxe in the test bed, scripts/testbed.d/pingpong.sh). Unlike
// them it checks what it receives (length, content, UD source) and prints
// softib's counters at exit. Exit status 0 only when every iteration
// completed and every message was right.
//
//	sibpingpong -t rc -a 192.0.2.2 [-s 4096] [-n 1000] [-m 1024]       server
//	sibpingpong -t rc -a 192.0.2.2 [-s 4096] [-n 1000] [-m 1024] HOST  client
package main

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	flag "github.com/spf13/pflag"
)

func main() {
	var (
		c       config
		typ     string
		local   string
		mtu     int
		udpPort uint16
	)
	flag.StringVarP(&typ, "type", "t", "rc", "pingpong: rc, uc, ud or srq")
	flag.StringVarP(&local, "addr", "a", "", "softib's underlay address (IPv4 or IPv6; the GID follows from it)")
	flag.IntVarP(&c.tcpPort, "port", "p", 18515, "TCP port of the address exchange")
	flag.IntVarP(&c.size, "size", "s", 0, "message size (default 4096, ud 2048)")
	flag.IntVarP(&c.iters, "iters", "n", 1000, "number of exchanges")
	flag.IntVarP(&mtu, "mtu", "m", 1024, "path MTU (rc, uc, srq)")
	flag.IntVarP(&c.rxDepth, "rx-depth", "r", 500, "receives to post at a time")
	flag.IntVarP(&c.numQP, "num-qp", "q", 16, "number of QPs (srq)")
	flag.IntVarP(new(int), "gid-idx", "g", 0, "accepted for rdma-core's command line; softib has one GID")
	flag.Uint16Var(&udpPort, "udp-port", 4791, "softib's UDP port (RoCEv2's by default)")
	flag.DurationVar(&c.timeout, "timeout", 120*time.Second, "give up after this long")
	flag.BoolVar(&c.cqHandler, "cq-handler", true, "drain the CQ on softib's receive goroutine (ib.CQHandler) instead of waking the main one")
	flag.Parse()

	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "sibpingpong: "+format+"\n", a...)
		os.Exit(2)
	}
	var err error
	if c.kind, err = parseKind(typ); err != nil {
		fail("%v", err)
	}
	if c.local, err = netip.ParseAddr(local); err != nil {
		fail("-a: %v", err)
	}
	if c.mtu, err = ib.MTUFromBytes(mtu); err != nil {
		fail("-m: %v", err)
	}
	switch flag.NArg() {
	case 0:
	case 1:
		c.server = flag.Arg(0)
	default:
		fail("one server name at most")
	}
	if c.size == 0 {
		c.size = 4096
		if c.kind == kindUD {
			c.size = 2048
		}
	}
	if c.kind != kindSRQ {
		c.numQP = 1
	}
	c.udpPort = udpPort
	if err := c.check(); err != nil {
		fail("%v", err)
	}
	if err := run(c, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "sibpingpong: %v\n", err)
		os.Exit(1)
	}
}
