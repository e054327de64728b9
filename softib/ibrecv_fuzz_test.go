package softib

import (
	"net/netip"
	"os"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// FuzzIBReceive feeds frames to an InfiniBand port's receive path as if
// they came from its forwarder: whatever they hold, the port counts or
// delivers them and never panics. With octet 0 odd the frame's CRCs are
// made right first (when it parses), so that the fuzzer reaches the DLID,
// P_Key, QP and transport checks behind them.
func FuzzIBReceive(f *testing.F) {
	fwd := netip.MustParseAddrPort("127.88.99.254:4790")
	// Each fuzzing worker is a process of its own with its own device.
	port := uint16(20000 + os.Getpid()%30000)
	d, err := Open(Config{Addr: netip.MustParseAddr("127.88.99.1"), Port: port, LinkLayer: LinkInfiniBand, PKeys: []ib.PKey{ib.DefaultPKey, 0x8002},
		IB: IBConfig{LID: 0x20, LMC: 1, Forwarder: fwd}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { d.Close() })
	slab, err := ib.NewSlab(1 << 20)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { slab.Close() })
	mr, _ := d.RegisterMemory(slab)
	scq, _ := d.CreateCQ(1 << 16)
	rcq, _ := d.CreateCQ(1 << 16)
	ud, _ := d.CreateQP(ib.QPAttr{Type: ib.UD, SendCQ: scq, RecvCQ: rcq, MaxSend: 8, MaxRecv: 8})
	rc, _ := d.CreateQP(ib.QPAttr{Type: ib.RC, SendCQ: scq, RecvCQ: rcq, MaxSend: 8, MaxRecv: 8})
	for _, m := range []ib.QPModify{{State: ib.StateInit, PKey: ib.DefaultPKey, QKey: 0x0b1b}, {State: ib.StateRTR}, {State: ib.StateRTS}} {
		if err := ud.Modify(m); err != nil {
			f.Fatal(err)
		}
	}
	for _, m := range []ib.QPModify{{State: ib.StateInit, PKey: ib.DefaultPKey},
		{State: ib.StateRTR, DestQPN: 0x42, PathMTU: ib.MTU1024, Path: ib.Path{DLID: 0x30}},
		{State: ib.StateRTS, Timeout: 0}} {
		if err := rc.Modify(m); err != nil {
			f.Fatal(err)
		}
	}
	if err := d.AttachMulticast(ud, ib.GID{0xff, 0x12}, 0xc001); err != nil {
		f.Fatal(err)
	}
	repost := func() {
		var wc [64]ib.Completion
		for rcq.Poll(wc[:]) > 0 {
		}
		for scq.Poll(wc[:]) > 0 {
		}
		ud.PostRecv([]ib.RecvWR{{ID: 1, SGE: ib.SGE{MR: mr, Offset: 0, Length: 4096 + ib.GRHLen}}})
		rc.PostRecv([]ib.RecvWR{{ID: 2, SGE: ib.SGE{MR: mr, Offset: 1 << 16, Length: 1 << 16}}})
	}
	for _, fr := range []wire.IBFrame{
		{LRH: wire.LRH{DLID: 0x21, SLID: 0x30}, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, PKey: ib.DefaultPKey, DestQP: ud.Num()}, DETH: wire.DETH{QKey: 0x0b1b, SrcQP: 5}, Payload: make([]byte, 40)}},
		{LRH: wire.LRH{DLID: 0xc001, SLID: 0x30}, HasGRH: true, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, PKey: ib.DefaultPKey, DestQP: ib.MulticastQPN}, DETH: wire.DETH{QKey: 0x0b1b, SrcQP: 5}, Payload: make([]byte, 8)}},
		{LRH: wire.LRH{DLID: 0x20, SLID: 0x30}, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpRCSendFirst, PKey: ib.DefaultPKey, DestQP: rc.Num()}, Payload: make([]byte, 1024)}},
		{LRH: wire.LRH{DLID: 0x20, SLID: 0x30}, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpRCAck, PKey: ib.DefaultPKey, DestQP: rc.Num()}, AETH: wire.ACK(0)}},
		{LRH: wire.LRH{DLID: 0x20, SLID: 0x30}, Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, PKey: ib.DefaultPKey, DestQP: ib.QP1}, DETH: wire.DETH{QKey: ib.GSIQKey, SrcQP: 1}, Payload: make([]byte, 256)}},
	} {
		b, err := wire.AppendIBFrame(nil, &fr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{1}, b...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		b := in[1:]
		if in[0]&1 != 0 {
			var fr wire.IBFrame
			if wire.ParseIBFrame(b, &fr) == nil {
				wire.SealIBFrame(b, fr.HasGRH)
			}
		}
		repost()
		d.receive(b, fwd, d.fab.local, 0)
		d.endBatch()
	})
}
