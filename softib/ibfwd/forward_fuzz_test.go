package ibfwd

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/softib/wire"
)

// FuzzForward feeds frames to the forwarder as if a registered port sent
// them: whatever they hold, it forwards or counts them and never panics,
// while it records paths and holds CM REQs (whose MAD it reads).
// With octet 0 odd the VCRC is made right first, to reach the routing
// behind it; with its bit 1 set the frame comes from h1 of a two-switch
// Subnet's tables (subnet_test.go) instead of the Static ones.
func FuzzForward(f *testing.F) {
	routes := NewStatic()
	routes.SL2VL[3] = 15
	if err := routes.AddPort(1, 0x10, 1); err != nil {
		f.Fatal(err)
	}
	if err := routes.AddPort(2, 0x20, 0); err != nil {
		f.Fatal(err)
	}
	if err := routes.AddGroup(0xc001, 1, 2); err != nil {
		f.Fatal(err)
	}
	fw, err := New(netip.MustParseAddrPort("127.0.0.1:0"), routes)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { fw.Close() })
	fw.RecordPaths(nil)
	fw.CrossREQs(50*time.Millisecond, nil)
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { sink.Close() })
	tables := newFabricTables()
	tables.mft["2"] = map[uint16][]int{0xc000: {2, 5}}
	tables.mft["3"] = map[uint16][]int{0xc000: {2, 5}}
	tables.vl15[[3]int{2, 1, 6}] = true
	subnet, err := ReadSubnet(tables.run)
	if err != nil {
		f.Fatal(err)
	}
	sink2, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { sink2.Close() })
	src := netip.MustParseAddrPort("127.0.0.1:9") // never sends: forward is called directly
	src2 := netip.MustParseAddrPort("127.0.0.1:10")
	for _, p := range []Port{{GUID: 1, LID: 0x10, LMC: 1, Addr: src}, {GUID: 2, LID: 0x20, Addr: sink.LocalAddr().(*net.UDPAddr).AddrPort()},
		{GUID: guidH1, LID: lidH1, Addr: src2}, {GUID: guidH4, LID: lidH4, Addr: sink2.LocalAddr().(*net.UDPAddr).AddrPort()}} {
		if err := fw.Register(p); err != nil {
			f.Fatal(err)
		}
	}
	req := make([]byte, 256)
	req[0], req[1], req[2], req[3], req[17] = 1, madClassCM, 2, 3, madAttrREQ
	for _, fr := range []wire.IBFrame{
		{LRH: wire.LRH{DLID: 0x20, SLID: 0x10}, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, DestQP: 1}, Payload: req}},
		{LRH: wire.LRH{DLID: lidH4, SLID: lidH1}, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, DestQP: 1}, Payload: req}},
		{LRH: wire.LRH{DLID: 0x20, SLID: 0x11}, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, DestQP: 5}, Payload: make([]byte, 12)}},
		{LRH: wire.LRH{DLID: 0xc001, SL: 3, SLID: 0x10}, HasGRH: true, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, DestQP: 0xffffff}}},
		{LRH: wire.LRH{DLID: lidH4, SLID: lidH1}, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, DestQP: 5}, Payload: make([]byte, 12)}},
		{LRH: wire.LRH{DLID: 0xc000, SLID: lidH1}, HasGRH: true, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, DestQP: 0xffffff}}},
	} {
		b, err := wire.AppendIBFrame(nil, &fr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{1}, b...))
		f.Add(append([]byte{3}, b...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		b := in[1:]
		if in[0]&1 != 0 && len(b) >= wire.VCRCLen {
			n := len(b) - wire.VCRCLen
			wire.PutVCRC(b[n:], wire.VCRC(b[:n]))
		}
		if in[0]&2 != 0 {
			fw.SetRoutes(subnet)
			fw.forward(b, src2)
		} else {
			fw.SetRoutes(routes)
			fw.forward(b, src)
		}
	})
}
