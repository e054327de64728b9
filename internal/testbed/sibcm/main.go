// Command sibcm runs ipoibd's CM engine (cm.Engine) on softib's QP1 against
// rdma_cm programs on a real kernel: ucmatose from rdmacm-utils in the rxe
// test bed (scripts/testbed.d/rdmacm.sh). It plays ucmatose's other half:
// rdma_cm's IP addressing (port-space service IDs and the private-data
// header, cmahdr.go) over our engine, then ucmatose's message pattern on
// one RC queue pair, so that the kernel's ib_cm and rdma_cm judge every CM
// message we send and we judge every one they send.
//
//	sibcm -a ADDR [-p PORT] connect HOST   active: REQ to HOST, REP, RTU, data, the peer's DREQ
//	sibcm -a ADDR [-p PORT] listen         passive: REQ from the peer, REP, RTU, data, our DREQ
//
// connect --expect-reject N succeeds only when the REQ draws REJ reason N;
// connect --abandon reply|timeout refuses the REP (REJ 28) or gives up on it
// (REJ 4, as after a timeout) or forgets the REQ as a restarted daemon
// would (restart: the REP draws REJ 6); listen --reject N,M,... refuses successive
// REQs with those reasons. It prints what it saw of the peer's CM messages,
// the engine's and softib's counters, then "sibcm: PASS ..." and exits 0,
// or "sibcm: FAIL: why" and exits 1.
package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	flag "github.com/spf13/pflag"
)

func main() {
	c := parseArgs()
	s, err := open(c, os.Stdout)
	if err != nil {
		fmt.Printf("sibcm: FAIL: %v\n", err)
		os.Exit(1)
	}
	err = s.run()
	s.close()
	if err != nil {
		fmt.Printf("sibcm: FAIL: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("sibcm: PASS %s\n", s.summary)
}

// usage reports a command line sibcm cannot run and exits 2.
func usage(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "sibcm: "+format+"\n", a...)
	os.Exit(2)
}

// textFlags are the flags config holds in another form than they are given.
type textFlags struct {
	local, ps, rejects    string
	abandon, expectReject string
}

// parseArgs reads the command line into a config, or exits through usage.
func parseArgs() config {
	var (
		c config
		f textFlags
	)
	flag.StringVarP(&f.local, "addr", "a", "", "softib's underlay address (the GID follows from it)")
	flag.Uint16VarP(&c.port, "port", "p", 7471, "rdma_cm port: the service ID's low 16 bits")
	flag.StringVarP(&f.ps, "port-space", "P", "tcp", "rdma_cm port space: tcp or ib")
	flag.IntVarP(&c.count, "count", "C", 10, "messages each way, as ucmatose -C")
	flag.IntVarP(&c.size, "size", "S", 100, "message size, as ucmatose -S (the peer's must be the same)")
	flag.BoolVar(&c.dreq, "dreq", false, "send the DREQ once the data is done (default: wait for the peer's)")
	flag.StringVar(&f.expectReject, "expect-reject", "", "connect: pass only if the REQ draws a REJ with this reason")
	flag.StringVar(&f.abandon, "abandon", "", "connect: answer the REP with REJ 28 (reply) or REJ 4 (timeout) instead of an RTU, or restart the engine after the REQ (restart: the REP draws REJ 6)")
	flag.StringVar(&f.rejects, "reject", "", "listen: refuse successive REQs with these reasons (comma-separated), then exit")
	flag.Uint16Var(&c.srcPort, "src-port", 0, "connect: our port in the rdma_cm header (default: random)")
	flag.StringVar(&c.private, "private", "sibcm", "connect: consumer private data after the rdma_cm header")
	flag.Uint8Var(&c.cmTimeout, "cm-timeout", 18, "CM response timeout code (4.096 µs × 2^code)")
	flag.Uint8Var(&c.cmRetries, "cm-retries", 6, "CM retries of a REQ, REP or DREQ")
	flag.DurationVar(&c.timeout, "timeout", 60*time.Second, "give up after this long")
	flag.Parse()

	c.setFlags(f)
	c.setCommand()
	if err := c.check(); err != nil {
		usage("%v", err)
	}
	return c
}

// setFlags takes the flags of f into c, or exits through usage.
func (c *config) setFlags(f textFlags) {
	var err error
	if c.local, err = netip.ParseAddr(f.local); err != nil {
		usage("-a: %v", err)
	}
	switch f.ps {
	case "tcp":
		c.ps = psTCP
	case "ib":
		c.ps = psIB
	default:
		usage("-P %q: tcp or ib", f.ps)
	}
	if c.expectReject, err = parseReasons(f.expectReject); err != nil || len(c.expectReject) > 1 {
		usage("--expect-reject %q: one reason code", f.expectReject)
	}
	if c.rejects, err = parseReasons(f.rejects); err != nil {
		usage("--reject: %v", err)
	}
	switch f.abandon {
	case "", "reply", "timeout", "restart":
		c.abandon = f.abandon
	default:
		usage("--abandon %q: reply, timeout or restart", f.abandon)
	}
}

// setCommand takes the command (connect HOST or listen) into c, or exits
// through usage.
func (c *config) setCommand() {
	var err error
	switch {
	case flag.NArg() == 2 && flag.Arg(0) == "connect":
		c.active = true
		if c.remote, err = netip.ParseAddr(flag.Arg(1)); err != nil {
			usage("connect: %v", err)
		}
		if len(c.rejects) > 0 {
			usage("--reject is for listen")
		}
	case flag.NArg() == 1 && flag.Arg(0) == "listen":
		if len(c.expectReject) > 0 || c.abandon != "" {
			usage("--expect-reject and --abandon are for connect")
		}
	default:
		usage("usage: sibcm -a ADDR [flags] connect HOST | listen")
	}
}

// parseReasons reads a comma-separated list of REJ reason codes.
func parseReasons(s string) ([]cm.RejectReason, error) {
	if s == "" {
		return nil, nil
	}
	var out []cm.RejectReason
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("reason %q is not a REJ reason code", f)
		}
		out = append(out, cm.RejectReason(n))
	}
	return out, nil
}

// config is one run's command line.
type config struct {
	active        bool
	local, remote netip.Addr
	ps, port      uint16
	srcPort       uint16
	count, size   int
	dreq          bool
	private       string
	expectReject  []cm.RejectReason
	abandon       string
	rejects       []cm.RejectReason
	cmTimeout     uint8
	cmRetries     uint8
	timeout       time.Duration
}

func (c *config) check() error {
	switch {
	case c.local.Unmap().Is4() != c.remote.Unmap().Is4() && c.active:
		return errors.New("-a and HOST are not one IP version")
	case c.count < 0 || c.count > 4096:
		return fmt.Errorf("-C %d: 0 to 4096 messages", c.count)
	case c.size < 1 || c.size > 1<<20:
		return fmt.Errorf("-S %d: 1 octet to 1 MiB", c.size)
	case len(c.private) > 92-cmaHeaderLen:
		return fmt.Errorf("--private: %d octets, a REQ has room for %d after the rdma_cm header", len(c.private), 92-cmaHeaderLen)
	case c.cmTimeout > 31:
		return fmt.Errorf("--cm-timeout %d: a 5-bit code", c.cmTimeout)
	case c.cmRetries > 15:
		return fmt.Errorf("--cm-retries %d: a 4-bit count", c.cmRetries)
	}
	return nil
}
