//go:build linux && rdma

package ipoib

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/ibsim"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/netdev/netdevtest"
	"github.com/ipoibd/ipoibd/softib"
	"github.com/ipoibd/ipoibd/umadsa"
)

// The interface's use of the subnet services, judged by the real OpenSM on
// a fabric simulated by ibsim (internal/ibsim): an interface whose Subnet
// is the SA client of a simulated node takes the broadcast group's Q_Key,
// MTU and MLID from OpenSM's answer and joins the IPv6 groups it needs,
// which OpenSM then lists with the node as a member and programs into the
// switch. The datapath runs over softib (ibsim forwards no datapath); the
// test binary is the node's process, run again (ibsim.Main).

func TestMain(m *testing.M) { ibsim.Main(m, subnetChild, umadsa.Exit) }

// childReport is what the child prints.
type childReport struct {
	Info    Info   `json:"info"`
	PortGID string `json:"port_gid"`
}

// subnetChild brings interface k ("1", "2") up on the simulated node's SA
// and reports it once its IPv6 groups are joined.
func subnetChild(k string) error {
	pi, err := umadsa.QueryPort("", 0)
	if err != nil {
		return err
	}
	sub, err := umadsa.OpenPortClient("", 0)
	if err != nil {
		return err
	}
	defer sub.Close()
	dev, err := softib.Open(softib.Config{Addr: netip.MustParseAddr("127.0.0." + k), Port: testutil.Port(24810)})
	if err != nil {
		return err
	}
	defer dev.Close()
	nd := netdevtest.New()
	i, err := newOnFake(nd, Config{Name: "ib0", Device: dev, Subnet: sub, Queues: 1, Log: slog.New(slog.DiscardHandler),
		Addrs: []netip.Prefix{netip.MustParsePrefix("10.9.0." + k + "/24"), netip.MustParsePrefix("fd00:9::" + k + "/64")}})
	if err != nil {
		return err
	}
	defer i.Close()
	i.Start()
	for deadline := time.Now().Add(10 * time.Second); len(i.Show().Groups) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("IPv6 groups not joined after 10 s: %v", i.Show().Groups)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(childReport{Info: i.Show(), PortGID: pi.GID.String()}); err != nil {
		return err
	}
	// Up until the parent has looked: the simulator drops a node's
	// memberships when its process leaves.
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

func TestOpenSMJudgesSubnetUse(t *testing.T) {
	ibsim.Need(t, "saquery", "ibroute", "ibswitches")
	f := ibsim.Up(t)
	r := node(t, f, "h2", "1")
	node(t, f, "h3", "2")
	groups := saGroups(f.Output(t, "h3", exec.Command("saquery", "-g")))
	bcast := groups["ff12:401b:ffff::ffff:ffff"]
	t.Logf("interface: %+v; OpenSM's broadcast group: %v", r.Info, bcast)
	// saquery does not print a group's Q_Key: OpenSM makes the broadcast
	// group with 0x0B1B (OSM_IPOIB_BROADCAST_MGRP_QKEY).
	if r.Info.QKey != 0x0b1b || fmt.Sprintf("0x%X", r.Info.BcastMLID) != bcast["Mlid"] {
		t.Errorf("Q_Key %#x MLID %#x, OpenSM's broadcast group has Q_Key 0x0b1b, MLID %s", r.Info.QKey, r.Info.BcastMLID, bcast["Mlid"])
	}
	// OpenSM's default broadcast group has MTU 2048 (code 4): the UD MTU
	// follows it below softib's 4096.
	if bcast["Mtu"] != "0x84" || r.Info.UDMTU != encap.MTUForIB(ib.MTU2048) || r.Info.Subnet != "sa" {
		t.Errorf("UD MTU %d subnet %q, OpenSM's group MTU %s: want %d and sa", r.Info.UDMTU, r.Info.Subnet, bcast["Mtu"], encap.MTUForIB(ib.MTU2048))
	}
	// The groups the interface joined exist. OpenSM programs a switch for a
	// group with more than one member: all-nodes, which both joined, goes
	// to h2's and h3's ports (2 and 3).
	swLID := f.SwitchLID(t)
	for _, group := range []netip.Addr{allNodes, neigh.SolicitedNode(netip.MustParseAddr("fd00:9::1"))} {
		mgid, err := encap.MulticastMGID(group, ib.DefaultPKey, encap.LinkLocal)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(r.Info.Groups, group.String()) {
			t.Errorf("the interface lists groups %v, not %v", r.Info.Groups, group)
		}
		g, ok := groups[mgid.String()]
		if !ok {
			t.Errorf("OpenSM has no group %s for %v", mgid, group)
			continue
		}
		mlid, err := strconv.ParseUint(g["Mlid"], 0, 16)
		if err != nil {
			t.Fatalf("MLID %q: %v", g["Mlid"], err)
		}
		if group != allNodes {
			continue
		}
		// OpenSM programs the switch after it answered the joins.
		var ports string
		for deadline := time.Now().Add(5 * time.Second); ports != "2 3" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			ports = f.MulticastPorts(t, swLID, uint16(mlid))
		}
		if ports != "2 3" {
			t.Errorf("the switch forwards %v (MLID %#x) to ports %q, want h2's and h3's \"2 3\"", group, mlid, ports)
		}
	}
}

// node runs interface k's process as simulated node host and returns its
// report. The process stays up (the simulator drops a node's memberships
// when its process leaves) until the test ends and closes its stdin.
func node(t *testing.T, f *ibsim.Fabric, host, k string) childReport {
	t.Helper()
	cmd := ibsim.Child(k)
	cmd.Env = append(f.Env(host), cmd.Env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s's process: %v", host, err)
		}
	})
	var r childReport
	if err := json.NewDecoder(stdout).Decode(&r); err != nil {
		t.Fatalf("%s's report: %v", host, err)
	}
	return r
}

// saGroups reads saquery -g's dump: each group's fields by its MGID.
func saGroups(out string) map[string]map[string]string {
	groups := map[string]map[string]string{}
	for _, rec := range strings.Split(out, "MCMemberRecord group dump:")[1:] {
		g := ibsim.Dump(rec)
		groups[g["MGID"]] = g
	}
	return groups
}
