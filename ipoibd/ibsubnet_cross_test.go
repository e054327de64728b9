package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/internal/ibsim"
	"github.com/ipoibd/ipoibd/softib/ibfwd"
)

// TestIBSubnetCrossing: two ipoibd on an ibsim subnet (h1 on sw1, h2 on
// sw2) start pinging each other at once, and their CM REQs cross on the
// fabric for certain: softib-ibfwd -cross-reqs holds the first REQ until
// the one back comes. Under each policy the judges are the forwarder's
// count of the crossing and its capture (both REQs before any REP), each
// daemon's CM counters (linux: both accept, two one-way connections;
// rfc: the larger link address rejects, the smaller accepts, one
// connection both use), every connection established and none left in
// setup, and 65000-octet DF pings both ways over RC. The way the packets
// of each direction went through the switches (-paths) is the one
// ibtracert gives for the two LIDs.
func TestIBSubnetCrossing(t *testing.T) {
	ibsim.Need(t, "ibroute", "ibtracert", "tshark")
	const fabHost = 3
	c := newCluster(t, "ibcr", fabHost)
	// Built before the fabric: a build error fails at once.
	if _, err := ibBinaries(); err != nil {
		t.Fatal(err)
	}
	fab := ibsim.UpWith(t, ibsim.Options{Topology: ibSubnetTopology, SMNode: "sm", Netns: c.host(fabHost), Server: c.tn.Underlay(fabHost)})
	nodes := map[int]ibNode{1: ibstatPort(t, fab, "h1"), 2: ibstatPort(t, fab, "h2")}
	fwdAddr := fmt.Sprintf("%s:4790", c.tn.Underlay(fabHost))
	mads := filepath.Join(fab.Dir(), "mads.pcap")
	args := []string{"-listen", fwdAddr, "-sm-node", "sm", "-refresh", "300ms", "-cross-reqs", "3s", "-paths", "-capture", mads}
	for k := 1; k <= 2; k++ {
		args = append(args, "-port", fmt.Sprintf("%#x,%d@%s:4791", nodes[k].guid, nodes[k].lid, c.underlay(k)))
	}
	fwd := startForwarder(t, c, fabHost, fab, args)
	runOnFabric(t, c, fab, 2)

	policies := []string{"linux", "rfc"}
	var rounds []int // the capture's records before each policy's round
	for _, policy := range policies {
		for k := 1; k <= 2; k++ {
			c.start(k, "--softib-link", "ib", "--softib-fabric", fwdAddr, "--cm-policy", policy)
		}
		// The broadcast group is forwarded before the first ARP.
		var mlids []string
		for _, sw := range []string{"sw1", "sw2"} {
			mlids = append(mlids, mftMLIDs(fab.Output(t, "sm", exec.Command("ibroute", "-M", fab.SwitchLIDOf(t, sw))))...)
		}
		fwd.await(t, mlids, 20*time.Second)
		before := fwd.Counters(t)
		rounds = append(rounds, pcapRecords(t, mads))
		fwd.mu.Lock()
		crossingsBefore := len(fwd.crossings)
		fwd.mu.Unlock()

		// Both start at once; each one's first ping goes by UD while its
		// REQ is held.
		start := time.Now()
		errs := make(chan error, 2)
		for _, p := range [][2]int{{1, 2}, {2, 1}} {
			go func() { errs <- reach(c, p[0], c.ip4(p[1]), start, 20*time.Second) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("%s: %v", policy, err)
			}
		}
		fwd.wait(t, "crossing", 10*time.Second, func() bool { return len(fwd.crossings) > crossingsBefore })
		fwd.mu.Lock()
		crossing := fwd.crossings[crossingsBefore]
		fwd.mu.Unlock()
		t.Logf("%s: pings answered both ways %.2f s after they started; softib-ibfwd %s", policy, time.Since(start).Seconds(), crossing)
		if !strings.HasPrefix(crossing, "crossed:") {
			t.Fatalf("%s: the REQ was not crossed: %s", policy, crossing)
		}
		for _, p := range [][2]int{{1, 2}, {2, 1}} {
			c.ping(p[0], c.ip4(p[1]), 2)
		}
		checkCrossed(t, c, policy)
		for _, p := range [][2]int{{1, 2}, {2, 1}} {
			if n := c.neighbors(p[0])[c.ip4(p[1])]; n.Via != "RC" {
				t.Errorf("%s: h%d's neighbor h%d = %+v, want via RC", policy, p[0], p[1], n)
			}
			c.on(p[0], "ping", "-c", "2", "-i", "0.1", "-W", "2", "-M", "do", "-s", "65000", c.ip4(p[1]))
		}
		// One crossing, and no REQ since (none held alone).
		after := fwd.Counters(t)
		if n := after["reqs_crossed"] - before["reqs_crossed"]; n != 1 || after["reqs_held_alone"] != before["reqs_held_alone"] {
			t.Errorf("%s: the forwarder crossed %d pairs of REQs and let %d go alone, want 1 and 0", policy, n, after["reqs_held_alone"]-before["reqs_held_alone"])
		}
		for k := 1; k <= 2; k++ {
			c.stop(k, "TERM")
		}
	}

	// The way each direction's packets went is ibtracert's for the LIDs.
	for _, p := range [][2]int{{1, 2}, {2, 1}} {
		from, to := nodes[p[0]], nodes[p[1]]
		went := fwd.path(t, from.lid, to.lid, 5*time.Second)
		out := fab.Output(t, "sm", exec.Command("ibtracert", strconv.Itoa(int(from.lid)), strconv.Itoa(int(to.lid))))
		hops, reached, err := ibfwd.ParseTracert(out)
		if err != nil {
			t.Fatal(err)
		}
		if went.From != from.guid || went.To != to.guid || reached != to.guid || !slices.Equal(went.Hops, hops) || len(hops) != 2 {
			t.Errorf("h%d to h%d: the forwarder saw %v; ibtracert %+v to %#x:\n%s", p[0], p[1], went, hops, reached, out)
		}
		t.Logf("h%d to h%d went %v, as ibtracert says", p[0], p[1], went)
	}
	// The capture of each round: h1's and h2's REQs both came before any
	// REP.
	all := checkCMCapture(t, mads, nodes)
	for r, policy := range policies {
		ex := all[rounds[r]:]
		if r+1 < len(rounds) {
			ex = all[rounds[r]:rounds[r+1]]
		}
		firstREP := slices.IndexFunc(ex, func(m cmMAD) bool { return m.attr == "REP" })
		for _, p := range [][2]int{{1, 2}, {2, 1}} {
			req := slices.Index(ex, cmMAD{"REQ", nodes[p[0]].lid, nodes[p[1]].lid})
			if req < 0 || firstREP < 0 || req > firstREP {
				t.Errorf("%s: h%d's REQ to h%d at %d, the first REP at %d: %v", policy, p[0], p[1], req, firstREP, ex)
			}
		}
		t.Logf("%s: CM exchange %v", policy, ex)
	}
}

// checkCrossed judges the daemons' side of a crossing of h1's and h2's
// REQs under policy: the CM counters say each saw the crossing and
// handled it as the policy says, every connection is established (none
// left in setup) and the connections are the ones the policy makes.
func checkCrossed(t *testing.T, c *cluster, policy string) {
	t.Helper()
	// Under rfc the larger link address (flags aside) rejects.
	addr := func(k int) string { return c.show(k).LinkAddr[3:] }
	larger := 1
	if addr(2) > addr(1) {
		larger = 2
	}
	for k := 1; k <= 2; k++ {
		want := map[string]uint64{"cm_connects": 1, "cm_crossing_accepted": 1, "cm_crossing_rejected": 0,
			"cm_accepted": 1, "cm_rejected": 0, "cm_established": 2, "cm_timed_out": 0}
		conns := 2
		if policy == "rfc" {
			conns = 1
			want["cm_established"] = 1
			if k == larger {
				want["cm_crossing_accepted"], want["cm_crossing_rejected"], want["cm_accepted"] = 0, 1, 0
			} else {
				want["cm_rejected"] = 1 // our REQ, which the larger address refused
			}
		}
		// The RTU of the last connection may still be on its way.
		deadline := time.Now().Add(10 * time.Second)
		for {
			s := c.stats(k)
			var wrong []string
			for name, v := range want {
				if s[name] != v {
					wrong = append(wrong, fmt.Sprintf("%s=%d (want %d)", name, s[name], v))
				}
			}
			// Nothing stuck in setup: every attempt ended established or
			// refused.
			if s["cm_connects"]+s["cm_accepted"]-s["cm_rejected"] != s["cm_established"] {
				wrong = append(wrong, fmt.Sprintf("connects %d + accepted %d - rejected %d != established %d",
					s["cm_connects"], s["cm_accepted"], s["cm_rejected"], s["cm_established"]))
			}
			cs := c.conns(k)
			var out, in int
			for _, x := range cs {
				switch {
				case x.State != "established":
					wrong = append(wrong, fmt.Sprintf("connection %+v not established", x))
				case x.Direction == "out" && x.Sends:
					out++
				case x.Direction == "in" && x.Sends == (policy == "rfc"):
					in++
				default:
					wrong = append(wrong, fmt.Sprintf("connection %+v", x))
				}
			}
			if len(cs) != conns {
				wrong = append(wrong, fmt.Sprintf("%d connections, want %d", len(cs), conns))
			}
			if len(wrong) == 0 {
				t.Logf("%s: h%d (%s address): %d out, %d in; crossing accepted %d rejected %d", policy, k,
					map[bool]string{true: "larger", false: "smaller"}[k == larger], out, in, s["cm_crossing_accepted"], s["cm_crossing_rejected"])
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: h%d: %s", policy, k, strings.Join(wrong, "; "))
				break
			}
			time.Sleep(100 * time.Millisecond) // the daemon's counters: no event tells of the last RTU
		}
	}
}
