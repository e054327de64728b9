package ibfwd

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/softib/wire"
)

// pathsFabric is a forwarder on routes with h1-h4 of the fake
// TwoSwitches tables registered at sinks, frames fed to forward
// directly.
func pathsFabric(t *testing.T, routes Routes) (*Forwarder, map[uint64]netip.AddrPort) {
	t.Helper()
	fw, err := New(netip.MustParseAddrPort("127.0.0.1:0"), routes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fw.Close() })
	addrs := map[uint64]netip.AddrPort{}
	for _, g := range []uint64{guidH1, guidH2, guidH3, guidH4} {
		sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sink.Close() })
		addrs[g] = sink.LocalAddr().(*net.UDPAddr).AddrPort()
		if err := fw.Register(Port{GUID: g, Addr: addrs[g]}); err != nil {
			t.Fatal(err)
		}
	}
	return fw, addrs
}

func udFrame(t *testing.T, slid, dlid uint16) []byte {
	t.Helper()
	fr := wire.IBFrame{LRH: wire.LRH{DLID: dlid, SLID: slid}, HasGRH: wire.IsMulticastLID(dlid),
		Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, DestQP: 5}, Payload: make([]byte, 64)}}
	b, err := wire.AppendIBFrame(nil, &fr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRecordPaths: the forwarder tells each (SLID, DLID) pair's way once,
// with the switches and ports of the walk; again only when new tables
// send the pair another way; multicast and undelivered packets are no
// path; on tables without hops the ends alone are told.
func TestRecordPaths(t *testing.T) {
	read := func(change func(*fabricTables)) *Subnet {
		tables := newFabricTables()
		tables.mft["2"] = map[uint16][]int{0xc000: {1, 2, 5}}
		tables.mft["3"] = map[uint16][]int{0xc000: {1, 2, 5}}
		if change != nil {
			change(tables)
		}
		s, err := ReadSubnet(tables.run)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	h1h4 := []Hop{{swGUID1, 1, 6}, {swGUID2, 6, 2}}
	h4h1 := []Hop{{swGUID2, 2, 5}, {swGUID1, 5, 1}}
	overLink5 := func(f *fabricTables) { f.lft["2"] = strings.Replace(lftSW1, "0x0006 006", "0x0006 005", 1) }
	type send struct {
		from       uint64
		slid, dlid uint16
		routes     Routes // swapped in before the send, if not nil
	}
	for _, tc := range []struct {
		name  string
		first Routes
		sends []send
		told  []PathRecord
	}{
		{"each pair once", read(nil), []send{
			{from: guidH1, slid: lidH1, dlid: lidH4}, {from: guidH1, slid: lidH1, dlid: lidH4},
			{from: guidH4, slid: lidH4, dlid: lidH1}, {from: guidH1, slid: lidH1, dlid: lidH2},
		}, []PathRecord{
			{lidH1, lidH4, guidH1, guidH4, h1h4}, {lidH4, lidH1, guidH4, guidH1, h4h1}, {lidH1, lidH2, guidH1, guidH2, []Hop{{swGUID1, 1, 2}}},
		}},
		{"tables read again, same way: told once", read(nil), []send{
			{from: guidH1, slid: lidH1, dlid: lidH4}, {from: guidH1, slid: lidH1, dlid: lidH4, routes: read(nil)},
		}, []PathRecord{{lidH1, lidH4, guidH1, guidH4, h1h4}}},
		{"new tables, another way: told again", read(nil), []send{
			{from: guidH1, slid: lidH1, dlid: lidH4}, {from: guidH1, slid: lidH1, dlid: lidH4, routes: read(overLink5)},
		}, []PathRecord{{lidH1, lidH4, guidH1, guidH4, h1h4}, {lidH1, lidH4, guidH1, guidH4, []Hop{{swGUID1, 1, 5}, {swGUID2, 5, 2}}}}},
		{"multicast, unrouted and VL15 are no path", read(func(f *fabricTables) { f.vl15[[3]int{2, 1, 2}] = true }), []send{
			{from: guidH1, slid: lidH1, dlid: 0xc000}, {from: guidH1, slid: lidH1, dlid: 7}, {from: guidH1, slid: lidH1, dlid: lidH2},
		}, nil},
		{"tables without hops: the ends", func() Routes {
			s := NewStatic()
			_ = s.AddPort(guidH2, lidH2, 0)
			return s
		}(), []send{{from: guidH1, slid: lidH1, dlid: lidH2}}, []PathRecord{{lidH1, lidH2, guidH1, guidH2, nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fw, addrs := pathsFabric(t, tc.first)
			var told []PathRecord
			fw.RecordPaths(func(p PathRecord) { told = append(told, p) })
			for _, s := range tc.sends {
				if s.routes != nil {
					fw.SetRoutes(s.routes)
				}
				fw.forward(udFrame(t, s.slid, s.dlid), addrs[s.from])
			}
			if !slices.EqualFunc(told, tc.told, samePath) {
				t.Fatalf("told %v\nwant %v", told, tc.told)
			}
			// Paths holds the newest of each pair.
			last := map[[2]uint16]PathRecord{}
			for _, p := range tc.told {
				last[[2]uint16{p.SLID, p.DLID}] = p
			}
			if got := fw.Paths(); len(got) != len(last) || slices.ContainsFunc(got, func(p PathRecord) bool { return !samePath(p, last[[2]uint16{p.SLID, p.DLID}]) }) {
				t.Fatalf("Paths %v, want %v", got, last)
			}
			for _, p := range told {
				back, err := ParsePathRecord(p.String())
				if err != nil || !samePath(back, p) {
					t.Fatalf("%q read back as %+v (%v)", p.String(), back, err)
				}
			}
		})
	}
}

func samePath(a, b PathRecord) bool {
	return a.SLID == b.SLID && a.DLID == b.DLID && a.From == b.From && a.To == b.To && slices.Equal(a.Hops, b.Hops)
}

func TestParsePathRecordRefuses(t *testing.T) {
	for _, s := range []string{
		"",
		"slid 1 dlid 2 from 0x1 to 0x2",
		"slid 1 dlid 2 from 0x1 to 0x2 hops 0x3:1",
		"slid 70000 dlid 2 from 0x1 to 0x2 hops",
		"slid 1 dlid 2 from 0x1 to 0x2 hops 0x3:1>300",
		"slid 1 dlid 2 from 0x1 to 0x2 hops 0x10000000000000000:1>2",
	} {
		if p, err := ParsePathRecord(s); err == nil {
			t.Errorf("%q read as %+v", s, p)
		}
	}
}

// TestParseTracert: ibtracert's output as infiniband-diags 44 prints it
// on ibsim's TwoSwitches fabric, h1 to h4.
func TestParseTracert(t *testing.T) {
	out := `From ca {0x0000000000100001} portnum 1 lid 1-1 "h1"
[1] -> switch port {0x0000000000200000}[1] lid 2-2 "sw1"
[6] -> switch port {0x0000000000200001}[6] lid 3-3 "sw2"
[2] -> ca port {0x0000000000100007}[1] lid 6-6 "h4"
To ca {0x0000000000100007} portnum 1 lid 6-6 "h4"
`
	hops, to, err := ParseTracert(out)
	if err != nil || to != guidH4 || !slices.Equal(hops, []Hop{{swGUID1, 1, 6}, {swGUID2, 6, 2}}) {
		t.Fatalf("%+v to %#x (%v)", hops, to, err)
	}
	if _, _, err := ParseTracert("ibtracert: iberror: failed: route not found\n"); err == nil {
		t.Fatal("no hops read as a path")
	}
}
