package cm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm/cmtest"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/mad"
)

// ---------------------------------------------------------------------------
// Deterministic harness: package cmtest's fake clock and in-memory lossy
// fabric, over this package's attribute IDs.
//
// Engines are attached by GID. Their Send callbacks enqueue MADs; the test
// decides what is delivered, dropped, duplicated or reordered. Run
// delivers pending MADs and calls Expire at the Next() deadlines, advancing
// the fake clock. No goroutines, no sleeps, no real time.
// ---------------------------------------------------------------------------

type (
	fabric = cmtest.Fabric[AttrID]
	wire   = cmtest.Wire[AttrID]
)

var (
	t0          = cmtest.T0
	gidN        = cmtest.GIDN
	newFabric   = cmtest.NewFabric[AttrID]
	inject      = cmtest.Inject[AttrID]
	onlyWire    = cmtest.OnlyWire[AttrID]
	wantCounter = cmtest.WantCounter
)

// decode decodes a logged MAD, failing the test if it does not decode.
func decode[T any](tb testing.TB, w *wire) *T {
	tb.Helper()
	return cmtest.Decode[T](tb, w, DecodeMAD)
}

// ---------------------------------------------------------------------------
// Engine test node: an engine plus a scripted consumer.
// ---------------------------------------------------------------------------

const testService = 0x1000000000abcdef

type evRec struct {
	Type   EventType
	Comm   *Comm
	State  State // the connection's state when reported
	Reason RejectReason
	At     time.Time
}

type engNode struct {
	f        *fabric
	e        *Engine
	gid      ib.GID
	guid     uint64
	events   []evRec
	noAccept bool // leave REQs unanswered (slow consumer)
	noReady  bool // leave REPs unanswered
	nextQPN  ib.QPN
}

// testEngineConfig: 268 ms response timeout, 3 retries.
func testEngineConfig() EngineConfig {
	return EngineConfig{ResponseTimeout: 16, MaxRetries: 3, PKey: ib.DefaultPKey}
}

func newEngNode(f *fabric, i int, cfg EngineConfig) *engNode {
	n := &engNode{f: f, gid: gidN(i), guid: 0x0002c90300000000 | uint64(i), nextQPN: ib.QPN(0x10000 * i)}
	cfg.GID, cfg.GUID = n.gid, n.guid
	cfg.Send = f.Sender(n.gid)
	cfg.Event = n.event
	n.e = NewEngine(cfg)
	n.e.Listen(testService)
	f.Add(n.gid, n.e)
	return n
}

func (n *engNode) event(ev Event) {
	r := evRec{Type: ev.Type, Comm: ev.Comm, State: ev.Comm.State, At: n.f.Now}
	if ev.REJ != nil {
		r.Reason = ev.REJ.Reason
	}
	n.events = append(n.events, r)
	switch ev.Type {
	case EvRequest:
		if ev.REQ == nil {
			n.f.TB.Errorf("EvRequest without its REQ")
		}
		if !n.noAccept {
			n.accept(ev.Comm)
		}
	case EvReply:
		if ev.REP == nil {
			n.f.TB.Errorf("EvReply without its REP")
		}
		if !n.noReady {
			if err := n.e.Ready(ev.Comm); err != nil {
				n.f.TB.Errorf("Ready: %v", err)
			}
		}
	case EvRejected:
		if ev.REJ == nil {
			n.f.TB.Errorf("EvRejected without its REJ")
		}
	}
}

const (
	testActivePSN  = 0x654321 // the active side's receive PSN
	testPassivePSN = 0x123456 // the passive side's receive PSN
)

func (n *engNode) accept(c *Comm) {
	n.nextQPN++
	if err := n.e.Accept(n.f.Now, c, AcceptParams{LocalQPN: n.nextQPN, RecvPSN: testPassivePSN, RNRRetry: 7, PrivateData: []byte("rep-private")}); err != nil {
		n.f.TB.Errorf("Accept: %v", err)
	}
}

func (n *engNode) connect(to *engNode) *Comm {
	n.f.TB.Helper()
	n.nextQPN++
	c, err := n.e.Connect(n.f.Now, ConnectParams{
		RemoteGID: to.gid, ServiceID: testService, LocalQPN: n.nextQPN, Transport: TransportRC,
		RecvPSN: testActivePSN, PathMTU: ib.MTU4096, RetryCount: 6, RNRRetry: 5, ACKTimeout: 14,
		PrivateData: []byte("req-private"),
	})
	if err != nil {
		n.f.TB.Fatalf("Connect: %v", err)
	}
	return c
}

func (n *engNode) types() []EventType {
	var ts []EventType
	for _, r := range n.events {
		ts = append(ts, r.Type)
	}
	return ts
}

func (n *engNode) last(t EventType) *evRec {
	for i := len(n.events) - 1; i >= 0; i-- {
		if n.events[i].Type == t {
			return &n.events[i]
		}
	}
	return nil
}

// onlyComm returns the engine's single connection (nil if none, fails if
// several).
func onlyComm(tb testing.TB, e *Engine) *Comm {
	tb.Helper()
	if len(e.byLocal) > 1 {
		tb.Fatalf("engine has %d connections, want at most 1", len(e.byLocal))
	}
	for _, c := range e.byLocal {
		return c
	}
	return nil
}

func pair(tb testing.TB) (*fabric, *engNode, *engNode) {
	f := newFabric(tb)
	a := newEngNode(f, 1, testEngineConfig())
	b := newEngNode(f, 2, testEngineConfig())
	return f, a, b
}

// ---------------------------------------------------------------------------
// Engine scenarios.
// ---------------------------------------------------------------------------

func TestEngineSetupAndTeardown(t *testing.T) {
	f, a, b := pair(t)
	ac := a.connect(b)
	if ac.State != StateREQSent || !ac.Active {
		t.Fatalf("after Connect: state %v active %v", ac.State, ac.Active)
	}
	f.Drain()
	bc := onlyComm(t, b.e)
	if ac.State != StateEstablished || bc == nil || bc.State != StateEstablished {
		t.Fatalf("after setup: active %v, passive %v", ac.State, bc)
	}
	if got, want := a.types(), []EventType{EvReply}; !slices.Equal(got, want) {
		t.Errorf("active events %v, want %v", got, want)
	}
	if got, want := b.types(), []EventType{EvRequest, EvEstablished}; !slices.Equal(got, want) {
		t.Errorf("passive events %v, want %v", got, want)
	}

	// The three messages, decoded.
	reqs, reps, rtus := f.Sent(a.gid, AttrREQ, true), f.Sent(b.gid, AttrREP, true), f.Sent(a.gid, AttrRTU, true)
	if len(reqs) != 1 || len(reps) != 1 || len(rtus) != 1 || len(f.Log) != 3 {
		t.Fatalf("sent %v, want one REQ, REP and RTU", f.Log)
	}
	req, rep, rtu := decode[REQ](t, reqs[0]), decode[REP](t, reps[0]), decode[RTU](t, rtus[0])
	if req.LocalCommID != ac.LocalCommID || req.ServiceID != testService || req.LocalCAGUID != a.guid ||
		req.LocalQPN != ac.LocalQPN || req.StartingPSN != testActivePSN || req.PathMTU != ib.MTU4096 ||
		req.TransportType != TransportRC || req.RetryCount != 6 || req.RNRRetryCount != 5 ||
		req.MaxCMRetries != 3 || req.RemoteCMResponseTimeout != 16 || req.LocalCMResponseTimeout != 16 ||
		req.PKey != ib.DefaultPKey || req.Primary.LocalGID != a.gid || req.Primary.RemoteGID != b.gid ||
		req.Primary.LocalACKTimeout != 14 || !bytes.HasPrefix(req.PrivateData[:], []byte("req-private")) {
		t.Errorf("REQ %+v", req)
	}
	if rep.LocalCommID != bc.LocalCommID || rep.RemoteCommID != ac.LocalCommID || rep.LocalQPN != bc.LocalQPN ||
		rep.StartingPSN != testPassivePSN || rep.RNRRetryCount != 7 || rep.LocalCAGUID != b.guid ||
		!bytes.HasPrefix(rep.PrivateData[:], []byte("rep-private")) {
		t.Errorf("REP %+v", rep)
	}
	if rtu.LocalCommID != ac.LocalCommID || rtu.RemoteCommID != bc.LocalCommID {
		t.Errorf("RTU %+v", rtu)
	}
	// REP and RTU echo the REQ's transaction ID.
	if reps[0].TID() != reqs[0].TID() || rtus[0].TID() != reqs[0].TID() {
		t.Errorf("TIDs REQ %#x REP %#x RTU %#x", reqs[0].TID(), reps[0].TID(), rtus[0].TID())
	}
	// Both sides agree on the connection (PSNs crosswise, IBA semantics).
	if ac.RemoteQPN != bc.LocalQPN || bc.RemoteQPN != ac.LocalQPN || ac.RemoteCommID != bc.LocalCommID ||
		bc.RemoteCommID != ac.LocalCommID || ac.SendPSN != testPassivePSN || bc.SendPSN != testActivePSN ||
		ac.RecvPSN != testActivePSN || bc.RecvPSN != testPassivePSN || bc.RemoteGUID != a.guid ||
		ac.RemoteGUID != b.guid || bc.RemoteGID != a.gid || bc.RNRRetry != 5 || ac.RNRRetry != 7 || bc.PathMTU != ib.MTU4096 {
		t.Errorf("connections disagree:\nactive  %+v\npassive %+v", ac, bc)
	}
	if a.e.halfOpen != 0 || b.e.halfOpen != 0 {
		t.Errorf("half-open counts %d %d after setup", a.e.halfOpen, b.e.halfOpen)
	}

	// Teardown from the passive side.
	f.Now = f.Now.Add(time.Second)
	b.e.Disconnect(f.Now, bc)
	if bc.State != StateDREQSent {
		t.Fatalf("after Disconnect: %v", bc.State)
	}
	start := f.Now
	f.Run(time.Minute)
	dreqs, dreps := f.Sent(b.gid, AttrDREQ, true), f.Sent(a.gid, AttrDREP, true)
	if len(dreqs) != 1 || len(dreps) != 1 {
		t.Fatalf("DREQs %d DREPs %d, want 1 each", len(dreqs), len(dreps))
	}
	dreq, drep := decode[DREQ](t, dreqs[0]), decode[DREP](t, dreps[0])
	if dreq.LocalCommID != bc.LocalCommID || dreq.RemoteCommID != ac.LocalCommID || dreq.RemoteQPN != ac.LocalQPN {
		t.Errorf("DREQ %+v", dreq)
	}
	if drep.LocalCommID != ac.LocalCommID || drep.RemoteCommID != bc.LocalCommID || dreps[0].TID() != dreqs[0].TID() {
		t.Errorf("DREP %+v tid %#x, DREQ tid %#x", drep, dreps[0].TID(), dreqs[0].TID())
	}
	if got, want := a.types(), []EventType{EvReply, EvDisconnected, EvTimewaitDone}; !slices.Equal(got, want) {
		t.Errorf("active events %v, want %v", got, want)
	}
	if got, want := b.types(), []EventType{EvRequest, EvEstablished, EvDisconnected, EvTimewaitDone}; !slices.Equal(got, want) {
		t.Errorf("passive events %v, want %v", got, want)
	}
	tw := 2 * TimeoutDuration(16)
	for _, n := range []*engNode{a, b} {
		d, done := n.last(EvDisconnected), n.last(EvTimewaitDone)
		if d.State != StateTimewait || d.At != start || done.At.Sub(d.At) != tw || done.State != StateIdle {
			t.Errorf("%v: disconnected %v at %v, timewait done %v at +%v; want timewait, +%v", n.gid, d.State, d.At, done.State, done.At.Sub(d.At), tw)
		}
		if n.e.Conns() != 0 || len(n.e.byRemote) != 0 || len(n.e.byQP) != 0 || !n.e.Next().IsZero() {
			t.Errorf("%v: %d conns, %d by remote, %d by QP, next %v after timewait", n.gid, n.e.Conns(), len(n.e.byRemote), len(n.e.byQP), n.e.Next())
		}
		if n.e.Stats.Malformed+n.e.Stats.Unknown.Total()+n.e.Stats.Duplicate+n.e.Stats.Retransmitted+n.e.Stats.Rejected != 0 {
			t.Errorf("%v: stats %+v on a clean exchange", n.gid, n.e.Stats)
		}
	}
}

// TestEngineLoss drops each message type once, twice and on every send
// (past the retry budget of 3), in FIFO and LIFO delivery order.
func TestEngineLoss(t *testing.T) {
	const all = -1
	ev := func(ts ...EventType) []EventType { return ts }
	type want struct {
		a, b       []EventType // events after the scenario
		connsA     int         // after everything settled
		connsB     int
		retransA   uint64 // exact Stats.Retransmitted
		retransB   uint64
		sentOfAttr int // how many MADs of attr were sent in all
		// sentLIFO, when not 0, is sentOfAttr in LIFO order: a
		// retransmission may then arrive after the exchange it repeats
		// has finished.
		sentLIFO     int
		bEstablished bool
	}
	cases := []struct {
		attr     AttrID
		drops    int
		teardown bool // the loss is in the teardown (A disconnects)
		want     want
	}{
		{AttrREQ, 1, false, want{a: ev(EvReply), b: ev(EvRequest, EvEstablished), connsA: 1, connsB: 1, retransA: 1, sentOfAttr: 2, bEstablished: true}},
		{AttrREQ, 2, false, want{a: ev(EvReply), b: ev(EvRequest, EvEstablished), connsA: 1, connsB: 1, retransA: 2, sentOfAttr: 3, bEstablished: true}},
		{AttrREQ, all, false, want{a: ev(EvTimeout), b: nil, retransA: 3, sentOfAttr: 4}},
		// A lost REP: the passive side resends it, and the active side's
		// REQ retransmission draws it again, unless (LIFO) it arrives
		// once the connection is established: the kernel's CM answers
		// such a REQ with nothing, and so do we.
		{AttrREP, 1, false, want{a: ev(EvReply), b: ev(EvRequest, EvEstablished), connsA: 1, connsB: 1, retransA: 1, retransB: 1, sentOfAttr: 3, sentLIFO: 2, bEstablished: true}},
		{AttrREP, 2, false, want{a: ev(EvReply), b: ev(EvRequest, EvEstablished), connsA: 1, connsB: 1, retransA: 1, retransB: 1, sentOfAttr: 3, bEstablished: true}},
		{AttrREP, all, false, want{a: ev(EvTimeout), b: ev(EvRequest, EvTimeout), retransA: 3, retransB: 3, sentOfAttr: 7}},
		// A lost RTU: the passive side resends the REP, the active side
		// answers with its RTU again.
		{AttrRTU, 1, false, want{a: ev(EvReply), b: ev(EvRequest, EvEstablished), connsA: 1, connsB: 1, retransB: 1, sentOfAttr: 2, bEstablished: true}},
		{AttrRTU, 2, false, want{a: ev(EvReply), b: ev(EvRequest, EvEstablished), connsA: 1, connsB: 1, retransB: 2, sentOfAttr: 3, bEstablished: true}},
		// Every RTU lost: the passive side gives up with REJ (Timeout); the
		// active side must not keep a connection its peer has forgotten.
		{AttrRTU, all, false, want{a: ev(EvReply, EvDisconnected, EvTimewaitDone), b: ev(EvRequest, EvTimeout), retransB: 3, sentOfAttr: 4}},
		{AttrDREQ, 1, true, want{a: ev(EvReply, EvDisconnected, EvTimewaitDone), b: ev(EvRequest, EvEstablished, EvDisconnected, EvTimewaitDone), retransA: 1, sentOfAttr: 2}},
		{AttrDREQ, 2, true, want{a: ev(EvReply, EvDisconnected, EvTimewaitDone), b: ev(EvRequest, EvEstablished, EvDisconnected, EvTimewaitDone), retransA: 2, sentOfAttr: 3}},
		// Every DREQ lost: the active side gives up into timewait; the
		// passive side never hears of it and stays established (the IPoIB
		// manager's idle and send-failure rules close it).
		{AttrDREQ, all, true, want{a: ev(EvReply, EvDisconnected, EvTimewaitDone), b: ev(EvRequest, EvEstablished), connsB: 1, retransA: 3, sentOfAttr: 4, bEstablished: true}},
		{AttrDREP, 1, true, want{a: ev(EvReply, EvDisconnected, EvTimewaitDone), b: ev(EvRequest, EvEstablished, EvDisconnected, EvTimewaitDone), retransA: 1, sentOfAttr: 2}},
		{AttrDREP, 2, true, want{a: ev(EvReply, EvDisconnected, EvTimewaitDone), b: ev(EvRequest, EvEstablished, EvDisconnected, EvTimewaitDone), retransA: 2, sentOfAttr: 3}},
		{AttrDREP, all, true, want{a: ev(EvReply, EvDisconnected, EvTimewaitDone), b: ev(EvRequest, EvEstablished, EvDisconnected, EvTimewaitDone), retransA: 3, sentOfAttr: 4}},
	}
	for _, lifo := range []bool{false, true} {
		for _, tc := range cases {
			name := fmt.Sprintf("%v/lost-%d/lifo=%v", tc.attr, tc.drops, lifo)
			if tc.drops == all {
				name = fmt.Sprintf("%v/lost-all/lifo=%v", tc.attr, lifo)
			}
			t.Run(name, func(t *testing.T) {
				f, a, b := pair(t)
				f.LIFO = lifo
				if tc.drops == all {
					f.DropAll[tc.attr] = true
				} else {
					for i := 1; i <= tc.drops; i++ {
						f.DropNth(tc.attr, i)
					}
				}
				ac := a.connect(b)
				f.Run(time.Minute)
				if tc.teardown {
					if ac.State != StateEstablished {
						t.Fatalf("setup failed: %v", ac.State)
					}
					a.e.Disconnect(f.Now, ac)
					f.Run(time.Minute)
				}
				w := tc.want
				if got := a.types(); !slices.Equal(got, w.a) {
					t.Errorf("active events %v, want %v", got, w.a)
				}
				if got := b.types(); !slices.Equal(got, w.b) {
					t.Errorf("passive events %v, want %v", got, w.b)
				}
				if a.e.Conns() != w.connsA || b.e.Conns() != w.connsB {
					t.Errorf("conns active %d passive %d, want %d %d", a.e.Conns(), b.e.Conns(), w.connsA, w.connsB)
				}
				if w.connsA == 1 && ac.State != StateEstablished {
					t.Errorf("active state %v", ac.State)
				}
				if bc := onlyComm(t, b.e); w.bEstablished != (bc != nil && bc.State == StateEstablished) {
					t.Errorf("passive connection %+v, want established %v", bc, w.bEstablished)
				}
				if a.e.Stats.Retransmitted != w.retransA || b.e.Stats.Retransmitted != w.retransB {
					t.Errorf("retransmitted active %d passive %d, want %d %d", a.e.Stats.Retransmitted, b.e.Stats.Retransmitted, w.retransA, w.retransB)
				}
				sent := w.sentOfAttr
				if lifo && w.sentLIFO != 0 {
					sent = w.sentLIFO
				}
				if got := f.Count[tc.attr]; got != sent {
					t.Errorf("%d %v sent, want %d", got, tc.attr, sent)
				}
				if a.e.halfOpen != 0 || b.e.halfOpen != 0 {
					t.Errorf("half-open %d %d", a.e.halfOpen, b.e.halfOpen)
				}
				for _, n := range []*engNode{a, b} {
					if n.e.Stats.Malformed != 0 || n.e.Stats.SendErrors != 0 {
						t.Errorf("%v: stats %+v", n.gid, n.e.Stats)
					}
				}
				// Whatever survived of each exchange decodes and names the
				// right connection.
				for _, x := range f.Sent(ib.GID{}, AttrRTU, true) {
					if r := decode[RTU](t, x); r.LocalCommID != ac.LocalCommID {
						t.Errorf("RTU %+v from another connection", r)
					}
				}
			})
		}
	}
}

// TestEngineREJAfterEstablished: a REJ naming an established connection
// (IBA: ESTABLISHED + REJ -> TIMEWAIT) ends it, and a REJ for a
// connection in timewait or a foreign one changes nothing.
func TestEngineREJAfterEstablished(t *testing.T) {
	f, a, b := pair(t)
	ac := a.connect(b)
	f.Drain()
	bc := onlyComm(t, b.e)
	inject := func(to *engNode, from ib.GID, rej REJ) {
		var m ib.MAD
		if err := rej.MarshalMAD(m.Data[:], 77); err != nil {
			t.Fatal(err)
		}
		m.From = ib.MADAddr{GID: from, QPN: ib.QP1}
		to.e.HandleMAD(f.Now, &m)
	}
	// Wrong peer comm ID: ignored.
	inject(a, b.gid, REJ{LocalCommID: bc.LocalCommID + 1, RemoteCommID: ac.LocalCommID, MessageRejected: MsgOther, Reason: RejTimeout})
	if ac.State != StateEstablished {
		t.Fatalf("REJ with a foreign comm ID moved the connection to %v", ac.State)
	}
	inject(a, b.gid, REJ{LocalCommID: bc.LocalCommID, RemoteCommID: ac.LocalCommID, MessageRejected: MsgOther, Reason: RejTimeout})
	if ac.State != StateTimewait {
		t.Fatalf("after REJ: %v, want timewait", ac.State)
	}
	if r := a.last(EvDisconnected); r == nil || r.Reason != RejTimeout {
		t.Fatalf("events %v, want disconnected with the REJ", a.types())
	}
	if len(a.e.byQP) != 0 {
		t.Errorf("timewait connection still in the stale table")
	}
	n := len(a.events)
	inject(a, b.gid, REJ{LocalCommID: bc.LocalCommID, RemoteCommID: ac.LocalCommID, MessageRejected: MsgOther, Reason: RejTimeout})
	if len(a.events) != n || a.e.Stats.Duplicate != 1 {
		t.Errorf("second REJ: events %v, duplicates %d", a.types(), a.e.Stats.Duplicate)
	}
	f.Run(time.Minute)
	if a.e.Conns() != 0 || a.last(EvTimewaitDone) == nil {
		t.Errorf("after timewait: %d conns, events %v", a.e.Conns(), a.types())
	}
}

func TestEngineDuplicates(t *testing.T) {
	t.Run("REQ before the consumer answers draws an MRA", func(t *testing.T) {
		f, a, b := pair(t)
		b.noAccept = true
		ac := a.connect(b)
		f.Drain()
		bc := onlyComm(t, b.e)
		if bc == nil || bc.State != StateREQRcvd {
			t.Fatalf("passive %+v", bc)
		}
		// The REQ is retransmitted after the response timeout.
		f.Now = a.e.Next()
		a.e.Expire(f.Now)
		f.Drain()
		mras := f.Sent(b.gid, AttrMRA, false)
		if len(mras) != 1 || b.e.Stats.Duplicate != 1 {
			t.Fatalf("MRAs %d duplicates %d, want 1 1", len(mras), b.e.Stats.Duplicate)
		}
		mra := decode[MRA](t, mras[0])
		if mra.MessageMRAed != MsgREQ || mra.RemoteCommID != ac.LocalCommID || mra.LocalCommID != bc.LocalCommID || mra.ServiceTimeout != 16 {
			t.Errorf("MRA %+v", mra)
		}
		if mras[0].TID() != f.Sent(a.gid, AttrREQ, false)[0].TID() {
			t.Errorf("MRA TID differs from the REQ's")
		}
		// The MRA pushed the active side's timer out by the service
		// timeout plus its own response timeout.
		if got, want := a.e.Next(), f.Now.Add(2*TimeoutDuration(16)); !got.Equal(want) {
			t.Errorf("active timer %v after MRA, want %v", got.Sub(f.Now), want.Sub(f.Now))
		}
		if len(b.events) != 1 {
			t.Errorf("duplicate REQ reported again: %v", b.types())
		}
		// The consumer answers at last.
		b.accept(bc)
		f.Run(time.Minute)
		if ac.State != StateEstablished || bc.State != StateEstablished {
			t.Errorf("states %v %v", ac.State, bc.State)
		}
	})
	t.Run("REQ after REP gets the same REP", func(t *testing.T) {
		f, a, b := pair(t)
		f.DropNth(AttrREP, 1)
		a.connect(b)
		f.Drain()
		// Duplicate the REQ by hand, before any timer fires.
		req := f.Sent(a.gid, AttrREQ, false)[0]
		f.Deliver(req)
		f.Deliver(req)
		reps := f.Sent(b.gid, AttrREP, true)
		if len(reps) != 3 {
			t.Fatalf("%d REPs, want 3", len(reps))
		}
		for _, r := range reps[1:] {
			if r.Data != reps[0].Data {
				t.Errorf("resent REP differs from the first")
			}
		}
		if b.e.Stats.Duplicate != 2 || len(b.events) != 1 {
			t.Errorf("duplicates %d events %v", b.e.Stats.Duplicate, b.types())
		}
		f.Run(time.Minute)
		// The second REP established the connection, the third drew the
		// RTU again (duplicate REP), and the second RTU is a duplicate.
		if got := len(f.Sent(a.gid, AttrRTU, false)); got != 2 {
			t.Errorf("%d RTUs, want 2", got)
		}
		if a.e.Stats.Duplicate != 1 || b.e.Stats.Duplicate != 3 {
			t.Errorf("duplicates active %d passive %d, want 1 3", a.e.Stats.Duplicate, b.e.Stats.Duplicate)
		}
		// The RTU sent again for the duplicate REP is the first one.
		if rtus := f.Sent(a.gid, AttrRTU, false); len(rtus) == 2 && rtus[0].Data != rtus[1].Data {
			t.Errorf("resent RTU differs from the first")
		}
		// Once established, neither side keeps a MAD to send again.
		ac, bc := onlyComm(t, a.e), onlyComm(t, b.e)
		if ac.last != nil || bc.last != nil {
			t.Errorf("established connections keep their last MADs: %v %v", ac.last != nil, bc.last != nil)
		}
		// An old REQ then gets nothing, as from the kernel's CM: no REP,
		// no new connection.
		f.Deliver(req)
		f.Drain()
		if b.e.Conns() != 1 || len(b.events) != 2 || len(f.Sent(b.gid, AttrREP, true)) != 3 {
			t.Errorf("old REQ after establishment: %d conns, events %v, %d REPs", b.e.Conns(), b.types(), len(f.Sent(b.gid, AttrREP, true)))
		}
	})
	t.Run("RTU and DREP duplicates are ignored", func(t *testing.T) {
		f, a, b := pair(t)
		f.DupNth(AttrRTU, 1)
		f.DupNth(AttrDREP, 1)
		ac := a.connect(b)
		f.Drain()
		if b.e.Stats.Duplicate != 1 || len(b.events) != 2 {
			t.Errorf("after duplicate RTU: duplicates %d events %v", b.e.Stats.Duplicate, b.types())
		}
		a.e.Disconnect(f.Now, ac)
		f.Drain()
		if a.e.Stats.Duplicate != 1 || ac.State != StateTimewait || len(a.events) != 2 {
			t.Errorf("after duplicate DREP: duplicates %d state %v events %v", a.e.Stats.Duplicate, ac.State, a.types())
		}
		f.Run(time.Minute)
		if a.e.Conns()+b.e.Conns() != 0 {
			t.Errorf("conns left %d %d", a.e.Conns(), b.e.Conns())
		}
	})
	t.Run("DREQ in timewait gets the DREP again", func(t *testing.T) {
		f, a, b := pair(t)
		f.DupNth(AttrDREQ, 1)
		ac := a.connect(b)
		f.Drain()
		a.e.Disconnect(f.Now, ac)
		f.Drain()
		if got := len(f.Sent(b.gid, AttrDREP, false)); got != 2 || b.e.Stats.Duplicate != 1 {
			t.Errorf("%d DREPs, %d duplicates; want 2 1", got, b.e.Stats.Duplicate)
		}
		if len(b.events) != 3 {
			t.Errorf("passive events %v", b.types())
		}
	})
}

// TestEngineReorder holds back MADs and delivers them late.
func TestEngineReorder(t *testing.T) {
	t.Run("stale REP after teardown", func(t *testing.T) {
		f, a, b := pair(t)
		f.DupNth(AttrREP, 1)
		ac := a.connect(b)
		f.DeliverWhere(func(w *wire) bool { return w.Attr() == AttrREQ })
		late := f.Take(func(w *wire) bool { return w.Attr() == AttrREP })
		f.Drain()
		a.e.Disconnect(f.Now, ac)
		f.Drain()
		f.Deliver(late) // the old REP arrives during timewait
		f.Drain()
		if ac.State != StateTimewait || len(f.Sent(a.gid, AttrRTU, false)) != 1 {
			t.Errorf("late REP: state %v, RTUs %d", ac.State, len(f.Sent(a.gid, AttrRTU, false)))
		}
		f.Run(time.Minute)
		f.Deliver(late) // and once more after the connection is gone
		f.Drain()
		rejs := f.Sent(a.gid, AttrREJ, false)
		if len(rejs) != 1 {
			t.Fatalf("REP for a forgotten connection: %d REJs", len(rejs))
		}
		if r := decode[REJ](t, rejs[0]); r.Reason != RejInvalidCommID || r.MessageRejected != MsgREP {
			t.Errorf("REJ %+v", r)
		}
		f.Run(time.Minute)
		if a.e.Conns()+b.e.Conns() != 0 {
			t.Errorf("conns left %d %d", a.e.Conns(), b.e.Conns())
		}
	})
	t.Run("RTU after the REP retransmission", func(t *testing.T) {
		f, a, b := pair(t)
		ac := a.connect(b)
		f.DeliverWhere(func(w *wire) bool { return w.Attr() == AttrREQ })
		f.DeliverWhere(func(w *wire) bool { return w.Attr() == AttrREP })
		rtu := f.Take(func(w *wire) bool { return w.Attr() == AttrRTU })
		f.Now = b.e.Next()
		b.e.Expire(f.Now) // the REP goes again
		f.Drain()         // ... and draws a second RTU
		f.Deliver(rtu)    // then the first RTU arrives
		f.Drain()
		bc := onlyComm(t, b.e)
		if ac.State != StateEstablished || bc.State != StateEstablished || b.e.Stats.Duplicate != 1 {
			t.Errorf("states %v %v, duplicates %d", ac.State, bc.State, b.e.Stats.Duplicate)
		}
	})
	t.Run("DREQ before RTU", func(t *testing.T) {
		f, a, b := pair(t)
		ac := a.connect(b)
		f.DeliverWhere(func(w *wire) bool { return w.Attr() == AttrREQ })
		f.DeliverWhere(func(w *wire) bool { return w.Attr() == AttrREP })
		rtu := f.Take(func(w *wire) bool { return w.Attr() == AttrRTU })
		a.e.Disconnect(f.Now, ac) // the active side is already done
		f.Drain()
		bc := onlyComm(t, b.e)
		if bc.State != StateTimewait || ac.State != StateTimewait {
			t.Errorf("states %v %v, want timewait both", ac.State, bc.State)
		}
		f.Deliver(rtu)
		f.Run(time.Minute)
		if a.e.Conns()+b.e.Conns() != 0 || b.e.halfOpen != 0 {
			t.Errorf("conns left %d %d, half-open %d", a.e.Conns(), b.e.Conns(), b.e.halfOpen)
		}
		if got, want := b.types(), []EventType{EvRequest, EvDisconnected, EvTimewaitDone}; !slices.Equal(got, want) {
			t.Errorf("passive events %v, want %v", got, want)
		}
	})
}

func TestEngineRejects(t *testing.T) {
	t.Run("unlistened service", func(t *testing.T) {
		f, a, b := pair(t)
		a.nextQPN++
		ac, err := a.e.Connect(f.Now, ConnectParams{RemoteGID: b.gid, ServiceID: testService + 1, LocalQPN: a.nextQPN, PathMTU: ib.MTU2048})
		if err != nil {
			t.Fatal(err)
		}
		f.Run(time.Minute)
		rejs := f.Sent(b.gid, AttrREJ, false)
		if len(rejs) != 1 {
			t.Fatalf("%d REJs", len(rejs))
		}
		r := decode[REJ](t, rejs[0])
		if r.Reason != RejInvalidServiceID || r.MessageRejected != MsgREQ || r.RemoteCommID != ac.LocalCommID || rejs[0].TID() != f.Sent(a.gid, AttrREQ, false)[0].TID() {
			t.Errorf("REJ %+v", r)
		}
		if b.e.Stats.Rejected != 1 || len(b.events) != 0 || b.e.Conns() != 0 {
			t.Errorf("passive: rejected %d events %v conns %d", b.e.Stats.Rejected, b.types(), b.e.Conns())
		}
		if e := a.last(EvRejected); e == nil || e.Reason != RejInvalidServiceID || a.e.Conns() != 0 || len(a.events) != 1 {
			t.Errorf("active events %v conns %d", a.types(), a.e.Conns())
		}
	})
	t.Run("consumer reject", func(t *testing.T) {
		f, a, b := pair(t)
		b.noAccept = true
		a.connect(b)
		f.Drain()
		bc := onlyComm(t, b.e)
		if err := b.e.Reject(bc, RejConsumerReject, []byte{0, 0x12, 0x34, 0x56}); err != nil {
			t.Fatal(err)
		}
		if err := b.e.Reject(bc, RejConsumerReject, nil); err != ErrBadState {
			t.Errorf("second Reject: %v", err)
		}
		f.Run(time.Minute)
		r := decode[REJ](t, f.Sent(b.gid, AttrREJ, false)[0])
		if r.Reason != RejConsumerReject || r.LocalCommID != bc.LocalCommID || binary.BigEndian.Uint32(r.PrivateData[:4]) != 0x123456 {
			t.Errorf("REJ %+v", r)
		}
		if a.e.Conns()+b.e.Conns() != 0 || b.e.halfOpen != 0 || a.last(EvRejected) == nil {
			t.Errorf("conns %d %d half-open %d events %v", a.e.Conns(), b.e.Conns(), b.e.halfOpen, a.types())
		}
	})
	t.Run("bad state calls", func(t *testing.T) {
		f, a, b := pair(t)
		ac := a.connect(b)
		if a.e.Accept(f.Now, ac, AcceptParams{}) != ErrBadState || a.e.Ready(ac) != ErrBadState ||
			a.e.RejectReply(ac, RejConsumerReject, nil) != ErrBadState || a.e.Reject(ac, RejConsumerReject, nil) != ErrBadState {
			t.Errorf("calls out of state accepted")
		}
	})
}

// TestEngineStale: a REQ whose local QPN + CA GUID name the remote end of
// an established connection draws REJ 10 and a DREQ on the old connection.
func TestEngineStale(t *testing.T) {
	f, a, b := pair(t)
	ac := a.connect(b)
	f.Drain()
	bc := onlyComm(t, b.e)
	// The active node forgot the connection (e.g. its DREQ was lost) and
	// reconnects with the same QP number and a new comm ID.
	req := decode[REQ](t, f.Sent(a.gid, AttrREQ, false)[0])
	req.LocalCommID = ac.LocalCommID + 1000
	var m ib.MAD
	if err := req.MarshalMAD(m.Data[:], 0xabc); err != nil {
		t.Fatal(err)
	}
	m.From = ib.MADAddr{GID: a.gid, QPN: ib.QP1}
	nlog := len(f.Log)
	b.e.HandleMAD(f.Now, &m)
	out := f.Log[nlog:]
	if len(out) != 2 {
		t.Fatalf("stale REQ drew %v, want a REJ and a DREQ", out)
	}
	var rej *REJ
	var dreq *DREQ
	for _, w := range out {
		switch w.Attr() {
		case AttrREJ:
			rej = decode[REJ](t, w)
			if w.TID() != 0xabc {
				t.Errorf("REJ TID %#x", w.TID())
			}
		case AttrDREQ:
			dreq = decode[DREQ](t, w)
		}
	}
	if rej == nil || rej.Reason != RejStaleConnection || rej.MessageRejected != MsgREQ || rej.RemoteCommID != req.LocalCommID {
		t.Errorf("REJ %+v", rej)
	}
	if dreq == nil || dreq.RemoteQPN != req.LocalQPN || dreq.LocalCommID != bc.LocalCommID || dreq.RemoteCommID != ac.LocalCommID {
		t.Errorf("DREQ %+v", dreq)
	}
	if b.e.Stats.Stale != 1 || b.e.Stats.Rejected != 1 || bc.State != StateDREQSent || b.e.Conns() != 1 {
		t.Errorf("stats %+v state %v conns %d", b.e.Stats, bc.State, b.e.Conns())
	}
	if e := b.last(EvTimeout); e == nil || e.Comm != bc {
		t.Errorf("passive events %v, want a timeout for the old connection", b.types())
	}
	f.Drain()
	// The DREP (the active side still knew it) moves it to timewait.
	if bc.State != StateTimewait {
		t.Errorf("old connection %v, want timewait", bc.State)
	}
	f.Run(time.Minute)
	if a.e.Conns()+b.e.Conns() != 0 {
		t.Errorf("conns left %d %d", a.e.Conns(), b.e.Conns())
	}
	// The REJ sent to the forgotten REQ found no connection on the active
	// side.
	if a.e.Stats.Unknown.Of(AttrREJ) != 1 {
		t.Errorf("active unknown %d", a.e.Stats.Unknown.Of(AttrREJ))
	}
}

func TestEngineLimits(t *testing.T) {
	t.Run("MaxHalfOpen", func(t *testing.T) {
		f := newFabric(t)
		cfg := testEngineConfig()
		cfg.MaxHalfOpen = 3
		b := newEngNode(f, 2, cfg)
		b.noAccept = true
		var as []*engNode
		for i := range 5 {
			a := newEngNode(f, 10+i, testEngineConfig())
			a.connect(b)
			as = append(as, a)
		}
		f.Drain()
		if b.e.Conns() != 3 || b.e.Stats.Rejected != 2 || len(b.events) != 3 {
			t.Fatalf("conns %d rejected %d events %d", b.e.Conns(), b.e.Stats.Rejected, len(b.events))
		}
		for i, a := range as {
			e := a.last(EvRejected)
			if (i >= 3) != (e != nil) || (e != nil && e.Reason != RejNoResources) {
				t.Errorf("peer %d: events %v", i, a.types())
			}
		}
		// Connect itself honours the limit too.
		if _, err := b.e.Connect(f.Now, ConnectParams{RemoteGID: as[0].gid, ServiceID: testService, LocalQPN: 9, PathMTU: ib.MTU2048}); err != ErrTooMany {
			t.Errorf("Connect over the half-open limit: %v", err)
		}
	})
	t.Run("MaxConns", func(t *testing.T) {
		f := newFabric(t)
		cfg := testEngineConfig()
		cfg.MaxConns = 3
		a := newEngNode(f, 1, testEngineConfig())
		b := newEngNode(f, 2, cfg)
		for range 4 {
			a.connect(b)
			f.Drain()
		}
		if b.e.Conns() != 3 || b.e.Stats.Rejected != 1 || a.e.Conns() != 3 {
			t.Fatalf("conns %d %d rejected %d", a.e.Conns(), b.e.Conns(), b.e.Stats.Rejected)
		}
		if e := a.last(EvRejected); e == nil || e.Reason != RejNoResources {
			t.Errorf("active events %v", a.types())
		}
	})
	t.Run("flood of 10000 REQs from as many sources", func(t *testing.T) {
		for _, accept := range []bool{false, true} {
			f := newFabric(t)
			f.NoLog = true
			b := newEngNode(f, 2, testEngineConfig())
			b.noAccept = !accept
			req := REQ{ServiceID: testService, LocalCAGUID: 0x77, PathMTU: ib.MTU2048}
			var m ib.MAD
			for i := range 10_000 {
				m.From = ib.MADAddr{GID: gidN(100_000 + i), QPN: ib.QP1}
				req.Primary.LocalGID = m.From.GID
				req.LocalCommID, req.LocalQPN = uint32(i+1), ib.QPN(i+100)
				if err := req.MarshalMAD(m.Data[:], uint64(i)); err != nil {
					t.Fatal(err)
				}
				b.e.HandleMAD(f.Now, &m)
			}
			if b.e.Conns() != 256 || b.e.halfOpen != 256 || b.e.Stats.Rejected != 10_000-256 || len(b.events) != 256 {
				t.Errorf("accept=%v: conns %d half-open %d rejected %d events %d", accept, b.e.Conns(), b.e.halfOpen, b.e.Stats.Rejected, len(b.events))
			}
			f.Pending = nil
			f.Run(time.Hour)
			// Unanswered REPs time out; unanswered REQs wait for the consumer.
			want := 256
			if accept {
				want = 0
			}
			if b.e.Conns() != want {
				t.Errorf("accept=%v: %d conns after an hour, want %d", accept, b.e.Conns(), want)
			}
		}
	})
}

// TestEngineMalformed feeds garbage; every piece is counted, none panics
// or changes state.
func TestEngineMalformed(t *testing.T) {
	f, a, b := pair(t)
	ac := a.connect(b)
	f.Drain()
	good := f.Sent(a.gid, AttrREQ, false)[0].Data
	mut := func(fn func(d *[MADLen]byte)) [MADLen]byte { d := good; fn(&d); return d }
	cases := map[string][MADLen]byte{
		"zero":             {},
		"base version":     mut(func(d *[MADLen]byte) { d[0] = 2 }),
		"class":            mut(func(d *[MADLen]byte) { d[1] = 0x04 }),
		"class version":    mut(func(d *[MADLen]byte) { d[2] = 1 }),
		"response method":  mut(func(d *[MADLen]byte) { d[3] = 0x83 }),
		"method get":       mut(func(d *[MADLen]byte) { d[3] = 0x01 }),
		"attribute":        mut(func(d *[MADLen]byte) { d[17] = 0x99 }),
		"REQ comm ID 0":    mut(func(d *[MADLen]byte) { copy(d[24:28], []byte{0, 0, 0, 0}) }),
		"REQ path MTU 0":   mut(func(d *[MADLen]byte) { d[24+50] &= 0x0f }),
		"REJ msg type 3":   mut(func(d *[MADLen]byte) { d[17] = byte(AttrREJ); d[24+8] = 0xc0 }),
		"MRA msg type 3":   mut(func(d *[MADLen]byte) { d[17] = byte(AttrMRA); d[24+8] = 0xc0 }),
		"REJ info len 127": mut(func(d *[MADLen]byte) { d[17] = byte(AttrREJ); d[24+8] = 0; d[24+9] = 0xfe }),
	}
	before := a.e.Stats.Malformed + b.e.Stats.Malformed
	nlog := len(f.Log)
	for name, d := range cases {
		for _, n := range []*engNode{a, b} {
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s: panic %v", name, r)
					}
				}()
				n.e.HandleMAD(f.Now, &ib.MAD{From: ib.MADAddr{GID: gidN(50), QPN: ib.QP1}, Data: d})
			}()
		}
	}
	if got := a.e.Stats.Malformed + b.e.Stats.Malformed - before; got != uint64(2*len(cases)) {
		t.Errorf("malformed counted %d, want %d", got, 2*len(cases))
	}
	if len(f.Log) != nlog || ac.State != StateEstablished || a.e.Conns() != 1 || b.e.Conns() != 1 {
		t.Errorf("garbage changed something: sent %v, state %v", f.Log[nlog:], ac.State)
	}
	// Valid messages the engine does not use are counted as unknown.
	var m ib.MAD
	sidr := SIDRREQ{RequestID: 1, ServiceID: testService}
	if err := sidr.MarshalMAD(m.Data[:], 1); err != nil {
		t.Fatal(err)
	}
	a.e.HandleMAD(f.Now, &m)
	if a.e.Stats.Unsupported.Of(AttrSIDRREQ) != 1 {
		t.Errorf("SIDR_REQ: unsupported %d", a.e.Stats.Unsupported.Of(AttrSIDRREQ))
	}
}

// TestEngineRandomMADs: random headers and payloads, including valid-looking
// CM messages with random fields, against engines with live connections.
func TestEngineRandomMADs(t *testing.T) {
	f, a, b := pair(t)
	for range 3 {
		a.connect(b)
	}
	f.Drain()
	rng := rand.New(rand.NewPCG(1, 2))
	attrs := []AttrID{AttrREQ, AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREQ, AttrDREP, AttrSIDRREQ, AttrLAP}
	for i := range 20_000 {
		var m ib.MAD
		for j := range m.Data {
			m.Data[j] = byte(rng.Uint32())
		}
		if i%4 != 0 { // mostly valid headers, so the payload decoders run
			copy(m.Data[:4], []byte{1, mad.ClassCM, CMClassVersion, MethodSend})
			binary.BigEndian.PutUint16(m.Data[16:18], uint16(attrs[rng.IntN(len(attrs))]))
		}
		m.From = ib.MADAddr{GID: gidN(rng.IntN(3)), QPN: ib.QP1}
		a.e.HandleMAD(f.Now, &m)
		b.e.HandleMAD(f.Now, &m)
		if i%100 == 0 {
			f.Now = f.Now.Add(50 * time.Millisecond)
			a.e.Expire(f.Now)
			b.e.Expire(f.Now)
			f.Drain()
		}
	}
	for _, n := range []*engNode{a, b} {
		if n.e.Stats.Received < 20_000 || n.e.Stats.Malformed == 0 {
			t.Errorf("%v: stats %+v", n.gid, n.e.Stats)
		}
		if n.e.halfOpen < 0 || n.e.halfOpen > n.e.Conns() {
			t.Errorf("%v: half-open %d of %d", n.gid, n.e.halfOpen, n.e.Conns())
		}
	}
}
