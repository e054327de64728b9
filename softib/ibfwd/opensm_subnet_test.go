package ibfwd

import (
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/ibsim"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/softib"
)

// The judges of Subnet: OpenSM on ibsim's TwoSwitches fabric programs
// the switches; softib ports take the identities (port GUID, LID) that
// ibstat reports for its CAs h1-h4; ibtracert says which switch ports a
// packet crosses.

// diags runs infiniband-diags commands as node h4, as ReadSubnet wants.
func diags(fab *ibsim.Fabric) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		out, errs, err := fab.Run("h4", exec.Command(args[0], args[1:]...))
		if err != nil {
			return "", fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, errs)
		}
		return out, nil
	}
}

// twoSwitches brings up the fabric and starts a forwarder,
// 127.88.<net8>.254, on its tables if read (else on none: the test will
// Refresh).
func twoSwitches(t *testing.T, net8 int, read bool) (*ibsim.Fabric, *Subnet, *subnet) {
	t.Helper()
	ibsim.Need(t, "ibnetdiscover", "ibroute", "smpquery", "ibstat", "ibtracert")
	fab := ibsim.UpOn(t, ibsim.TwoSwitches)
	var sn *Subnet
	var routes Routes = NewStatic()
	if read {
		var err error
		if sn, err = ReadSubnet(diags(fab)); err != nil {
			t.Fatal(err)
		}
		routes = sn
	}
	fwd, err := New(netip.MustParseAddrPort(fmt.Sprintf("127.88.%d.254:0", net8)), routes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fwd.Close() })
	return fab, sn, &subnet{fwd: fwd}
}

// openCA opens a softib port as node host of the fabric, at
// 127.88.<net8>.<addr>, with what ibstat reports of that node's port.
func (s *subnet) openCA(t *testing.T, fab *ibsim.Fabric, host string, net8, addr int) *node {
	t.Helper()
	p := readCAPort(t, fab, host)
	return s.addPort(t, net8, addr, softib.IBConfig{LID: p.lid, LMC: p.lmc, SMLID: p.smLID, GUID: p.guid, Forwarder: s.fwd.Addr()}, []ib.PKey{ib.DefaultPKey})
}

// TestOpenSMSubnet: on a subnet of two switches, UD and RC from h1 to h4
// cross both as OpenSM routed them; every route Subnet walks is the one
// ibtracert shows; after an SA join of h2 and h4 and a Refresh, the
// broadcast MLID reaches them, behind both switches, and not h3.
func TestOpenSMSubnet(t *testing.T) {
	ibsim.Need(t, "ibnetdiscover", "gcc", "/usr/include/infiniband/umad.h")
	sa := filepath.Join(t.TempDir(), "saclient")
	if out, err := exec.Command("go", "build", "-tags", "rdma", "-o", sa, "../../internal/testbed/saclient").CombinedOutput(); err != nil {
		t.Fatalf("building saclient: %v\n%s", err, out)
	}
	fab, sn, s := twoSwitches(t, 15, true)
	hosts := []string{"h1", "h2", "h3", "h4"}
	n := map[string]*node{}
	for i, h := range hosts {
		n[h] = s.openCA(t, fab, h, 15, i+1)
		if ca := sn.CAs[n[h].guid]; ca.LID != n[h].lid || ca.Name != h {
			t.Fatalf("%s: ibstat says LID %d GUID %#x; ibnetdiscover %+v", h, n[h].lid, n[h].guid, ca)
		}
	}
	a, d := n["h1"], n["h4"]

	qa, qd := udQP(t, a, ib.DefaultPKey, 0x0b1b), udQP(t, d, ib.DefaultPKey, 0x0b1b)
	postRecvs(t, d, qd, 0, 4)
	sendUD(t, a, qa, 1, 1000, ib.AHAttr{Path: ib.Path{DLID: d.lid, SL: 1}}, qd.Num(), 0x0b1b)
	if wc := poll(t, d.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.SrcLID != a.lid || wc.SL != 1 {
		t.Fatalf("UD from h1 to h4: %+v", wc)
	}
	ra, rd := connect(t, ib.RC, a, d, 0)
	postRecvs(t, d, rd, 4, 1)
	if _, err := ra.PostSend([]ib.SendWR{{ID: 9, SGE: a.slot(9, 65536)}}); err != nil {
		t.Fatal(err)
	}
	if wc := poll(t, d.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.ByteLen != 65536 {
		t.Fatalf("RC from h1 to h4: %+v", wc)
	}
	if hops, _, _ := sn.Trace(a.guid, d.lid); len(hops) != 2 {
		t.Fatalf("h1 to h4 crosses %+v, want both switches", hops)
	}

	for _, pair := range [][2]string{{"h1", "h4"}, {"h4", "h1"}, {"h1", "h3"}, {"h3", "h2"}, {"h1", "h2"}} {
		from, to := n[pair[0]], n[pair[1]]
		out := fab.Output(t, "h4", exec.Command("ibtracert", strconv.Itoa(int(from.lid)), strconv.Itoa(int(to.lid))))
		want, wantTo, err := ParseTracert(out)
		if err != nil {
			t.Fatal(err)
		}
		hops, got, ok := sn.Trace(from.guid, to.lid)
		if !ok || got != wantTo || got != to.guid || !slices.Equal(hops, want) {
			t.Errorf("%s to %s: walked %+v to %#x; ibtracert %+v to %#x:\n%s", pair[0], pair[1], hops, got, want, wantTo, out)
		}
	}

	// The broadcast group: OpenSM made it at start, but with no member
	// no switch forwards its MLID. QPs of h2, h3, h4 listen on it.
	const bcast = "ff12:401b:ffff::ffff:ffff"
	mgid := testutil.MustGID(bcast)
	group := ib.AHAttr{DestGID: mgid, Path: ib.Path{DLID: 0xc000, GRH: true, SL: 1}}
	qs := map[string]ib.QP{}
	for _, h := range []string{"h2", "h3", "h4"} {
		qs[h] = udQP(t, n[h], ib.DefaultPKey, 0x0b1b)
		postRecvs(t, n[h], qs[h], 8, 4)
		if err := n[h].dev.AttachMulticast(qs[h], mgid, 0xc000); err != nil {
			t.Fatal(err)
		}
	}
	sendUD(t, a, qa, 2, 200, group, ib.MulticastQPN, 0x0b1b)
	waitCounter(t, func() uint64 { return counter(s.fwd.Counters(), "drop_no_mft_entry") }, 1, "drop_no_mft_entry before any join")

	for _, h := range []string{"h2", "h4"} {
		var g struct {
			MLID uint16 `json:"mlid"`
		}
		fab.JSON(t, h, &g, exec.Command(sa, "join", bcast))
		if g.MLID != 0xc000 {
			t.Fatalf("%s joined MLID %#x, want 0xc000", h, g.MLID)
		}
	}
	if _, err := Refresh(s.fwd, diags(fab)); err != nil {
		t.Fatal(err)
	}
	sendUD(t, a, qa, 3, 200, group, ib.MulticastQPN, 0x0b1b)
	for _, h := range []string{"h2", "h4"} {
		if wc := poll(t, n[h].rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.SrcLID != a.lid || wc.ByteLen != 200+ib.GRHLen {
			t.Fatalf("%s, a member: %+v", h, wc)
		}
	}
	// From a member: to the other, across the switches, not back.
	sendUD(t, d, qs["h4"], 4, 200, group, ib.MulticastQPN, 0x0b1b)
	if wc := poll(t, n["h2"].rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.SrcLID != d.lid {
		t.Fatalf("h2 from h4: %+v", wc)
	}
	quiet(t, n["h3"].rcq, 50*time.Millisecond, "multicast at h3, no member")
	quiet(t, n["h4"].rcq, time.Millisecond, "h4's multicast back at h4")
}

// TestOpenSMSubnetQoS: OpenSM restarted with a QoS policy whose switch
// SL-to-VL map sends SL 0 to VL15 programs every switch port so (OpenSM
// sets SL-to-VL by port kind, all switch external ports alike); read
// back, both hops from h1 to h4 map SL 0 to VL15 and the forwarder drops
// SL 0 while SL 1 crosses both switches.
func TestOpenSMSubnetQoS(t *testing.T) {
	fab, _, s := twoSwitches(t, 16, false)
	sl2vl := "15,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7"
	fab.RestartSM(t, "qos TRUE\nqos_max_vls 8\nqos_policy_file /nonexistent\nqos_swe_sl2vl "+sl2vl+"\nqos_sl2vl "+sl2vl+"\n", nil)
	sn, err := Refresh(s.fwd, diags(fab))
	if err != nil {
		t.Fatal(err)
	}
	a, d := s.openCA(t, fab, "h1", 16, 1), s.openCA(t, fab, "h4", 16, 4)
	hops, _, ok := sn.Trace(a.guid, d.lid)
	if !ok || len(hops) != 2 {
		t.Fatalf("h1 to h4: %+v", hops)
	}
	for _, h := range hops {
		if vl := sn.Switches[h.Switch].SL2VL[[2]int{h.In, h.Out}]; vl[0] != 15 || vl[1] != 1 {
			t.Fatalf("switch %#x from port %d to %d: SL-to-VL %v", h.Switch, h.In, h.Out, vl)
		}
	}
	qa, qd := udQP(t, a, ib.DefaultPKey, 0x0b1b), udQP(t, d, ib.DefaultPKey, 0x0b1b)
	postRecvs(t, d, qd, 0, 4)
	sendUD(t, a, qa, 1, 100, ib.AHAttr{Path: ib.Path{DLID: d.lid, SL: 0}}, qd.Num(), 0x0b1b)
	sendUD(t, a, qa, 2, 100, ib.AHAttr{Path: ib.Path{DLID: d.lid, SL: 1}}, qd.Num(), 0x0b1b)
	if wc := poll(t, d.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.SL != 1 {
		t.Fatalf("completion %+v: not the SL 1 datagram", wc)
	}
	waitCounter(t, func() uint64 { return counter(s.fwd.Counters(), "drop_vl15") }, 1, "drop_vl15")
	quiet(t, d.rcq, 50*time.Millisecond, "SL 0 datagram")
}

// TestOpenSMSubnetLIDChange: OpenSM restarted with a guid2lid file that
// swaps the LIDs of h2 and h4 swaps them; on the tables read before,
// h4's new LID leads to h2, which drops it as not its LID; after Refresh,
// to h4.
func TestOpenSMSubnetLIDChange(t *testing.T) {
	fab, _, s := twoSwitches(t, 17, true)
	a := s.openCA(t, fab, "h1", 17, 1)
	old2, old4 := readCAPort(t, fab, "h2"), readCAPort(t, fab, "h4")
	fab.RestartSM(t, "", map[string]string{"guid2lid": fmt.Sprintf("0x%016x 0x%04x 0x%04x\n0x%016x 0x%04x 0x%04x\n",
		old2.guid, old4.lid, old4.lid, old4.guid, old2.lid, old2.lid)})
	// The ports come back with their new LIDs; the forwarder still has
	// the old tables.
	b, d := s.openCA(t, fab, "h2", 17, 2), s.openCA(t, fab, "h4", 17, 4)
	if b.lid != old4.lid || d.lid != old2.lid {
		t.Fatalf("LIDs after the restart: h2 %d (was %d), h4 %d (was %d); want them swapped", b.lid, old2.lid, d.lid, old4.lid)
	}
	qa, qd := udQP(t, a, ib.DefaultPKey, 0x0b1b), udQP(t, d, ib.DefaultPKey, 0x0b1b)
	postRecvs(t, d, qd, 0, 4)
	sendUD(t, a, qa, 1, 100, ib.AHAttr{Path: ib.Path{DLID: d.lid}}, qd.Num(), 0x0b1b)
	waitCounter(t, func() uint64 { return counter(b.dev.Counters(), "rx_drop_wrong_dlid") }, 1, "h2's rx_drop_wrong_dlid: h4's new LID sent where it led before")
	quiet(t, d.rcq, time.Millisecond, "a datagram to h4's new LID on the old tables")

	sn, err := Refresh(s.fwd, diags(fab))
	if err != nil {
		t.Fatal(err)
	}
	if to, ok := sn.Unicast(a.guid, d.lid); !ok || to != d.guid {
		t.Fatalf("h4's new LID %d leads to %#x, %v", d.lid, to, ok)
	}
	for _, p := range s.fwd.Ports() {
		if p.GUID == d.guid && p.LID != d.lid {
			t.Fatalf("forwarder shows h4 with LID %d, not %d", p.LID, d.lid)
		}
	}
	sendUD(t, a, qa, 2, 100, ib.AHAttr{Path: ib.Path{DLID: d.lid}}, qd.Num(), 0x0b1b)
	if wc := poll(t, d.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.ByteLen != 100+ib.GRHLen {
		t.Fatalf("after Refresh: %+v", wc)
	}
}

// TestOpenSMSubnetLinkVL15: SL 0 mapped to VL15 on the links between the
// switches only (set by SMP, testdata/setsl2vl.c: OpenSM's QoS options
// map SLs by port kind, every switch port alike) and read back by
// Refresh: SL 0 still goes from h1 to h2 on sw1, and is dropped from h1
// to h4 across the switches, where SL 1 goes.
func TestOpenSMSubnetLinkVL15(t *testing.T) {
	ibsim.Need(t, "gcc", "/usr/include/infiniband/umad.h")
	set := filepath.Join(t.TempDir(), "setsl2vl")
	if out, err := exec.Command("gcc", "-Wall", "-o", set, "testdata/setsl2vl.c", "-libumad").CombinedOutput(); err != nil {
		t.Fatalf("building setsl2vl: %v\n%s", err, out)
	}
	fab, _, s := twoSwitches(t, 18, false)
	links, err := diags(fab)("ibnetdiscover", "-p")
	if err != nil {
		t.Fatal(err)
	}
	sn, err := ParseNetDiscover(links)
	if err != nil {
		t.Fatal(err)
	}
	for _, sw := range sn.Switches {
		for in, inPeer := range sw.Links {
			for out, outPeer := range sw.Links {
				if !inPeer.Switch && outPeer.Switch {
					fab.Output(t, "h4", exec.Command(set, strconv.Itoa(int(sw.LID)), strconv.Itoa(in), strconv.Itoa(out), "15,1,2,3,4,5,6,7,8,9,10,11,12,13,14,7"))
				}
			}
		}
	}
	if _, err := Refresh(s.fwd, diags(fab)); err != nil {
		t.Fatal(err)
	}
	a, b, d := s.openCA(t, fab, "h1", 18, 1), s.openCA(t, fab, "h2", 18, 2), s.openCA(t, fab, "h4", 18, 4)
	qa, qb, qd := udQP(t, a, ib.DefaultPKey, 0x0b1b), udQP(t, b, ib.DefaultPKey, 0x0b1b), udQP(t, d, ib.DefaultPKey, 0x0b1b)
	postRecvs(t, b, qb, 0, 4)
	postRecvs(t, d, qd, 0, 4)
	sendUD(t, a, qa, 1, 100, ib.AHAttr{Path: ib.Path{DLID: b.lid, SL: 0}}, qb.Num(), 0x0b1b)
	if wc := poll(t, b.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.SL != 0 {
		t.Fatalf("SL 0 within sw1: %+v", wc)
	}
	sendUD(t, a, qa, 2, 100, ib.AHAttr{Path: ib.Path{DLID: d.lid, SL: 0}}, qd.Num(), 0x0b1b)
	sendUD(t, a, qa, 3, 100, ib.AHAttr{Path: ib.Path{DLID: d.lid, SL: 1}}, qd.Num(), 0x0b1b)
	if wc := poll(t, d.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.SL != 1 {
		t.Fatalf("completion %+v: not the SL 1 datagram", wc)
	}
	waitCounter(t, func() uint64 { return counter(s.fwd.Counters(), "drop_vl15") }, 1, "drop_vl15")
	quiet(t, d.rcq, 50*time.Millisecond, "SL 0 datagram across the switches")
}
