//go:build linux && rdma

// Command saclient runs one request of the umadsa SA client and prints
// the answer as one JSON object: the judge's hands on a port of an ibsim
// fabric (run it with LD_PRELOAD=libumad2sim.so SIM_HOST=node), or on a
// real one.
//
//	saclient [flags] port
//	saclient [flags] path DGID
//	saclient [flags] join MGID        (as a full member; --like or --qkey: create if new)
//	saclient [flags] leave MGID
//	saclient [flags] silent DURATION    (an SA that never answers: judge.go)
//	saclient [flags] -dgid GID dupsend DGID
//
// Errors are one line on stderr and exit status 1. It always leaves
// through C's exit: libumad2sim.so frees the simulator's slot in an atexit
// handler.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/sa"
	"github.com/ipoibd/ipoibd/umadsa"
)

func main() {
	ca := flag.String("ca", "", "the device (default: libibumad's first)")
	port := flag.Int("port", 0, "the port (default: the first active)")
	timeout := flag.Duration("timeout", 300*time.Millisecond, "one try's wait for the SA")
	retries := flag.Int("retries", 2, "tries after the first (0: none)")
	pkey := flag.String("pkey", "0xffff", "the partition")
	like := flag.String("like", "", "join: create the group with this group's parameters (joined first), as the kernel's ipoib creates a group like its broadcast group")
	qkey := flag.String("qkey", "", "join: create the group with this Q_Key (and MTU code 4, rate code 3)")
	state := flag.Uint("state", 1, "join/leave: the join state bits (1 full, 8 send-only full)")
	dgid := flag.String("dgid", "", "send to the SA at this GID (with a GRH) instead of the SM's LID: a silent agent on a RoCE port")
	gidIndex := flag.Int("gid-index", 0, "with -dgid: the port's GID index to send from")
	flag.Parse()
	if *retries == 0 {
		*retries = -1 // umadsa's "none"
	}
	var err error
	if *dgid != "" || len(flag.Args()) > 0 && flag.Arg(0) == "silent" {
		err = judge(flag.Args(), *ca, *port, *timeout, *retries, *dgid, *gidIndex)
	} else {
		err = run(flag.Args(), *ca, *port, *timeout, *retries, *pkey, *like, *qkey, sa.JoinState(*state))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "saclient:", err)
		umadsa.Exit(1)
	}
	umadsa.Exit(0)
}

func run(args []string, ca string, port int, timeout time.Duration, retries int, pkeyS, like, qkeyS string, state sa.JoinState) error {
	if len(args) < 1 {
		return errors.New("usage: saclient [flags] port | path DGID | join MGID | leave MGID")
	}
	pk, err := ib.ParsePKey(pkeyS)
	if err != nil {
		return err
	}
	if args[0] == "port" {
		pi, err := umadsa.QueryPort(ca, port)
		if err != nil {
			return err
		}
		return emit(map[string]any{"lid": pi.LID, "sm_lid": pi.SMLID, "sm_sl": pi.SMSL, "state": pi.State, "gid": pi.GID.String(), "pkey0": uint16(pi.PKey0)})
	}
	if len(args) != 2 {
		return fmt.Errorf("%s needs one GID", args[0])
	}
	g, err := ib.ParseGID(args[1])
	if err != nil {
		return err
	}
	c, err := umadsa.NewPortClient(ca, port, timeout, retries)
	if err != nil {
		return err
	}
	defer c.Close()
	switch args[0] {
	case "path":
		p, err := c.PathRecord(g, pk)
		if err != nil {
			return err
		}
		return emit(map[string]any{"dgid": p.DGID.String(), "sgid": p.SGID.String(), "dlid": p.DLID, "slid": p.SLID,
			"sl": p.SL, "mtu": p.MTU.Value, "mtu_selector": uint8(p.MTU.Selector), "rate": p.Rate.Value,
			"pkt_life": p.Lifetime.Value, "hop_limit": p.HopLimit, "tclass": p.TClass, "flow_label": p.FlowLabel,
			"pkey": uint16(p.PKey), "reversible": p.Reversible, "numb_path": p.NumbPath})
	case "join":
		j := sa.JoinRequest{MGID: g, PKey: pk, State: state}
		switch {
		case like != "":
			lg, err := ib.ParseGID(like)
			if err != nil {
				return err
			}
			b, err := c.Join(sa.JoinRequest{MGID: lg, PKey: pk})
			if err != nil {
				return fmt.Errorf("joining %v for its parameters: %w", lg, err)
			}
			j.Create = sa.ParamsOf(b)
		case qkeyS != "":
			q, err := strconv.ParseUint(qkeyS, 0, 32)
			if err != nil {
				return err
			}
			j.Create = &sa.GroupParams{QKey: ib.QKey(q), MTU: sa.Selected{Selector: sa.Exactly, Value: 4},
				Rate: sa.Selected{Selector: sa.Exactly, Value: 3}}
		}
		m, err := c.Join(j)
		if err != nil {
			return err
		}
		return emit(map[string]any{"mgid": m.MGID.String(), "port_gid": m.PortGID.String(), "qkey": uint32(m.QKey),
			"mlid": m.MLID, "mtu": m.MTU.Value, "mtu_selector": uint8(m.MTU.Selector), "rate": m.Rate.Value,
			"pkey": uint16(m.PKey), "sl": m.SL, "hop_limit": m.HopLimit, "scope": m.Scope, "join_state": uint8(m.JoinState)})
	case "leave":
		if err := c.Leave(g, pk, state); err != nil {
			return err
		}
		return emit(map[string]any{"left": g.String()})
	}
	return fmt.Errorf("unknown request %q", args[0])
}

// judge runs the requests of judge.go, and path through a client
// addressed by GID.
func judge(args []string, ca string, port int, timeout time.Duration, retries int, dgidS string, gidIndex int) error {
	if len(args) != 2 {
		return errors.New("usage: saclient silent DURATION | -dgid GID dupsend DGID | -dgid GID path DGID")
	}
	if args[0] == "silent" {
		d, err := time.ParseDuration(args[1])
		if err != nil {
			return err
		}
		return silent(ca, port, d)
	}
	dgid, err := ib.ParseGID(dgidS)
	if err != nil {
		return err
	}
	target, err := ib.ParseGID(args[1])
	if err != nil {
		return err
	}
	u, pi, err := byGID(ca, port, dgid, gidIndex)
	if err != nil {
		return err
	}
	switch args[0] {
	case "dupsend":
		defer u.Close()
		return dupsend(u, pi, target, 2*time.Second)
	case "path":
		// The LID beside the GRH: any but 0, which the client takes for
		// "no SM".
		c := umadsa.New(u, umadsa.Config{PortGID: pi.GID, SMLID: func() (uint16, error) { return 1, nil }, Timeout: timeout, Retries: retries})
		defer c.Close()
		_, err := c.PathRecord(target, 0xffff)
		return emit(map[string]any{"error": errText(err), "timed_out": errors.As(err, new(*umadsa.TimeoutError)),
			"einval": errors.Is(err, syscall.EINVAL), "requests": c.C.Requests.Load(), "retries": c.C.Retries.Load()})
	}
	return fmt.Errorf("unknown request %q with -dgid", args[0])
}

func emit(v any) error { return json.NewEncoder(os.Stdout).Encode(v) }
