package ibfwd

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/softib/wire"
)

// What infiniband-diags print for ibsim's TwoSwitches fabric under
// OpenSM (internal/ibsim): sw1 (LID 2) has h1 on port 1, h2 on port 2;
// sw2 (LID 3) h3 on 1, h4 on 2; the switches are linked port 5 to 5 and
// 6 to 6. OpenSM sends h3's LID over the first link and h4's over the
// second.
const (
	netDiscover = `CA     4  1 0x0000000000100003 4x SDR - SW     2  2 0x0000000000200000 ( 'h2' - 'sw1' )
CA     1  1 0x0000000000100001 4x SDR - SW     2  1 0x0000000000200000 ( 'h1' - 'sw1' )
SW     2  8 0x0000000000200000 4x SDR                                    'sw1'
SW     2  6 0x0000000000200000 4x SDR - SW     3  6 0x0000000000200001 ( 'sw1' - 'sw2' )
SW     2  5 0x0000000000200000 4x SDR - SW     3  5 0x0000000000200001 ( 'sw1' - 'sw2' )
SW     2  2 0x0000000000200000 4x SDR - CA     4  1 0x0000000000100003 ( 'sw1' - 'h2' )
SW     2  1 0x0000000000200000 4x SDR - CA     1  1 0x0000000000100001 ( 'sw1' - 'h1' )
CA     5  1 0x0000000000100005 4x SDR - SW     3  1 0x0000000000200001 ( 'h3' - 'sw2' )
SW     3  8 0x0000000000200001 4x SDR                                    'sw2'
SW     3  6 0x0000000000200001 4x SDR - SW     2  6 0x0000000000200000 ( 'sw2' - 'sw1' )
SW     3  5 0x0000000000200001 4x SDR - SW     2  5 0x0000000000200000 ( 'sw2' - 'sw1' )
SW     3  2 0x0000000000200001 4x SDR - CA     6  1 0x0000000000100007 ( 'sw2' - 'h4' )
SW     3  1 0x0000000000200001 4x SDR - CA     5  1 0x0000000000100005 ( 'sw2' - 'h3' )
CA     6  1 0x0000000000100007 4x SDR - SW     3  2 0x0000000000200001 ( 'h4' - 'sw2' )
`
	lftSW1 = `Unicast lids [0x0-0x6] of switch Lid 2 guid 0x0000000000200000 (sw1):
  Lid  Out   Destination
       Port     Info 
0x0001 001 : (Channel Adapter portguid 0x0000000000100001: 'h1')
0x0002 000 : (Switch portguid 0x0000000000200000: 'sw1')
0x0003 005 : (Switch portguid 0x0000000000200001: 'sw2')
0x0004 002 : (Channel Adapter portguid 0x0000000000100003: 'h2')
0x0005 005 : (Channel Adapter portguid 0x0000000000100005: 'h3')
0x0006 006 : (Channel Adapter portguid 0x0000000000100007: 'h4')
6 valid lids dumped 
`
	lftSW2 = `Unicast lids [0x0-0x6] of switch Lid 3 guid 0x0000000000200001 (sw2):
  Lid  Out   Destination
       Port     Info 
0x0001 005 : (Channel Adapter portguid 0x0000000000100001: 'h1')
0x0002 005 : (Switch portguid 0x0000000000200000: 'sw1')
0x0003 000 : (Switch portguid 0x0000000000200001: 'sw2')
0x0004 006 : (Channel Adapter portguid 0x0000000000100003: 'h2')
0x0005 001 : (Channel Adapter portguid 0x0000000000100005: 'h3')
0x0006 002 : (Channel Adapter portguid 0x0000000000100007: 'h4')
6 valid lids dumped 
`
	mftHeader = "     Ports: 0 1 2 3 4 5 6 7 8 "
)

const (
	swGUID1, swGUID2               = 0x200000, 0x200001
	guidH1, guidH2, guidH3, guidH4 = 0x100001, 0x100003, 0x100005, 0x100007
	lidH1, lidH2, lidH3, lidH4     = 1, 4, 5, 6
)

// mftDump is ibroute -M's dump with one row per MLID.
func mftDump(rows map[uint16][]int) string {
	var b strings.Builder
	b.WriteString("Multicast mlids [0xc000-0xc3ff] of switch Lid 2 guid 0x0000000000200000 (sw1):\n" + mftHeader + "\n MLid\n")
	for mlid, ports := range rows {
		row := []byte(strings.Repeat(" ", len(mftHeader)))
		copy(row, fmt.Sprintf("0x%04x", mlid))
		for _, p := range ports {
			ps := fmt.Sprint(p)
			row[strings.Index(mftHeader, " "+ps+" ")+len(ps)] = 'x'
		}
		b.Write(row)
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%d valid mlids dumped\n", len(rows))
	return b.String()
}

// fabricTables is a fake run for ReadSubnet: the dumps above, MFTs by
// switch LID, and SL-to-VL tables that map each SL to itself except
// where vl15 names a (switch LID, input port, output port) whose SL 0
// goes to VL15.
type fabricTables struct {
	lft  map[string]string
	mft  map[string]map[uint16][]int
	vl15 map[[3]int]bool
	ran  []string
}

func newFabricTables() *fabricTables {
	return &fabricTables{lft: map[string]string{"2": lftSW1, "3": lftSW2}, mft: map[string]map[uint16][]int{}, vl15: map[[3]int]bool{}}
}

func (f *fabricTables) run(args ...string) (string, error) {
	f.ran = append(f.ran, strings.Join(args, " "))
	switch {
	case slices.Equal(args, []string{"ibnetdiscover", "-p"}):
		return netDiscover, nil
	case len(args) == 2 && args[0] == "ibroute":
		return f.lft[args[1]], nil
	case len(args) == 3 && args[0] == "ibroute" && args[1] == "-M":
		return mftDump(f.mft[args[2]]), nil
	case len(args) == 4 && args[0] == "smpquery" && args[1] == "sl2vl":
		var sw, out int
		fmt.Sscan(args[2], &sw)
		fmt.Sscan(args[3], &out)
		b := strings.Builder{}
		b.WriteString("# SL2VL table: Lid " + args[2] + "\n")
		for in := range 9 {
			fmt.Fprintf(&b, "ports: in %2d, out %2d: |", in, out)
			for sl := range 16 {
				vl := sl
				if sl == 15 {
					vl = 7
				}
				if sl == 0 && f.vl15[[3]int{sw, in, out}] {
					vl = 15
				}
				fmt.Fprintf(&b, "%2d|", vl)
			}
			b.WriteByte('\n')
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("no such command %q", args)
}

func TestParseNetDiscover(t *testing.T) {
	s, err := ParseNetDiscover(netDiscover)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Switches) != 2 || len(s.CAs) != 4 {
		t.Fatalf("%d switches, %d CAs", len(s.Switches), len(s.CAs))
	}
	sw1 := s.Switches[swGUID1]
	if sw1.LID != 2 || sw1.Name != "sw1" || len(sw1.Links) != 4 || sw1.Links[6] != (PortRef{GUID: swGUID2, Port: 6, Switch: true}) || sw1.Links[2] != (PortRef{GUID: guidH2, Port: 1}) {
		t.Fatalf("sw1 %+v", sw1)
	}
	if ca := s.CAs[guidH4]; ca.LID != 6 || ca.Name != "h4" || ca.At != (PortRef{GUID: swGUID2, Port: 2, Switch: true}) {
		t.Fatalf("h4 %+v", ca)
	}
	for _, bad := range []string{"", "SW 2 x 0x200000 4x SDR 'sw1'", "CA 4 1 0x100003 4x SDR - SW 2 2 0xzz ( 'h2' - 'sw1' )"} {
		if _, err := ParseNetDiscover(bad); err == nil {
			t.Errorf("ParseNetDiscover(%q) took it", bad)
		}
	}
}

func TestSubnetUnicast(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from     uint64
		dlid     uint16
		change   func(*fabricTables)
		to       uint64 // 0: unrouted
		hops     []Hop
		vlSL0    uint8
		readSame bool
	}{
		{name: "same switch", from: guidH1, dlid: lidH2, to: guidH2, hops: []Hop{{swGUID1, 1, 2}}},
		{name: "across the second link", from: guidH1, dlid: lidH4, to: guidH4, hops: []Hop{{swGUID1, 1, 6}, {swGUID2, 6, 2}}},
		{name: "across the first link", from: guidH1, dlid: lidH3, to: guidH3, hops: []Hop{{swGUID1, 1, 5}, {swGUID2, 5, 1}}},
		{name: "back", from: guidH4, dlid: lidH1, to: guidH1, hops: []Hop{{swGUID2, 2, 5}, {swGUID1, 5, 1}}},
		{name: "a switch's own LID", from: guidH1, dlid: 3},
		{name: "no LFT entry", from: guidH1, dlid: 7},
		{name: "permissive LID", from: guidH1, dlid: 0xffff},
		{name: "loop", from: guidH1, dlid: lidH4, change: func(f *fabricTables) {
			f.lft["3"] = strings.Replace(lftSW2, "0x0006 002", "0x0006 005", 1)
		}},
		{name: "dead end", from: guidH1, dlid: lidH4, change: func(f *fabricTables) {
			f.lft["2"] = strings.Replace(lftSW1, "0x0006 006", "0x0006 007", 1)
		}},
		{name: "VL15 on the inter-switch link", from: guidH1, dlid: lidH4, to: guidH4, hops: []Hop{{swGUID1, 1, 6}, {swGUID2, 6, 2}}, vlSL0: 15,
			change: func(f *fabricTables) { f.vl15[[3]int{2, 1, 6}] = true }},
		{name: "VL15 on the link elsewhere", from: guidH1, dlid: lidH2, to: guidH2, hops: []Hop{{swGUID1, 1, 2}},
			change: func(f *fabricTables) { f.vl15[[3]int{2, 1, 6}] = true }},
		{name: "VL15 at the last hop", from: guidH1, dlid: lidH4, to: guidH4, hops: []Hop{{swGUID1, 1, 6}, {swGUID2, 6, 2}}, vlSL0: 15,
			change: func(f *fabricTables) { f.vl15[[3]int{3, 6, 2}] = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tables := newFabricTables()
			if tc.change != nil {
				tc.change(tables)
			}
			s, err := ReadSubnet(tables.run)
			if err != nil {
				t.Fatal(err)
			}
			out, ok := s.Route(nil, tc.from, tc.dlid, 0)
			hops, to, traced := s.Trace(tc.from, tc.dlid)
			if tc.to == 0 {
				if ok || len(out) != 0 || traced {
					t.Fatalf("routed: %+v, traced %v to %#x", out, traced, to)
				}
				return
			}
			if !ok || len(out) != 1 || out[0] != (Delivery{To: tc.to, VL: tc.vlSL0}) {
				t.Fatalf("SL 0: %+v, %v; want %#x on VL %d", out, ok, tc.to, tc.vlSL0)
			}
			if out, _ := s.Route(out[:0], tc.from, tc.dlid, 3); len(out) != 1 || out[0].VL != 3 {
				t.Fatalf("SL 3: %+v", out)
			}
			if !traced || to != tc.to || !slices.Equal(hops, tc.hops) {
				t.Fatalf("trace %+v to %#x, want %+v", hops, to, tc.hops)
			}
		})
	}
}

func TestSubnetMulticast(t *testing.T) {
	const mlid, elsewhere = 0xc000, 0xc001
	tables := newFabricTables()
	// The spanning tree OpenSM makes for h2 and h4: sw1 to h2 and over
	// the first link, sw2 to h4 and back over it.
	tables.mft["2"] = map[uint16][]int{mlid: {2, 5}}
	tables.mft["3"] = map[uint16][]int{mlid: {2, 5}, elsewhere: {1}}
	tables.vl15[[3]int{3, 5, 2}] = true // SL 0 dropped from the link to h4
	s, err := ReadSubnet(tables.run)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		from uint64
		mlid uint16
		sl   uint8
		want []Delivery
		ok   bool
	}{
		{"from a non-member to both members", guidH1, mlid, 1, []Delivery{{guidH2, 1}, {guidH4, 1}}, true},
		{"from a member, not back to it", guidH4, mlid, 1, []Delivery{{guidH2, 1}}, true},
		{"from a member on the other switch", guidH2, mlid, 2, []Delivery{{guidH4, 2}}, true},
		{"VL15 on one branch", guidH1, mlid, 0, []Delivery{{guidH2, 0}, {guidH4, 15}}, true},
		{"no entry at the sender's switch", guidH1, elsewhere, 1, nil, false},
		{"an entry leading only back to the sender", guidH3, elsewhere, 1, nil, true},
	} {
		got, ok := s.Route(nil, tc.from, tc.mlid, tc.sl)
		slices.SortFunc(got, func(a, b Delivery) int { return int(a.To) - int(b.To) })
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestReadSubnetErrors: a failing command or output that does not parse
// is an error, not a half-read subnet.
func TestReadSubnetErrors(t *testing.T) {
	for _, bad := range []string{"ibnetdiscover -p", "ibroute 3", "ibroute -M 2", "smpquery sl2vl 3 6"} {
		tables := newFabricTables()
		run := func(args ...string) (string, error) {
			if strings.Join(args, " ") == bad {
				return "", fmt.Errorf("%s failed", bad)
			}
			return tables.run(args...)
		}
		if s, err := ReadSubnet(run); err == nil {
			t.Errorf("%s failing: read %+v", bad, s)
		}
	}
}

// TestSubnetRouteDoesNotAllocate: once out has room, a lookup allocates
// nothing.
func TestSubnetRouteDoesNotAllocate(t *testing.T) {
	tables := newFabricTables()
	tables.mft["2"] = map[uint16][]int{0xc000: {2, 5}}
	tables.mft["3"] = map[uint16][]int{0xc000: {2, 5}}
	s, err := ReadSubnet(tables.run)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Delivery, 0, 8)
	if n := testing.AllocsPerRun(100, func() {
		out, _ = s.Route(out[:0], guidH1, lidH4, 1)
		out, _ = s.Route(out[:0], guidH1, 0xc000, 1)
	}); n != 0 || len(out) != 2 {
		t.Fatalf("%v allocations, %d deliveries", n, len(out))
	}
}

// TestForwardOnSubnetDoesNotAllocate: the forwarder on a Subnet sends a
// unicast frame across both switches and a multicast frame to two
// members without allocating, also while it records paths and holds
// REQs (which these frames are not) and after the tables were read
// again.
func TestForwardOnSubnetDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not counted under the race detector")
	}
	for _, extras := range []bool{false, true} {
		t.Run(fmt.Sprintf("paths-and-crossing=%v", extras), func(t *testing.T) { forwardDoesNotAllocate(t, extras) })
	}
}

func forwardDoesNotAllocate(t *testing.T, extras bool) {
	tables := newFabricTables()
	tables.mft["2"] = map[uint16][]int{0xc000: {2, 5}}
	tables.mft["3"] = map[uint16][]int{0xc000: {2, 5}}
	s, err := ReadSubnet(tables.run)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := New(netip.MustParseAddrPort("127.0.0.1:0"), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Close() })
	src := netip.MustParseAddrPort("127.0.0.1:9") // never sends: forward is called directly
	ports := []Port{{GUID: guidH1, Addr: src}}
	for _, g := range []uint64{guidH2, guidH4} {
		sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sink.Close() })
		ports = append(ports, Port{GUID: g, Addr: sink.LocalAddr().(*net.UDPAddr).AddrPort()})
	}
	for _, p := range ports {
		if err := fw.Register(p); err != nil {
			t.Fatal(err)
		}
	}
	var frames [][]byte
	for _, fr := range []wire.IBFrame{
		{LRH: wire.LRH{DLID: lidH4, SL: 1, SLID: lidH1}, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, DestQP: 5}, Payload: make([]byte, 256)}},
		{LRH: wire.LRH{DLID: 0xc000, SL: 1, SLID: lidH1}, HasGRH: true, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, DestQP: 0xffffff}, Payload: make([]byte, 256)}},
	} {
		b, err := wire.AppendIBFrame(nil, &fr)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, b)
	}
	round := func() {
		for _, b := range frames {
			fw.forward(b, src)
		}
	}
	if extras {
		fw.RecordPaths(nil)
		fw.CrossREQs(time.Minute, nil)
	}
	round()
	if extras {
		again, err := ReadSubnet(tables.run)
		if err != nil {
			t.Fatal(err)
		}
		fw.SetRoutes(again)
		if p := fw.Paths(); len(p) != 1 || len(p[0].Hops) != 2 {
			t.Fatalf("paths %v, want h1 to h4's", p)
		}
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%v allocations per round", n)
	}
	// Rounds: one, then AllocsPerRun's warm-up and its 200.
	if tx := counter(fw.Counters(), "tx_frames"); tx != 3*202 {
		t.Fatalf("tx_frames %d, want 3 per round (%v)", tx, fw.Counters())
	}
}
