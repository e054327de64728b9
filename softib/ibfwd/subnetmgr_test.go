package ibfwd

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/ibsim"
	"github.com/ipoibd/ipoibd/softib"
)

// ibrouteLFT is ibroute's unicast dump of ibsim's sw1 under OpenSM.
const ibrouteLFT = `Unicast lids [0x0-0x5] of switch Lid 2 guid 0x0000000000200000 (sw1):
  Lid  Out   Destination
       Port     Info 
0x0001 001 : (Channel Adapter portguid 0x0000000000100001: 'h1')
0x0002 000 : (Switch portguid 0x0000000000200000: 'sw1')
0x0003 002 : (Channel Adapter portguid 0x0000000000100003: 'h2')
0x0004 003 : (Channel Adapter portguid 0x0000000000100005: 'h3')
0x0005 004 : (Channel Adapter portguid 0x0000000000100007: 'h4')
5 valid lids dumped 
`

const smpquerySL2VL = `# SL2VL table: Lid 2
#                 SL: | 0| 1| 2| 3| 4| 5| 6| 7| 8| 9|10|11|12|13|14|15|
ports: in  0, out  2: | 0| 1| 2| 3| 4| 5| 6| 7| 8| 9|10|11|12|13|14| 7|
ports: in  1, out  2: |15| 1| 2| 3| 4| 5| 6| 7| 8| 9|10|11|12|13|14| 7|
`

func TestParseLFT(t *testing.T) {
	lft, dest, err := ParseLFT(ibrouteLFT)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[uint16]int{1: 1, 2: 0, 3: 2, 4: 3, 5: 4}; !mapsEqual(lft, want) {
		t.Fatalf("LFT %v, want %v", lft, want)
	}
	if want := map[uint16]uint64{1: 0x100001, 3: 0x100003, 4: 0x100005, 5: 0x100007}; !mapsEqual(dest, want) {
		t.Fatalf("destinations %v, want %v", dest, want)
	}
	for _, bad := range []string{"", "0x00zz 001 : (Switch)", "0x0001 001 : (Channel Adapter portguid 0xq: 'h1')"} {
		if _, _, err := ParseLFT(bad); err == nil {
			t.Errorf("ParseLFT(%q) took it", bad)
		}
	}
}

func TestParseMFT(t *testing.T) {
	header := "     Ports: 0 1 2 3 4 5 6 7 8 9 10 11 "
	row := func(mlid string, ports ...string) string {
		b := []byte(strings.Repeat(" ", len(header)))
		copy(b, mlid)
		for _, p := range ports {
			b[strings.Index(header, " "+p+" ")+len(p)] = 'x'
		}
		return string(b)
	}
	out := "Multicast mlids [0xc000-0xc3ff] of switch Lid 2 guid 0x0000000000200000 (sw1):\n" + header + "\n MLid\n" +
		row("0xc000", "2", "3") + "\n" + row("0xc001", "1", "11") + "\n2 valid mlids dumped\n"
	mft, err := ParseMFT(out)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(mft[0xc000], []int{2, 3}) || !slices.Equal(mft[0xc001], []int{1, 11}) || len(mft) != 2 {
		t.Fatalf("MFT %v from\n%s", mft, out)
	}
}

func TestParseSL2VLTable(t *testing.T) {
	m := map[[2]int][16]uint8{}
	if err := ParseSL2VLTable(smpquerySL2VL, m); err != nil {
		t.Fatal(err)
	}
	if r := m[[2]int{1, 2}]; r[0] != 15 || r[1] != 1 || r[15] != 7 || len(m) != 2 {
		t.Fatalf("SL2VL %v", m)
	}
	if err := ParseSL2VLTable("ports: in  1, out  2: | 0| 1|", m); err == nil {
		t.Fatal("a short row was taken")
	}
}

func TestSwitchRoutes(t *testing.T) {
	s := &Switch{SL2VL: map[[2]int][16]uint8{}, MFT: map[uint16][]int{0xc000: {2, 3, 0}}}
	var err error
	if s.LFT, s.Dest, err = ParseLFT(ibrouteLFT); err != nil {
		t.Fatal(err)
	}
	if err := ParseSL2VLTable(smpquerySL2VL, s.SL2VL); err != nil {
		t.Fatal(err)
	}
	s.Build()
	for lid, want := range map[uint16]uint64{3: 0x100003, 5: 0x100007} {
		if g, ok := s.Unicast(lid); !ok || g != want {
			t.Errorf("Unicast(%d) = %#x, %v", lid, g, ok)
		}
	}
	for _, lid := range []uint16{2, 6} { // the switch's own LID, an unassigned one
		if g, ok := s.Unicast(lid); ok {
			t.Errorf("Unicast(%d) = %#x", lid, g)
		}
	}
	if got := s.Multicast(0xc000); !slices.Equal(got, []uint64{0x100003, 0x100005}) {
		t.Errorf("Multicast = %#x", got)
	}
	if vl := s.VL(0, 0x100001, 0x100003); vl != 15 {
		t.Errorf("SL 0 from port 1 to 2: VL %d, want 15", vl)
	}
	if vl := s.VL(1, 0x100001, 0x100003); vl != 1 {
		t.Errorf("SL 1 from port 1 to 2: VL %d, want 1", vl)
	}
	if vl := s.VL(0, 0x100005, 0x100003); vl != 0 {
		t.Errorf("SL 0 between ports with no table: VL %d, want 0", vl)
	}

	// A port that leads to two CAs (a link to another switch) is no CA
	// port: no multicast goes out of it by GUID, and LIDs still route.
	s.LFT[4] = 2
	s.MFT[0xc001] = []int{2, 4}
	s.Build()
	if got := s.Multicast(0xc001); !slices.Equal(got, []uint64{0x100007}) {
		t.Errorf("Multicast through an inter-switch port = %#x", got)
	}
	if g, ok := s.Unicast(4); !ok || g != 0x100005 {
		t.Errorf("Unicast(4) = %#x, %v", g, ok)
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// caPort is what ibstat says of a node's port: as the kernel's sysfs
// would on hardware, through libibumad under umad2sim.
type caPort struct {
	lid, smLID uint16
	lmc        uint8
	guid       uint64
}

func readCAPort(t *testing.T, f *ibsim.Fabric, host string) caPort {
	t.Helper()
	out := f.Output(t, host, exec.Command("ibstat"))
	field := func(name string) uint64 {
		m := regexp.MustCompile(`(?m)^\s*` + name + `:\s*(\S+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("ibstat on %s: no %s:\n%s", host, name, out)
		}
		v, err := strconv.ParseUint(m[1], 0, 64)
		if err != nil {
			t.Fatalf("ibstat on %s: %s %q", host, name, m[1])
		}
		return v
	}
	return caPort{lid: uint16(field("Base lid")), smLID: uint16(field("SM lid")), lmc: uint8(field("LMC")), guid: field("Port GUID")}
}

// TestOpenSMRoutes: two softib ports are h2 and h3 of an ibsim fabric
// that OpenSM brought up: their LIDs, LMC, SM LID and GUIDs are what the
// fabric's ports got, the forwarder's tables are sw1's as OpenSM
// programmed them, read back by SMP, and delivery follows them.
func TestOpenSMRoutes(t *testing.T) {
	ibsim.Need(t, "ibroute", "ibswitches", "smpquery", "ibstat")
	fab := ibsim.Up(t)
	sw := fab.SwitchLID(t)
	routes, err := ReadSwitch(func(args ...string) (string, error) {
		out, errs, err := fab.Run("h4", exec.Command(args[0], args[1:]...))
		if err != nil {
			return "", fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, errs)
		}
		return out, nil
	}, sw)
	if err != nil {
		t.Fatal(err)
	}
	fwd, err := New(netip.MustParseAddrPort("127.88.13.254:0"), routes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fwd.Close() })
	s := &subnet{fwd: fwd, routes: NewStatic()}
	var nodes []*node
	for i, host := range []string{"h2", "h3"} {
		p := readCAPort(t, fab, host)
		if g, ok := routes.Unicast(p.lid); !ok || g != p.guid {
			t.Fatalf("%s: LID %d routes to %#x, %v; its port GUID is %#x", host, p.lid, g, ok, p.guid)
		}
		n := s.addPort(t, 13, i+2, softib.IBConfig{LID: p.lid, LMC: p.lmc, SMLID: p.smLID, GUID: p.guid, Forwarder: fwd.Addr()}, []ib.PKey{ib.DefaultPKey})
		nodes = append(nodes, n)
	}
	a, b := nodes[0], nodes[1]
	qa, qb := udQP(t, a, ib.DefaultPKey, 0x0b1b), udQP(t, b, ib.DefaultPKey, 0x0b1b)
	postRecvs(t, b, qb, 0, 4)
	sendUD(t, a, qa, 1, 1000, ib.AHAttr{Path: ib.Path{DLID: b.lid, SL: 1}}, qb.Num(), 0x0b1b)
	if wc := poll(t, b.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.SrcLID != a.lid || wc.SL != 1 {
		t.Fatalf("UD by OpenSM's LIDs: %+v", wc)
	}
	ra, rb := connect(t, ib.RC, a, b, 0)
	postRecvs(t, b, rb, 4, 1)
	if _, err := ra.PostSend([]ib.SendWR{{ID: 9, SGE: a.slot(9, 65536)}}); err != nil {
		t.Fatal(err)
	}
	if wc := poll(t, b.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.ByteLen != 65536 {
		t.Fatalf("RC by OpenSM's LIDs: %+v", wc)
	}
	// No SA join, no MFT entry, no delivery; a LID OpenSM gave nobody
	// routes nowhere.
	sendUD(t, a, qa, 1, 64, ib.AHAttr{Path: ib.Path{DLID: 0xc000, GRH: true}}, ib.MulticastQPN, 0x0b1b)
	sendUD(t, a, qa, 1, 64, ib.AHAttr{Path: ib.Path{DLID: 0x40}}, qb.Num(), 0x0b1b)
	waitCounter(t, func() uint64 { return counter(fwd.Counters(), "drop_no_mft_entry") }, 1, "drop_no_mft_entry")
	waitCounter(t, func() uint64 { return counter(fwd.Counters(), "drop_unrouted_lid") }, 1, "drop_unrouted_lid")
}

// TestOpenSMQoSVL15 is the QoS case with the SM's own tables:
// OpenSM, restarted with a QoS policy whose SL-to-VL map sends SL 0 to
// VL15 on switch ports, programs sw1 so; read back by SMP, the
// forwarder drops SL 0 and carries SL 1.
func TestOpenSMQoSVL15(t *testing.T) {
	ibsim.Need(t, "ibroute", "ibswitches", "smpquery", "ibstat")
	fab := ibsim.Up(t)
	fab.StopSM()
	dir := t.TempDir()
	conf := filepath.Join(dir, "opensm.conf")
	sl2vl := "15,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7"
	if err := os.WriteFile(conf, []byte("force_log_flush TRUE\nsweep_interval 0\nqos TRUE\nqos_max_vls 8\n"+
		"qos_policy_file "+filepath.Join(dir, "none")+"\nqos_swe_sl2vl "+sl2vl+"\nqos_sl2vl "+sl2vl+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	osm := exec.Command("opensm", "-F", conf, "-f", "stdout")
	osm.Env = append(fab.Env("h1"), "OSM_TMP_DIR="+dir, "OSM_CACHE_DIR="+dir)
	osm.Dir = dir
	out, err := osm.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := osm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		osm.Process.Kill()
		osm.Wait()
	})
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "SUBNET UP") {
				close(up)
				io.Copy(io.Discard, out)
				return
			}
		}
	}()
	select {
	case <-up:
	case <-time.After(15 * time.Second):
		t.Fatalf("OpenSM with QoS did not bring the subnet up")
	}
	sw := fab.SwitchLID(t)
	routes, err := ReadSwitch(func(args ...string) (string, error) {
		out, errs, err := fab.Run("h4", exec.Command(args[0], args[1:]...))
		if err != nil {
			return "", fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, errs)
		}
		return out, nil
	}, sw)
	if err != nil {
		t.Fatal(err)
	}
	h2, h3 := readCAPort(t, fab, "h2"), readCAPort(t, fab, "h3")
	if vl0, vl1 := routes.VL(0, h2.guid, h3.guid), routes.VL(1, h2.guid, h3.guid); vl0 != 15 || vl1 != 1 {
		t.Fatalf("sw1's SL-to-VL from h2 to h3 as read back: SL 0 on VL %d, SL 1 on VL %d; want 15 and 1 (%v)", vl0, vl1, routes.SL2VL)
	}
	fwd, err := New(netip.MustParseAddrPort("127.88.14.254:0"), routes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fwd.Close() })
	s := &subnet{fwd: fwd, routes: NewStatic()}
	a := s.addPort(t, 14, 2, softib.IBConfig{LID: h2.lid, LMC: h2.lmc, SMLID: h2.smLID, GUID: h2.guid, Forwarder: fwd.Addr()}, []ib.PKey{ib.DefaultPKey})
	b := s.addPort(t, 14, 3, softib.IBConfig{LID: h3.lid, LMC: h3.lmc, SMLID: h3.smLID, GUID: h3.guid, Forwarder: fwd.Addr()}, []ib.PKey{ib.DefaultPKey})
	qa, qb := udQP(t, a, ib.DefaultPKey, 0x0b1b), udQP(t, b, ib.DefaultPKey, 0x0b1b)
	postRecvs(t, b, qb, 0, 4)
	sendUD(t, a, qa, 1, 100, ib.AHAttr{Path: ib.Path{DLID: b.lid, SL: 0}}, qb.Num(), 0x0b1b)
	sendUD(t, a, qa, 2, 100, ib.AHAttr{Path: ib.Path{DLID: b.lid, SL: 1}}, qb.Num(), 0x0b1b)
	if wc := poll(t, b.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.SL != 1 {
		t.Fatalf("completion %+v: not the SL 1 datagram", wc)
	}
	waitCounter(t, func() uint64 { return counter(fwd.Counters(), "drop_vl15") }, 1, "drop_vl15")
	quiet(t, b.rcq, 50*time.Millisecond, "SL 0 datagram")
}
