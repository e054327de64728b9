package softib

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// openIBPort opens an InfiniBand-link port at LID 0x20 (LMC 1, SM LID 1)
// whose forwarder is a socket the test reads.
func openIBPort(t *testing.T) (*Device, *net.UDPConn) {
	t.Helper()
	fwd, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 88, 97, 254)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fwd.Close() })
	port := uint16(20000 + (os.Getpid()+7)%30000)
	d, err := Open(Config{Addr: netip.MustParseAddr("127.88.97.1"), Port: port, LinkLayer: LinkInfiniBand,
		PKeys: []ib.PKey{ib.DefaultPKey}, IB: IBConfig{LID: 0x20, LMC: 1, SMLID: 1, Forwarder: fwd.LocalAddr().(*net.UDPAddr).AddrPort()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, fwd
}

func TestSetSubnetEvents(t *testing.T) {
	full := []ib.PKey{ib.DefaultPKey}
	for _, tc := range []struct {
		name   string
		s      Subnet
		want   SubnetEvent
		events uint64 // SubnetEvents after it
		err    bool
	}{
		{name: "nothing changed", s: Subnet{LID: 0x20, LMC: 1, SMLID: 1, PKeys: full}},
		{name: "LID moved", s: Subnet{LID: 0x40, LMC: 1, SMLID: 1, PKeys: full}, want: EventLIDChange, events: 1},
		{name: "LMC changed", s: Subnet{LID: 0x20, LMC: 2, SMLID: 1, PKeys: full}, want: EventLIDChange, events: 1},
		{name: "another SM", s: Subnet{LID: 0x20, LMC: 1, SMLID: 9, PKeys: full}, want: EventSMChange, events: 1},
		{name: "reregister only", s: Subnet{LID: 0x20, LMC: 1, SMLID: 1, PKeys: full, Reregister: true}, want: EventClientReregister, events: 1},
		{name: "P_Key table", s: Subnet{LID: 0x20, LMC: 1, SMLID: 1, PKeys: []ib.PKey{ib.DefaultPKey, 0x8002}}, want: EventPKeyChange, events: 1},
		{name: "SM restart moving everything", s: Subnet{LID: 0x08, LMC: 0, SMLID: 3, PKeys: full, Reregister: true},
			want: EventLIDChange | EventSMChange | EventClientReregister, events: 3},
		{name: "multicast LID", s: Subnet{LID: 0xc001, SMLID: 1, PKeys: full}, err: true},
		{name: "LID 0", s: Subnet{LID: 0, SMLID: 1, PKeys: full}, err: true},
		{name: "unaligned to LMC", s: Subnet{LID: 0x21, LMC: 1, SMLID: 1, PKeys: full}, err: true},
		{name: "LMC 8", s: Subnet{LID: 0x100, LMC: 8, SMLID: 1, PKeys: full}, err: true},
		{name: "empty P_Key table", s: Subnet{LID: 0x20, LMC: 1, SMLID: 1}, err: true},
		{name: "invalid P_Key", s: Subnet{LID: 0x20, LMC: 1, SMLID: 1, PKeys: []ib.PKey{0x8000}}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := openIBPort(t)
			before := d.Port()
			ev, err := d.SetSubnet(tc.s)
			if tc.err {
				if err == nil {
					t.Fatalf("SetSubnet(%+v) took it", tc.s)
				}
				if p := d.Port(); p.LID != before.LID || p.LMC != before.LMC || d.SubnetEvents() != 0 {
					t.Fatalf("a refused change changed the port: LID %#x LMC %d, %d events", p.LID, p.LMC, d.SubnetEvents())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev != tc.want || d.SubnetEvents() != tc.events {
				t.Fatalf("events %v (%d counted), want %v (%d)", ev, d.SubnetEvents(), tc.want, tc.events)
			}
			p := d.Port()
			if p.LID != tc.s.LID || p.LMC != tc.s.LMC || p.SMLID != tc.s.SMLID || !slices.Equal(p.PKeys, tc.s.PKeys) {
				t.Fatalf("Port() = LID %#x LMC %d SM %#x P_Keys %v after %+v", p.LID, p.LMC, p.SMLID, p.PKeys, tc.s)
			}
			if p.GID != before.GID {
				t.Fatalf("the GID moved from %v to %v", before.GID, p.GID)
			}
		})
	}
}

func TestSetSubnetRoCE(t *testing.T) {
	d, err := Open(Config{Addr: netip.MustParseAddr("127.88.97.2"), Port: uint16(20000 + (os.Getpid()+11)%30000)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.SetSubnet(Subnet{LID: 1, SMLID: 1, PKeys: []ib.PKey{ib.DefaultPKey}}); !errors.Is(err, ErrNotIB) {
		t.Fatalf("SetSubnet on RoCE: %v, want ErrNotIB", err)
	}
	if err := d.SetPortActive(false); !errors.Is(err, ErrNotIB) || !d.PortActive() {
		t.Fatalf("SetPortActive(false) on RoCE: %v, port active %v; want ErrNotIB and the port still up", err, d.PortActive())
	}
	if d.SubnetEvents() != 0 {
		t.Fatal("a RoCE port counted subnet events")
	}
}

// TestSetSubnetDatapath: after the SM moved the port, a QP made ready
// before sends from the new LID (an HCA takes its port's LID at send
// time), and the port takes packets to its new LIDs only.
func TestSetSubnetDatapath(t *testing.T) {
	d, fwd := openIBPort(t)
	slab, err := ib.NewSlab(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer slab.Close()
	mr, _ := d.RegisterMemory(slab)
	scq, _ := d.CreateCQ(64)
	rcq, _ := d.CreateCQ(64)
	ud, err := d.CreateQP(ib.QPAttr{Type: ib.UD, SendCQ: scq, RecvCQ: rcq, MaxSend: 8, MaxRecv: 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []ib.QPModify{{State: ib.StateInit, PKey: ib.DefaultPKey, QKey: 0x0b1b}, {State: ib.StateRTR}, {State: ib.StateRTS}} {
		if err := ud.Modify(m); err != nil {
			t.Fatal(err)
		}
	}
	ah, err := d.CreateAH(ib.AHAttr{Path: ib.Path{DLID: 0x30, SrcPathBits: 1}, DestGID: ib.GID{0xfe, 0x80, 15: 2}})
	if err != nil {
		t.Fatal(err)
	}
	sendSLID := func() uint16 {
		t.Helper()
		if _, err := ud.PostSend([]ib.SendWR{{ID: 1, SGE: ib.SGE{MR: mr, Length: 64}, AH: ah, RemoteQPN: 0x42, RemoteQKey: 0x0b1b}}); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 2048)
		_ = fwd.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := fwd.Read(b)
		if err != nil {
			t.Fatal(err)
		}
		var f wire.IBFrame
		if err := wire.ParseIBFrame(b[:n], &f); err != nil {
			t.Fatal(err)
		}
		return f.LRH.SLID
	}
	if got := sendSLID(); got != 0x21 {
		t.Fatalf("SLID %#x before the change, want 0x21 (LID 0x20, path bit 1)", got)
	}
	if _, err := d.SetSubnet(Subnet{LID: 0x40, LMC: 1, SMLID: 1, PKeys: []ib.PKey{ib.DefaultPKey}}); err != nil {
		t.Fatal(err)
	}
	if got := sendSLID(); got != 0x41 {
		t.Fatalf("SLID %#x after the SM moved us to 0x40, want 0x41", got)
	}

	// Received: to the old LID dropped, to the new one delivered.
	from := d.ibp.cfg.Forwarder
	wrongDLID := func() uint64 { return CounterValue(d.Counters(), dropNames[dropWrongDLID]) }
	for _, tc := range []struct {
		dlid      uint16
		delivered bool
	}{{0x20, false}, {0x21, false}, {0x41, true}} {
		if _, err := ud.PostRecv([]ib.RecvWR{{ID: 2, SGE: ib.SGE{MR: mr, Offset: 4096, Length: 4096}}}); err != nil {
			t.Fatal(err)
		}
		fr := wire.IBFrame{LRH: wire.LRH{DLID: tc.dlid, SLID: 0x30}, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, PKey: ib.DefaultPKey, DestQP: ud.Num()},
			DETH: wire.DETH{QKey: 0x0b1b, SrcQP: 5}, Payload: make([]byte, 40)}}
		b, err := wire.AppendIBFrame(nil, &fr)
		if err != nil {
			t.Fatal(err)
		}
		drops := wrongDLID()
		d.receive(b, from, d.fab.local, 0)
		d.endBatch()
		var wc [4]ib.Completion
		got := rcq.Poll(wc[:]) > 0
		if got != tc.delivered || (wrongDLID() > drops) == tc.delivered {
			t.Fatalf("DLID %#x: delivered %v (wrong-DLID drops %d -> %d), want delivered %v", tc.dlid, got, drops, wrongDLID(), tc.delivered)
		}
	}
}
