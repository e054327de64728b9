package cm

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// Where every CM MAD goes on an InfiniBand subnet, as the kernel's cm.c
// addresses it (issue 22). Two addresses exist per exchange:
//
//   - the received MAD's own (cm_init_av_for_response, cm_issue_rej,
//     cm_issue_drep, cm_dup_req_handler: ib_init_ah_attr_from_wc): the
//     source LID and SL, the bits of our LID it was sent to, a GRH only if
//     it had one, its P_Key;
//   - the exchange's path (cm_init_av_by_path): on the active side the
//     SA's path record, on the passive side the REQ's primary path (its
//     local LID, SL, P_Key; permissive LIDs replaced by the received
//     source, cm_process_routed_req).
//
// The MADs below tell the two apart: the peer's REQ names LID 0x11 and SL
// 3, its MADs come from LID 0x12 (another of its LIDs under its LMC) on
// SL 0, sent to our LID's path bits 2 while the REQ names bits 1.

const (
	addrPKey   ib.PKey = 0x8001
	addrOurLMC uint8   = 2
)

var (
	addrUs   = gidN(1)
	addrPeer = gidN(2)
	// addrFrom is what a provider reports of the peer's GRH-less MADs.
	addrFrom = ib.MADAddr{QPN: ib.QP1, PKey: addrPKey, Path: ib.Path{DLID: 0x12, SL: 0, SrcPathBits: 2}}
	// addrPath is the peer's address by the REQ's primary path.
	addrPath = ib.MADAddr{GID: addrPeer, QPN: ib.QP1, PKey: addrPKey, Path: ib.Path{DLID: 0x11, SL: 3, StaticRate: 7, SrcPathBits: 1}}
)

// addrREQ is the peer's REQ with a subnet-local primary path, as the
// kernel's cm_format_req fills it from an SA path within the subnet.
func addrREQ(commID uint32, qpn ib.QPN) *REQ {
	r := testREQ(addrPeer, 0x0002c90300000002, commID, qpn)
	r.PKey = addrPKey
	r.Primary = Path{LocalLID: 0x11, RemoteLID: 0x21, LocalGID: addrPeer, RemoteGID: addrUs,
		SL: 3, PacketRate: 7, SubnetLocal: true, LocalACKTimeout: 18}
	return r
}

// sentMAD is one MAD the engine sent.
type sentMAD struct {
	attr AttrID
	to   ib.MADAddr
	data [MADLen]byte
}

// addrEngine is one engine whose sends and events are recorded.
type addrEngine struct {
	t      *testing.T
	e      *Engine
	now    time.Time
	out    []sentMAD
	events []Event
	accept bool // accept every REQ at once
}

func newAddrEngine(t *testing.T, tune func(*EngineConfig)) *addrEngine {
	a := &addrEngine{t: t, now: t0, accept: true}
	cfg := EngineConfig{GID: addrUs, GUID: 0x0002c90300000001, PKey: addrPKey, LMC: addrOurLMC,
		ResponseTimeout: 16, MaxRetries: 2,
		Send: func(to ib.MADAddr, mad []byte) error {
			var s sentMAD
			s.to = to
			copy(s.data[:], mad)
			s.attr = AttrID(binary.BigEndian.Uint16(s.data[16:18]))
			a.out = append(a.out, s)
			return nil
		},
		Event: func(ev Event) {
			a.events = append(a.events, ev)
			if ev.Type == EvRequest && a.accept {
				if err := a.e.Accept(a.now, ev.Comm, AcceptParams{LocalQPN: 0x77, RNRRetry: 7}); err != nil {
					t.Errorf("accept: %v", err)
				}
			}
		},
	}
	if tune != nil {
		tune(&cfg)
	}
	a.e = NewEngine(cfg)
	if err := a.e.Listen(testService); err != nil {
		t.Fatal(err)
	}
	return a
}

// feed hands msg to the engine as if it came from from, and returns what
// the engine sent in answer.
func (a *addrEngine) feed(from ib.MADAddr, msg Message, tid uint64) []sentMAD {
	a.t.Helper()
	m := ib.MAD{From: from}
	if err := msg.MarshalMAD(m.Data[:], tid); err != nil {
		a.t.Fatalf("%v: %v", msg.AttrID(), err)
	}
	n := len(a.out)
	a.e.HandleMAD(a.now, &m)
	return a.out[n:]
}

// do runs f and returns what the engine sent meanwhile.
func (a *addrEngine) do(f func()) []sentMAD {
	n := len(a.out)
	f()
	return a.out[n:]
}

// expire moves the clock past the next timer and runs it.
func (a *addrEngine) expire() []sentMAD {
	return a.do(func() {
		a.now = a.e.Next().Add(time.Nanosecond)
		a.e.Expire(a.now)
	})
}

func (a *addrEngine) comm() *Comm {
	a.t.Helper()
	for _, c := range a.e.byLocal {
		return c
	}
	a.t.Fatal("no connection")
	return nil
}

// passiveEstablished brings a REQ from the peer to established.
func (a *addrEngine) passiveEstablished() *Comm {
	a.t.Helper()
	a.feed(addrFrom, addrREQ(0x100, 0x42), 1)
	c := a.comm()
	a.feed(addrFrom, &RTU{LocalCommID: 0x100, RemoteCommID: c.LocalCommID}, 1)
	if c.State != StateEstablished {
		a.t.Fatalf("setup: %v", c.State)
	}
	return c
}

// activeParams connects over the SA's path to the peer.
var activeParams = ConnectParams{
	RemoteGID: addrPeer, ServiceID: testService, LocalQPN: 0x55, PathMTU: ib.MTU2048,
	Address: addrPath.Path,
	Primary: &Path{LocalLID: 0x21, RemoteLID: 0x11, SL: 3, PacketRate: 7, SubnetLocal: true, LocalACKTimeout: 18},
}

// activeREP is the peer's REP to our REQ.
func activeREP(c *Comm, qpn ib.QPN) *REP {
	return &REP{LocalCommID: 0x200, RemoteCommID: c.LocalCommID, LocalQPN: qpn, StartingPSN: 1, LocalCAGUID: 0x0002c90300000002}
}

func TestEngineMADAddresses(t *testing.T) {
	withGRH := addrFrom
	withGRH.GID, withGRH.Path.GRH, withGRH.Path.HopLimit = gidN(9), true, 0xff
	for _, tc := range []struct {
		name  string
		tune  func(*EngineConfig)
		run   func(a *addrEngine) []sentMAD
		attr  AttrID
		reply ib.MADAddr // where the MAD must go
	}{
		// The passive side, before a listener matched the REQ.
		{"REJ invalid service ID", nil, func(a *addrEngine) []sentMAD {
			r := addrREQ(0x100, 0x42)
			r.ServiceID++
			return a.feed(addrFrom, r, 1)
		}, AttrREJ, addrFrom},
		{"REJ invalid transport", nil, func(a *addrEngine) []sentMAD {
			r := addrREQ(0x100, 0x42)
			r.TransportType = TransportRD
			return a.feed(addrFrom, r, 1)
		}, AttrREJ, addrFrom},
		{"REJ no resources", func(c *EngineConfig) { c.MaxHalfOpen = 1 }, func(a *addrEngine) []sentMAD {
			a.accept = false
			a.feed(addrFrom, addrREQ(0x100, 0x42), 1)
			return a.feed(addrFrom, addrREQ(0x101, 0x43), 2)
		}, AttrREJ, addrFrom},
		{"REJ invalid GID: the REQ claims another port", nil, func(a *addrEngine) []sentMAD {
			return a.feed(withGRH, addrREQ(0x100, 0x42), 1)
		}, AttrREJ, withGRH},
		{"REJ stale: a REQ names an established connection's QP", nil, func(a *addrEngine) []sentMAD {
			a.passiveEstablished()
			out := a.feed(addrFrom, addrREQ(0x101, 0x42), 2)
			return keep(out, AttrREJ)
		}, AttrREJ, addrFrom},
		// Duplicates of a REQ are answered where they came from
		// (cm_dup_req_handler), except a REP sent again.
		{"MRA for a duplicate REQ", nil, func(a *addrEngine) []sentMAD {
			a.accept = false
			a.feed(addrFrom, addrREQ(0x100, 0x42), 1)
			return a.feed(addrFrom, addrREQ(0x100, 0x42), 1)
		}, AttrMRA, addrFrom},
		{"REJ stale for a duplicate REQ in timewait", nil, func(a *addrEngine) []sentMAD {
			c := a.passiveEstablished()
			a.feed(addrFrom, &DREQ{LocalCommID: 0x100, RemoteCommID: c.LocalCommID, RemoteQPN: 0x77}, 2)
			return a.feed(addrFrom, addrREQ(0x100, 0x42), 1)
		}, AttrREJ, addrFrom},
		// The passive side after the match: the REQ's primary path.
		{"REP", nil, func(a *addrEngine) []sentMAD {
			return a.feed(addrFrom, addrREQ(0x100, 0x42), 1)
		}, AttrREP, addrPath},
		{"REP again for a duplicate REQ", nil, func(a *addrEngine) []sentMAD {
			a.feed(addrFrom, addrREQ(0x100, 0x42), 1)
			return a.feed(addrFrom, addrREQ(0x100, 0x42), 1)
		}, AttrREP, addrPath},
		{"REP retransmitted", nil, func(a *addrEngine) []sentMAD {
			a.feed(addrFrom, addrREQ(0x100, 0x42), 1)
			return a.expire()
		}, AttrREP, addrPath},
		{"REJ timeout after the REP's last retry", nil, func(a *addrEngine) []sentMAD {
			a.feed(addrFrom, addrREQ(0x100, 0x42), 1)
			a.expire()
			a.expire()
			return a.expire()
		}, AttrREJ, addrPath},
		{"REJ by the consumer", nil, func(a *addrEngine) []sentMAD {
			a.accept = false
			a.feed(addrFrom, addrREQ(0x100, 0x42), 1)
			c := a.comm()
			return a.do(func() { _ = a.e.Reject(c, RejConsumerReject, nil) })
		}, AttrREJ, addrPath},
		{"DREP for the peer's DREQ", nil, func(a *addrEngine) []sentMAD {
			c := a.passiveEstablished()
			return a.feed(addrFrom, &DREQ{LocalCommID: 0x100, RemoteCommID: c.LocalCommID, RemoteQPN: 0x77}, 2)
		}, AttrDREP, addrPath},
		{"DREQ on disconnect", nil, func(a *addrEngine) []sentMAD {
			c := a.passiveEstablished()
			return a.do(func() { a.e.Disconnect(a.now, c) })
		}, AttrDREQ, addrPath},
		{"DREQ to a connection found stale", nil, func(a *addrEngine) []sentMAD {
			a.passiveEstablished()
			out := a.feed(addrFrom, addrREQ(0x101, 0x42), 2)
			return keep(out, AttrDREQ)
		}, AttrDREQ, addrPath},
		{"DREP for a DREQ in timewait", nil, func(a *addrEngine) []sentMAD {
			c := a.passiveEstablished()
			d := &DREQ{LocalCommID: 0x100, RemoteCommID: c.LocalCommID, RemoteQPN: 0x77}
			a.feed(addrFrom, d, 2)
			return a.feed(addrFrom, d, 2)
		}, AttrDREP, addrFrom},
		{"DREP for an unknown DREQ", nil, func(a *addrEngine) []sentMAD {
			return a.feed(addrFrom, &DREQ{LocalCommID: 0x100, RemoteCommID: 0x999, RemoteQPN: 0x77}, 2)
		}, AttrDREP, addrFrom},
		// The active side: every MAD of its own by the SA's path.
		{"REQ", nil, func(a *addrEngine) []sentMAD {
			return a.do(func() { _, _ = a.e.Connect(a.now, activeParams) })
		}, AttrREQ, addrPath},
		{"REQ retransmitted", nil, func(a *addrEngine) []sentMAD {
			_, _ = a.e.Connect(a.now, activeParams)
			return a.expire()
		}, AttrREQ, addrPath},
		{"RTU", nil, func(a *addrEngine) []sentMAD {
			c, _ := a.e.Connect(a.now, activeParams)
			a.feed(addrFrom, activeREP(c, 0x42), c.tid)
			return a.do(func() { _ = a.e.Ready(c) })
		}, AttrRTU, addrPath},
		{"REJ of a REP", nil, func(a *addrEngine) []sentMAD {
			c, _ := a.e.Connect(a.now, activeParams)
			a.feed(addrFrom, activeREP(c, 0x42), c.tid)
			return a.do(func() { _ = a.e.RejectReply(c, RejConsumerReject, nil) })
		}, AttrREJ, addrPath},
		{"REJ timeout: giving up a REQ", nil, func(a *addrEngine) []sentMAD {
			c, _ := a.e.Connect(a.now, activeParams)
			return a.do(func() { a.e.Disconnect(a.now, c) })
		}, AttrREJ, addrPath},
		{"DREQ of the active side", nil, func(a *addrEngine) []sentMAD {
			c, _ := a.e.Connect(a.now, activeParams)
			a.feed(addrFrom, activeREP(c, 0x42), c.tid)
			_ = a.e.Ready(c)
			return a.do(func() { a.e.Disconnect(a.now, c) })
		}, AttrDREQ, addrPath},
		{"DREP of the active side", nil, func(a *addrEngine) []sentMAD {
			c, _ := a.e.Connect(a.now, activeParams)
			a.feed(addrFrom, activeREP(c, 0x42), c.tid)
			_ = a.e.Ready(c)
			return a.feed(addrFrom, &DREQ{LocalCommID: 0x200, RemoteCommID: c.LocalCommID, RemoteQPN: 0x55}, 3)
		}, AttrDREP, addrPath},
		{"REJ stale: a REP names an established connection's QP", nil, func(a *addrEngine) []sentMAD {
			c, _ := a.e.Connect(a.now, activeParams)
			a.feed(addrFrom, activeREP(c, 0x42), c.tid)
			_ = a.e.Ready(c)
			c2, _ := a.e.Connect(a.now, activeParams)
			rep := activeREP(c2, 0x42)
			rep.LocalCommID = 0x201
			return keep(a.feed(addrFrom, rep, c2.tid), AttrREJ)
		}, AttrREJ, addrFrom},
		{"REJ invalid comm ID for an unknown REP", nil, func(a *addrEngine) []sentMAD {
			return a.feed(addrFrom, &REP{LocalCommID: 0x200, RemoteCommID: 0x999, LocalQPN: 0x42, LocalCAGUID: 2}, 3)
		}, AttrREJ, addrFrom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAddrEngine(t, tc.tune)
			out := tc.run(a)
			if len(out) != 1 || out[0].attr != tc.attr {
				t.Fatalf("sent %v, want one %v", attrs(out), tc.attr)
			}
			if out[0].to != tc.reply {
				t.Errorf("%v to %+v\nwant %+v", tc.attr, out[0].to, tc.reply)
			}
		})
	}
}

// keep returns the MADs of kind attr in out.
func keep(out []sentMAD, attr AttrID) []sentMAD {
	var k []sentMAD
	for _, s := range out {
		if s.attr == attr {
			k = append(k, s)
		}
	}
	return k
}

func attrs(out []sentMAD) []AttrID {
	var as []AttrID
	for _, s := range out {
		as = append(as, s.attr)
	}
	return as
}

// The passive side's address (REP and after, and the QP's RTR) from the
// REQ's primary path and the received MAD, as cm_req_handler,
// cm_process_routed_req, cm_format_paths_from_req and
// ib_init_ah_attr_from_path build it.
func TestPassiveAddress(t *testing.T) {
	local := Path{LocalLID: 0x11, RemoteLID: 0x21, SL: 3, PacketRate: 7, SubnetLocal: true,
		TrafficClass: 0x20, FlowLabel: 0x12345}
	routed := Path{LocalLID: permissiveLID, RemoteLID: permissiveLID, SL: 0, PacketRate: 7, HopLimit: 64,
		TrafficClass: 0x20, FlowLabel: 0x12345}
	noGRH := ib.MADAddr{QPN: 1, PKey: addrPKey, Path: ib.Path{DLID: 0x12, SL: 6, SrcPathBits: 2}}
	grh := noGRH
	grh.GID, grh.Path.GRH, grh.Path.HopLimit = addrPeer, true, 0xff
	grhHop0 := grh
	grhHop0.Path.HopLimit = 0
	roce := ib.MADAddr{GID: addrPeer, QPN: 1, PKey: addrPKey}
	with := func(p Path, f func(*Path)) Path { f(&p); return p }
	for _, tc := range []struct {
		name string
		req  Path
		from ib.MADAddr
		want ib.Path
	}{
		{"subnet-local path, MAD without GRH: the REQ's LID, SL and our bits", local, noGRH,
			ib.Path{DLID: 0x11, SL: 3, StaticRate: 7, SrcPathBits: 1}},
		{"subnet-local path, MAD with GRH: a GRH with the received hop limit", local, grh,
			ib.Path{DLID: 0x11, SL: 3, StaticRate: 7, SrcPathBits: 1, GRH: true, HopLimit: 0xff, TrafficClass: 0x20, FlowLabel: 0x12345}},
		{"permissive LIDs, MAD without GRH: the source LID, SL and bits", routed, noGRH,
			ib.Path{DLID: 0x12, SL: 6, StaticRate: 7, SrcPathBits: 2}},
		{"permissive LIDs, MAD with GRH", routed, grh,
			ib.Path{DLID: 0x12, SL: 6, StaticRate: 7, SrcPathBits: 2, GRH: true, HopLimit: 0xff, TrafficClass: 0x20, FlowLabel: 0x12345}},
		{"GRH reported with hop limit 0: the kernel's 0xff", routed, grhHop0,
			ib.Path{DLID: 0x12, SL: 6, StaticRate: 7, SrcPathBits: 2, GRH: true, HopLimit: 0xff, TrafficClass: 0x20, FlowLabel: 0x12345}},
		{"routed path naming its local LID: only our bits from the MAD",
			with(routed, func(p *Path) { p.LocalLID, p.SL = 0x11, 3 }), noGRH,
			ib.Path{DLID: 0x11, SL: 3, StaticRate: 7, SrcPathBits: 2}},
		{"permissive LIDs on a subnet-local path are not replaced",
			with(local, func(p *Path) { p.LocalLID = permissiveLID }), noGRH, ib.Path{}},
		{"RoCE or softib: a routed REQ from a MAD without LID is GID only", routed, roce, ib.Path{}},
		{"a multicast LID names no peer", with(local, func(p *Path) { p.LocalLID = 0xc001 }), noGRH, ib.Path{}},
		{"LID 0 names no peer", with(local, func(p *Path) { p.LocalLID = 0 }), noGRH, ib.Path{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEngine(EngineConfig{GID: addrUs, PKey: addrPKey, LMC: addrOurLMC})
			if got := e.passiveAddress(tc.from, &tc.req); got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// A routed REQ with permissive LIDs gives the QP the received source LID
// and SL as well as the MADs (cm_process_routed_req).
func TestPermissiveREQAddressesQPAndMADs(t *testing.T) {
	a := newAddrEngine(t, nil)
	r := addrREQ(0x100, 0x42)
	r.Primary = Path{LocalLID: permissiveLID, RemoteLID: permissiveLID, LocalGID: addrPeer, PacketRate: 7, HopLimit: 64, LocalACKTimeout: 18}
	out := a.feed(addrFrom, r, 1)
	want := ib.Path{DLID: 0x12, SL: 0, StaticRate: 7, SrcPathBits: 2}
	if c := a.comm(); c.Address != want {
		t.Errorf("QP address %+v, want %+v", c.Address, want)
	}
	if len(out) != 1 || out[0].attr != AttrREP || out[0].to.Path != want || out[0].to.GID != addrPeer {
		t.Errorf("sent %+v, want a REP to %+v", out, want)
	}
}

// FuzzPassiveAddress: whatever a REQ's primary path and its MAD's source
// say, the passive side's address names a unicast LID or is GID only,
// carries a GRH exactly when the REQ came with one, and takes the
// received LID only for a routed path naming the permissive LID.
func FuzzPassiveAddress(f *testing.F) {
	seed := make([]byte, reqPathLen)
	(&Path{LocalLID: 0x11, RemoteLID: 0x21, SL: 3, SubnetLocal: true}).putREQ(seed)
	f.Add(seed, uint16(0x12), uint8(6), uint8(2), false, uint8(0), uint8(2))
	(&Path{LocalLID: permissiveLID, RemoteLID: permissiveLID, HopLimit: 64}).putREQ(seed)
	f.Add(seed, uint16(0x12), uint8(6), uint8(2), true, uint8(0xff), uint8(0))
	f.Add(seed, uint16(0), uint8(0), uint8(0), true, uint8(64), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, lid uint16, sl, bits uint8, grh bool, hop, lmc uint8) {
		if len(b) < reqPathLen {
			return
		}
		p := decodeREQPath(b)
		from := ib.MADAddr{QPN: 1, PKey: addrPKey, Path: ib.Path{DLID: lid, SL: sl & 0xf, SrcPathBits: bits & 0x7f, GRH: grh, HopLimit: hop}}
		e := NewEngine(EngineConfig{GID: addrUs, PKey: addrPKey, LMC: lmc})
		a := e.passiveAddress(from, &p)
		if a == (ib.Path{}) {
			return
		}
		if a.DLID == 0 || a.DLID >= 0xc000 {
			t.Fatalf("address %+v names no unicast LID", a)
		}
		if a.GRH != grh || (a.GRH && a.HopLimit == 0) {
			t.Fatalf("GRH %v hop %d from a MAD with GRH %v", a.GRH, a.HopLimit, grh)
		}
		routedFromIB := !p.SubnetLocal && lid != 0 && p.LocalLID == permissiveLID
		if routedFromIB && (a.DLID != lid || a.SL != from.Path.SL) || !routedFromIB && (a.DLID != p.LocalLID || a.SL != p.SL) {
			t.Fatalf("address %+v from REQ path %+v and MAD %+v", a, p, from.Path)
		}
	})
}
