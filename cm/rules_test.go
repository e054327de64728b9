package cm

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// Tests of the rules a third host on the fabric must not get past (issue
// 16) and of what a kernel peer needs from our CM (issue 11), each with
// the fake clock and the in-memory fabric.

func v4GID(s string) ib.GID { return ib.GIDFromAddr(netip.MustParseAddr(s)) }

// softibGUID is the CA GUID softib derives from a port GID.
func softibGUID(g ib.GID) uint64 { return binary.BigEndian.Uint64(g[8:]) }

// testREQ is a REQ for testService as a peer at gid would send it.
func testREQ(gid ib.GID, guid uint64, commID uint32, qpn ib.QPN) *REQ {
	return &REQ{
		LocalCommID: commID, ServiceID: testService, LocalCAGUID: guid, LocalQPN: qpn,
		TransportType: TransportRC, PathMTU: ib.MTU2048, StartingPSN: 0x4242,
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, MaxCMRetries: 15,
		Primary: Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: gid, HopLimit: 64},
	}
}

// establishedEngines: a connected to b, both established.
func establishedEngines(t *testing.T) (*fabric, *engNode, *engNode, *Comm, *Comm) {
	t.Helper()
	f, a, b := pair(t)
	ac := a.connect(b)
	f.Drain()
	bc := onlyComm(t, b.e)
	if ac.State != StateEstablished || bc == nil || bc.State != StateEstablished {
		t.Fatalf("setup: states %v %v", ac.State, bc)
	}
	return f, a, b, ac, bc
}

func TestEngineREQSourceCheck(t *testing.T) {
	third4, other4 := v4GID("10.9.0.3"), v4GID("10.9.0.1")
	for _, tc := range []struct {
		name     string
		from     ib.GID // the MAD's source
		claimed  ib.GID // the REQ's primary local port GID
		guid     uint64
		mismatch bool
	}{
		{"claims another port GID", gidN(9), gidN(1), 0x0002c90300000001, true},
		{"softib GUID of another IPv4 host", third4, third4, softibGUID(other4), true},
		{"softib IPv4 GUID from an IPv6 source", gidN(9), gidN(9), softibGUID(other4), true},
		{"its own softib GUID", third4, third4, softibGUID(third4), false},
		{"an adapter's GUID", third4, third4, 0x0002c90300001234, false},
		{"no source GID to compare (no GRH)", ib.GID{}, gidN(5), 0x0002c90300000005, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFabric(t)
			b := newEngNode(f, 2, testEngineConfig())
			req := testREQ(tc.claimed, tc.guid, 0x1234, 0x77)
			out := inject(t, f, b.e, tc.from, req, 0xabc)
			if !tc.mismatch {
				if len(b.events) != 1 || b.events[0].Type != EvRequest || b.e.Stats.SourceMismatch != 0 {
					t.Fatalf("events %v, mismatches %d; want the REQ accepted", b.types(), b.e.Stats.SourceMismatch)
				}
				return
			}
			w := onlyWire(t, out, AttrREJ)
			r := decode[REJ](t, w)
			if w.To != tc.from || w.TID() != 0xabc || r.Reason != RejInvalidGID || r.RemoteCommID != req.LocalCommID ||
				r.MessageRejected != MsgREQ || r.RejectInfoLength != 16 || ib.GID(r.ARI[:16]) != b.gid {
				t.Errorf("REJ %+v to %v", r, w.To)
			}
			if len(b.events) != 0 || b.e.Conns() != 0 {
				t.Errorf("events %v conns %d after a REQ from the wrong source", b.types(), b.e.Conns())
			}
			cs := b.e.Counters()
			wantCounter(t, cs, "req_source_mismatch", 1)
			wantCounter(t, cs, "rej_sent_invalid_gid", 1)
		})
	}
}

// TestEngineStaleRuleSource: a REQ naming the CA GUID and QPN of a's live
// connection tears it down only when a sends it. From a third host it is
// refused (REJ 10 to the sender) and counted, the connection untouched;
// a sweep of 64 QPNs around the real one changes nothing either.
func TestEngineStaleRuleSource(t *testing.T) {
	third := gidN(3)
	for _, tc := range []struct {
		name  string
		from  func(a *engNode) ib.GID
		sweep int // QPNs tried around the real one (0: just the real one)
		stale bool
	}{
		{"from the connection's peer", func(a *engNode) ib.GID { return a.gid }, 0, true},
		{"from a third host", func(*engNode) ib.GID { return third }, 0, false},
		{"a sweep of 64 QPNs from a third host", func(*engNode) ib.GID { return third }, 64, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, a, b, ac, bc := establishedEngines(t)
			from := tc.from(a)
			qpns := []ib.QPN{ac.LocalQPN}
			for i := range tc.sweep {
				if q := ac.LocalQPN - ib.QPN(tc.sweep/2) + ib.QPN(i); q != ac.LocalQPN {
					qpns = append(qpns, q)
				}
			}
			var out []*wire
			for i, q := range qpns {
				out = append(out, inject(t, f, b.e, from, testREQ(from, a.guid, 0x5000+uint32(i), q), uint64(0x900+i))...)
			}
			first := out[slices.IndexFunc(out, func(w *wire) bool { return w.Attr() == AttrREJ })]
			if rej := decode[REJ](t, first); rej.Reason != RejStaleConnection || first.To != from || rej.RemoteCommID != 0x5000 {
				t.Fatalf("first REJ %v %+v, want REJ 10 to the sender", first, rej)
			}
			dreqs := 0
			for _, w := range out {
				if w.Attr() == AttrDREQ {
					dreqs++
				}
			}
			if tc.stale {
				if b.e.Stats.Stale != 1 || b.e.Stats.StaleForeign != 0 || dreqs != 1 || bc.State != StateDREQSent || b.last(EvTimeout) == nil {
					t.Errorf("stale %d foreign %d DREQs %d state %v events %v", b.e.Stats.Stale, b.e.Stats.StaleForeign, dreqs, bc.State, b.types())
				}
				return
			}
			if b.e.Stats.Stale != 0 || b.e.Stats.StaleForeign != 1 || dreqs != 0 || bc.State != StateEstablished || b.last(EvTimeout) != nil {
				t.Errorf("stale %d foreign %d DREQs %d state %v events %v", b.e.Stats.Stale, b.e.Stats.StaleForeign, dreqs, bc.State, b.types())
			}
			wantCounter(t, b.e.Counters(), "stale_foreign", 1)
			// The other QPNs were new REQs from the third host: at most
			// MaxHalfOpenPerSource of them are in setup, the rest refused.
			if n := len(qpns) - 1; n > 0 {
				inSetup := b.e.halfOpenFrom[sourceKey{gid: third}]
				if inSetup != min(n, DefaultMaxHalfOpenPerSource) || b.e.Stats.BusySource != uint64(n-inSetup) {
					t.Errorf("third host: %d in setup, %d refused as busy, of %d", inSetup, b.e.Stats.BusySource, n)
				}
			}
			f.Drain()
			if ac.State != StateEstablished || bc.State != StateEstablished {
				t.Errorf("the real connection: %v %v", ac.State, bc.State)
			}
		})
	}
}

// TestEngineForeignMADs: MADs naming the comm IDs of a live connection but
// sent from a third host change nothing and are counted as unknown by
// kind; the same REJ from the peer itself does end the connection.
func TestEngineForeignMADs(t *testing.T) {
	third := gidN(3)
	for _, tc := range []struct {
		kind     AttrID
		toActive bool // sent to a (the active side), else to b
		fromPeer bool
		msg      func(ac, bc *Comm) Message
	}{
		{AttrREJ, false, false, func(ac, bc *Comm) Message {
			return &REJ{LocalCommID: ac.LocalCommID, RemoteCommID: bc.LocalCommID, MessageRejected: MsgOther, Reason: RejConsumerReject}
		}},
		{AttrDREQ, false, false, func(ac, bc *Comm) Message {
			return &DREQ{LocalCommID: ac.LocalCommID, RemoteCommID: bc.LocalCommID, RemoteQPN: bc.LocalQPN}
		}},
		{AttrDREP, false, false, func(ac, bc *Comm) Message { return &DREP{LocalCommID: ac.LocalCommID, RemoteCommID: bc.LocalCommID} }},
		{AttrRTU, false, false, func(ac, bc *Comm) Message { return &RTU{LocalCommID: ac.LocalCommID, RemoteCommID: bc.LocalCommID} }},
		{AttrMRA, false, false, func(ac, bc *Comm) Message {
			return &MRA{LocalCommID: ac.LocalCommID, RemoteCommID: bc.LocalCommID, MessageMRAed: MsgREP, ServiceTimeout: 31}
		}},
		{AttrREP, true, false, func(ac, bc *Comm) Message {
			return &REP{LocalCommID: bc.LocalCommID, RemoteCommID: ac.LocalCommID, LocalQPN: bc.LocalQPN, LocalCAGUID: bc.RemoteGUID}
		}},
		// The control: the peer's own REJ ends the connection.
		{AttrREJ, false, true, func(ac, bc *Comm) Message {
			return &REJ{LocalCommID: ac.LocalCommID, RemoteCommID: bc.LocalCommID, MessageRejected: MsgOther, Reason: RejConsumerReject}
		}},
	} {
		name := tc.kind.String() + " from a third host"
		if tc.fromPeer {
			name = tc.kind.String() + " from the peer"
		}
		t.Run(name, func(t *testing.T) {
			f, a, b, ac, bc := establishedEngines(t)
			to, from, mine := b, third, bc
			if tc.toActive {
				to, mine = a, ac
			}
			if tc.fromPeer {
				from = a.gid
			}
			nev := len(to.events)
			inject(t, f, to.e, from, tc.msg(ac, bc), 0x77)
			if tc.fromPeer {
				if mine.State != StateTimewait || to.last(EvDisconnected) == nil {
					t.Errorf("peer's REJ: state %v events %v", mine.State, to.types())
				}
				return
			}
			if mine.State != StateEstablished || len(to.events) != nev || to.e.Stats.Unknown.Of(tc.kind) != 1 {
				t.Errorf("state %v events %v unknown %v %d", mine.State, to.types()[nev:], tc.kind, to.e.Stats.Unknown.Of(tc.kind))
			}
			f.Run(time.Minute)
			if ac.State != StateEstablished || bc.State != StateEstablished {
				t.Errorf("after a minute: %v %v", ac.State, bc.State)
			}
		})
	}
}

// TestEngineUnknownCommIDs: each kind naming no connection is counted
// under its own counter; a REP draws REJ 6 with the IDs swapped as the
// kernel's cm_issue_rej sends it, a DREQ a DREP.
func TestEngineUnknownCommIDs(t *testing.T) {
	for _, tc := range []struct {
		msg    Message
		answer AttrID // 0: none
	}{
		{&REP{LocalCommID: 11, RemoteCommID: 12, LocalQPN: 5}, AttrREJ},
		{&RTU{LocalCommID: 11, RemoteCommID: 12}, 0},
		{&REJ{LocalCommID: 11, RemoteCommID: 12, Reason: RejConsumerReject}, 0},
		{&MRA{LocalCommID: 11, RemoteCommID: 12}, 0},
		{&DREQ{LocalCommID: 11, RemoteCommID: 12, RemoteQPN: 5}, AttrDREP},
		{&DREP{LocalCommID: 11, RemoteCommID: 12}, 0},
	} {
		kind := tc.msg.AttrID()
		t.Run(kind.String(), func(t *testing.T) {
			f, a, b := pair(t)
			out := inject(t, f, b.e, a.gid, tc.msg, 0x55)
			if tc.answer == 0 && len(out) != 0 || tc.answer != 0 && (len(out) != 1 || out[0].Attr() != tc.answer || out[0].To != a.gid) {
				t.Fatalf("answered %v, want %v", out, tc.answer)
			}
			if tc.answer == AttrREJ {
				if r := decode[REJ](t, out[0]); r.Reason != RejInvalidCommID || r.LocalCommID != 12 || r.RemoteCommID != 11 {
					t.Errorf("REJ %+v", r)
				}
			}
			if b.e.Stats.Unknown.Total() != 1 {
				t.Errorf("unknown %v", b.e.Stats.Unknown)
			}
			wantCounter(t, b.e.Counters(), "unknown_"+map[AttrID]string{
				AttrREP: "rep", AttrRTU: "rtu", AttrREJ: "rej", AttrMRA: "mra", AttrDREQ: "dreq", AttrDREP: "drep",
			}[kind], 1)
		})
	}
}

// TestEngineREJSentByReason: every REJ we send is counted under its reason.
func TestEngineREJSentByReason(t *testing.T) {
	for _, tc := range []struct {
		counter string
		sender  func(a, b *engNode) *engNode // whose counter
		run     func(t *testing.T, f *fabric, a, b *engNode)
	}{
		{"rej_sent_invalid_service_id", func(a, b *engNode) *engNode { return b }, func(t *testing.T, f *fabric, a, b *engNode) {
			a.e.Connect(f.Now, ConnectParams{RemoteGID: b.gid, ServiceID: testService + 1, LocalQPN: 3, PathMTU: ib.MTU2048})
			f.Drain()
		}},
		{"rej_sent_consumer", func(a, b *engNode) *engNode { return b }, func(t *testing.T, f *fabric, a, b *engNode) {
			b.noAccept = true
			a.connect(b)
			f.Drain()
			b.e.Reject(onlyComm(t, b.e), RejConsumerReject, nil)
			f.Drain()
		}},
		{"rej_sent_timeout", func(a, b *engNode) *engNode { return a }, func(t *testing.T, f *fabric, a, b *engNode) {
			f.DropAll[AttrREQ] = true
			a.connect(b)
			f.Run(time.Hour)
		}},
		{"rej_sent_stale_conn", func(a, b *engNode) *engNode { return b }, func(t *testing.T, f *fabric, a, b *engNode) {
			ac := a.connect(b)
			f.Drain()
			inject(t, f, b.e, a.gid, testREQ(a.gid, a.guid, 0x999, ac.LocalQPN), 1)
		}},
		{"rej_sent_no_resources", func(a, b *engNode) *engNode { return b }, func(t *testing.T, f *fabric, a, b *engNode) {
			b.noAccept = true
			for i := range DefaultMaxHalfOpenPerSource + 1 {
				inject(t, f, b.e, a.gid, testREQ(a.gid, a.guid, 0x100+uint32(i), 0x200+ib.QPN(i)), 1)
			}
		}},
	} {
		t.Run(tc.counter, func(t *testing.T) {
			f, a, b := pair(t)
			tc.run(t, f, a, b)
			cs := tc.sender(a, b).e.Counters()
			wantCounter(t, cs, tc.counter, 1)
			var rejs uint64
			for _, c := range cs {
				if len(c.Name) > 9 && c.Name[:9] == "rej_sent_" {
					rejs += c.Value
				}
			}
			if rejs != 1 {
				t.Errorf("REJ counters %v, want only %s", cs, tc.counter)
			}
		})
	}
}

// TestEngineHalfOpenLimits: a REQ flood from one source takes only that
// source's share of the half-open slots, and connections in setup never
// use up MaxConns, so a real peer still connects.
func TestEngineHalfOpenLimits(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		maxConns, sources    int
		reqsPerSource        int
		wantBusy             uint64
		wantPeerEstablished  int // of 3 attempts by the real peer
		wantPeerRejectedLast bool
		noGRH                bool // MADs without a source GID: peers told apart by their claims
	}{
		{"1000 REQs from one source", 0, 1, 1000, 1000 - DefaultMaxHalfOpenPerSource, 3, false, false},
		{"MaxConns 2 with 20 half-open fakes", 2, 20, 1, 0, 2, true, false},
		{"no GRH: 17 REQs from each of 12 claimed GIDs", 0, 12, DefaultMaxHalfOpenPerSource + 1, 12, 3, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFabric(t)
			cfg := testEngineConfig()
			cfg.MaxConns = tc.maxConns
			b := newEngNode(f, 2, cfg) // accepts every REQ; the fakes never send an RTU
			for s := range tc.sources {
				src := gidN(1000 + s)
				from := src
				if tc.noGRH {
					from = ib.GID{}
				}
				for i := range tc.reqsPerSource {
					inject(t, f, b.e, from, testREQ(src, uint64(1000+s), uint32(i+1), ib.QPN(0x100+i)), 1)
				}
			}
			f.Pending = nil // the REPs to the fakes go nowhere
			if b.e.Stats.BusySource != tc.wantBusy {
				t.Errorf("busy-source refusals %d, want %d", b.e.Stats.BusySource, tc.wantBusy)
			}
			a := newEngNode(f, 1, testEngineConfig())
			var est int
			for range 3 {
				c := a.connect(b)
				f.Drain()
				if c.State == StateEstablished {
					est++
				}
			}
			if est != tc.wantPeerEstablished {
				t.Errorf("real peer established %d of 3", est)
			}
			if e := a.last(EvRejected); tc.wantPeerRejectedLast != (e != nil && e.Reason == RejNoResources) {
				t.Errorf("real peer events %v", a.types())
			}
			if b.e.Conns() > max(tc.maxConns, 4096)+256 {
				t.Errorf("%d connections", b.e.Conns())
			}
		})
	}
}

// TestEngineREJTimeout: our REJ 4 carries our CA GUID in its ARI, and an
// incoming REJ 4 is found by (that GUID, its Local Comm ID) as the kernel's
// cm_acquire_rejected_id does; without the GUID, or with another, it names
// nothing.
func TestEngineREJTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(r *REJ)
		matched bool
	}{
		{"as sent (GUID in the ARI)", func(*REJ) {}, true},
		{"without the ARI", func(r *REJ) { r.RejectInfoLength, r.ARI = 0, [InfoLen]byte{} }, false},
		{"another CA's GUID", func(r *REJ) { r.ARI[7] ^= 1 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, a, b := pair(t)
			b.noAccept = true
			ac := a.connect(b)
			f.Drain()
			bc := onlyComm(t, b.e)
			a.e.Disconnect(f.Now, ac) // the active side gives up before a REP
			w := onlyWire(t, f.Pending, AttrREJ)
			f.Pending = nil
			r := decode[REJ](t, w)
			if r.Reason != RejTimeout || r.RejectInfoLength != 8 || binary.BigEndian.Uint64(r.ARI[:8]) != a.guid ||
				r.LocalCommID != ac.LocalCommID || r.RemoteCommID != 0 || r.MessageRejected != MsgOther {
				t.Fatalf("REJ 4 sent: %+v", r)
			}
			tc.mutate(r)
			inject(t, f, b.e, a.gid, r, w.TID())
			if tc.matched {
				if e := b.last(EvRejected); e == nil || e.Reason != RejTimeout || bc.State != StateIdle || b.e.Conns() != 0 {
					t.Errorf("passive: events %v state %v", b.types(), bc.State)
				}
				return
			}
			if bc.State != StateREQRcvd || b.e.Stats.Unknown.Of(AttrREJ) != 1 {
				t.Errorf("passive: state %v unknown REJs %d", bc.State, b.e.Stats.Unknown.Of(AttrREJ))
			}
		})
	}
}

// TestEngineDuplicateREQ: a REQ seen again is answered by the state of its
// connection: an MRA while the consumer decides, the REP again once sent,
// and REJ 10 (stale) in timewait, as the kernel's cm_dup_req_handler.
func TestEngineDuplicateREQ(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(f *fabric, a, b *engNode, ac *Comm)
		state  State
		answer AttrID
	}{
		{"consumer deciding", func(f *fabric, a, b *engNode, ac *Comm) {}, StateREQRcvd, AttrMRA},
		{"REP sent", func(f *fabric, a, b *engNode, ac *Comm) {
			b.e.Accept(f.Now, onlyComm(f.TB, b.e), AcceptParams{LocalQPN: 9})
			f.Pending = nil
		}, StateREPSent, AttrREP},
		{"timewait", func(f *fabric, a, b *engNode, ac *Comm) {
			b.e.Accept(f.Now, onlyComm(f.TB, b.e), AcceptParams{LocalQPN: 9})
			f.Drain()
			a.e.Disconnect(f.Now, ac)
			f.Drain()
		}, StateTimewait, AttrREJ},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, a, b := pair(t)
			b.noAccept = true
			ac := a.connect(b)
			reqWire := f.Take(func(w *wire) bool { return w.Attr() == AttrREQ })
			f.Deliver(reqWire)
			tc.setup(f, a, b, ac)
			bc := onlyComm(t, b.e)
			if bc.State != tc.state {
				t.Fatalf("setup: %v, want %v", bc.State, tc.state)
			}
			nlog := len(f.Log)
			f.Deliver(reqWire)
			out := f.Log[nlog:]
			w := onlyWire(t, out, tc.answer)
			if len(out) != 1 || w.To != a.gid || b.e.Stats.Duplicate != 1 || bc.State != tc.state {
				t.Fatalf("answered %v, duplicates %d, state %v", out, b.e.Stats.Duplicate, bc.State)
			}
			if tc.answer == AttrREJ {
				r := decode[REJ](t, w)
				if r.Reason != RejStaleConnection || r.MessageRejected != MsgOther || r.RemoteCommID != ac.LocalCommID || r.LocalCommID != bc.LocalCommID || w.TID() != reqWire.TID() {
					t.Errorf("REJ %+v", r)
				}
				wantCounter(t, b.e.Counters(), "rej_sent_stale_conn", 1)
			}
		})
	}
}

// TestEngineCMTimers: our REQs ask for the kernel ipoib's timers and we
// honour them: a REQ is sent 1 + MaxCMRetries times a response timeout
// apart. The passive side times its REP by the REQ's Local CM Response
// Timeout and Max CM Retries, never longer than its own.
func TestEngineCMTimers(t *testing.T) {
	t.Run("REQ", func(t *testing.T) {
		for _, tc := range []struct {
			name             string
			code, retries    uint8 // configured (0: defaults)
			wantCode, wantRe uint8
		}{
			{"defaults", 0, 0, 20, 15},
			{"configured", 16, 3, 16, 3},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := newFabric(t)
				cfg := EngineConfig{ResponseTimeout: tc.code, MaxRetries: tc.retries, PKey: ib.DefaultPKey}
				a := newEngNode(f, 1, cfg)
				newEngNode(f, 2, cfg)
				f.DropAll[AttrREQ] = true
				a.connect(&engNode{gid: gidN(2)})
				f.Run(10 * time.Minute)
				reqs := f.Sent(a.gid, AttrREQ, true)
				r := decode[REQ](t, reqs[0])
				if r.RemoteCMResponseTimeout != tc.wantCode || r.LocalCMResponseTimeout != tc.wantCode || r.MaxCMRetries != tc.wantRe {
					t.Errorf("REQ timers %d/%d retries %d", r.RemoteCMResponseTimeout, r.LocalCMResponseTimeout, r.MaxCMRetries)
				}
				want := t0.Add(time.Duration(tc.wantRe+1) * TimeoutDuration(tc.wantCode))
				if e := a.last(EvTimeout); len(reqs) != int(tc.wantRe)+1 || e == nil || !e.At.Equal(want) {
					t.Errorf("%d REQs, timeout event %+v, want %d and at %v", len(reqs), e, tc.wantRe+1, want.Sub(t0))
				}
			})
		}
	})
	t.Run("REP", func(t *testing.T) {
		for _, tc := range []struct {
			name                 string
			reqCode, reqRetries  uint8 // what the active side asks for
			ourCode, ourRetries  uint8
			wantCode, wantTrials uint8
		}{
			{"the REQ's, shorter than ours", 18, 2, 20, 15, 18, 3},
			{"ours, shorter than the REQ's", 31, 15, 16, 3, 16, 4},
			{"a floor for a REQ asking for microseconds", 0, 1, 20, 15, minREPTimeout, 2},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := newFabric(t)
				b := newEngNode(f, 2, EngineConfig{ResponseTimeout: tc.ourCode, MaxRetries: tc.ourRetries, PKey: ib.DefaultPKey})
				f.DropAll[AttrREP] = true
				req := testREQ(gidN(1), 1, 0x31, 0x41)
				req.LocalCMResponseTimeout, req.MaxCMRetries = tc.reqCode, tc.reqRetries
				inject(t, f, b.e, gidN(1), req, 1)
				f.Run(time.Hour)
				want := t0.Add(time.Duration(tc.wantTrials) * TimeoutDuration(tc.wantCode))
				if e := b.last(EvTimeout); len(f.Sent(b.gid, AttrREP, true)) != int(tc.wantTrials) || e == nil || !e.At.Equal(want) {
					t.Errorf("%d REPs, timeout %+v; want %d, at %v", len(f.Sent(b.gid, AttrREP, true)), e, tc.wantTrials, want.Sub(t0))
				}
				// Giving up, the passive side sends REJ 4 with its GUID.
				rej := decode[REJ](t, onlyWire(t, f.Sent(b.gid, AttrREJ, true), AttrREJ))
				if rej.Reason != RejTimeout || rej.RejectInfoLength != 8 || binary.BigEndian.Uint64(rej.ARI[:8]) != b.guid || rej.RemoteCommID != 0x31 {
					t.Errorf("REJ %+v", rej)
				}
			})
		}
	})
}

// TestEngineREQPath: the primary path of our REQs is filled as the
// kernel's cm_format_req fills it: Subnet Local when the hop limit is at
// most 1, and the permissive LIDs on a routed (RoCEv2, softib) path.
func TestEngineREQPath(t *testing.T) {
	for _, tc := range []struct {
		hopLimit, want uint8
		subnetLocal    bool
	}{
		{0, DefaultHopLimit, false},
		{1, 1, true},
		{2, 2, false},
	} {
		f := newFabric(t)
		cfg := testEngineConfig()
		cfg.HopLimit = tc.hopLimit
		a := newEngNode(f, 1, cfg)
		b := newEngNode(f, 2, testEngineConfig())
		a.connect(b)
		r := decode[REQ](t, f.Sent(a.gid, AttrREQ, false)[0])
		p := r.Primary
		if p.HopLimit != tc.want || p.SubnetLocal != tc.subnetLocal || p.LocalLID != 0xffff || p.RemoteLID != 0xffff ||
			p.LocalGID != a.gid || p.RemoteGID != b.gid || r.Alternate != (Path{}) {
			t.Errorf("hop limit %d: primary path %+v", tc.hopLimit, p)
		}
		// The receiver takes it (its source check passes) and connects.
		f.Drain()
		if b.e.Stats.SourceMismatch != 0 || onlyComm(t, b.e).State != StateEstablished {
			t.Errorf("hop limit %d: not accepted", tc.hopLimit)
		}
	}
}
