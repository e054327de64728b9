package ipoibcm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
)

// ---------------------------------------------------------------------------
// Fake QPs.
// ---------------------------------------------------------------------------

type fakeQP struct {
	num    ib.QPN
	typ    ib.QPType
	state  ib.QPState
	mods   []ib.QPModify
	closed int
	fail   ib.QPState // a Modify to this state fails (0: none)
}

func (q *fakeQP) Num() ib.QPN                       { return q.num }
func (q *fakeQP) Type() ib.QPType                   { return q.typ }
func (q *fakeQP) State() ib.QPState                 { return q.state }
func (q *fakeQP) PostSend([]ib.SendWR) (int, error) { return 0, errors.New("fake QP: no datapath") }
func (q *fakeQP) MaxSend() int                      { return 1 }
func (q *fakeQP) PostRecv([]ib.RecvWR) (int, error) { return 0, errors.New("fake QP: no datapath") }

func (q *fakeQP) Counters() []ib.Counter {
	return []ib.Counter{{Name: "modifies", Value: uint64(len(q.mods))}, {Name: "closes", Value: uint64(q.closed)}}
}

func (q *fakeQP) Modify(m ib.QPModify) error {
	if q.closed > 0 {
		return ib.ErrClosed
	}
	if q.fail != 0 && m.State == q.fail {
		return ib.ErrBadState
	}
	ok := m.State == ib.StateError || m.State == q.state+1
	if !ok {
		return fmt.Errorf("fake QP %v: %v -> %v: %w", q.num, q.state, m.State, ib.ErrBadState)
	}
	q.mods = append(q.mods, m)
	q.state = m.State
	return nil
}

func (q *fakeQP) Close() error {
	q.closed++
	if q.closed > 1 {
		return ib.ErrClosed
	}
	return nil
}

type fakeQPs struct {
	next ib.QPN
	all  []*fakeQP
	fail ib.QPState // new QPs fail a Modify to this state
}

func (f *fakeQPs) CreateQP(t ib.QPType) (ib.QP, error) {
	f.next++
	q := &fakeQP{num: f.next, typ: t, fail: f.fail}
	f.all = append(f.all, q)
	return q, nil
}

// namedQPs names the fake QPs' counters before one is made.
type namedQPs struct{}

func (namedQPs) QPCounterNames() []string { return []string{"modifies", "closes"} }

func (f *fakeQPs) open() int {
	n := 0
	for _, q := range f.all {
		if q.closed == 0 {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------------------
// Manager test node.
// ---------------------------------------------------------------------------

type mgrNode struct {
	f       *fabric
	m       *Manager
	eng     *polledEngine // m's service
	local   ib.LinkAddr
	qps     *fakeQPs
	ups     []*Connection
	downs   []string
	refused []string
	// reconnect makes Refused connect again at once, as the neighbor
	// layer does on its next packet.
	reconnect bool
}

// mgrAddr: UD QPN 0x100*i (the more significant part of the comparison),
// GID fe80::i.
func mgrAddr(i int) ib.LinkAddr {
	return ib.LinkAddr{Flags: ib.FlagRC, QPN: ib.QPN(0x100 * i), GID: gidN(i)}
}

func newMgrNode(f *fabric, i int, p Policy, mod func(*ManagerConfig)) *mgrNode {
	n := &mgrNode{f: f, local: mgrAddr(i), qps: &fakeQPs{next: ib.QPN(0x1000 * i)}}
	ec := cm.EngineConfig{GID: n.local.GID, GUID: 0x0002c90300000000 | uint64(i), PKey: ib.DefaultPKey, ResponseTimeout: 16, MaxRetries: 3, Send: f.Sender(n.local.GID)}
	cfg := ManagerConfig{
		Service: func(ev func(cm.Event)) (cm.Service, error) {
			ec.Event = ev
			n.eng = &polledEngine{Engine: cm.NewEngine(ec)}
			return n.eng, nil
		},
		PKey:    ib.DefaultPKey,
		Local:   n.local,
		Policy:  p,
		PathMTU: ib.MTU4096,
		QPs:     n.qps,
		Up:      func(c *Connection) { n.ups = append(n.ups, c) },
		Down:    func(c *Connection, reason string) { n.downs = append(n.downs, reason) },
		Refused: func(peer ib.LinkAddr, reason string) {
			n.refused = append(n.refused, reason)
			if n.reconnect {
				n.connect(peer)
			}
		},
	}
	if mod != nil {
		mod(&cfg)
	}
	m, err := NewManager(cfg)
	if err != nil {
		panic(err) // the engine cannot fail to listen
	}
	n.m = m
	f.Add(n.local.GID, n)
	return n
}

// polledEngine is the Engine with an input queue, as cm.EngineService is on a
// MAD transport, without its receive goroutine: the fabric stays
// deterministic.
type polledEngine struct {
	*cm.Engine
	in []ib.MAD
}

// Poll hands the queued MADs to the Engine.
func (p *polledEngine) Poll(now time.Time) {
	for len(p.in) > 0 {
		m := p.in[0]
		p.in = p.in[1:]
		p.HandleMAD(now, &m)
	}
}

// HandleMAD is the fabric delivering m to the node's transport: the
// Manager polls its service for it, as ipoib does when Wake fires.
func (n *mgrNode) HandleMAD(now time.Time, m *ib.MAD) {
	n.eng.in = append(n.eng.in, *m)
	n.m.Poll(now)
}

func (n *mgrNode) Expire(now time.Time) { n.m.Expire(now) }
func (n *mgrNode) Next() time.Time      { return n.m.Next() }

func (n *mgrNode) connect(peer ib.LinkAddr) {
	n.f.TB.Helper()
	ok, err := n.m.Connect(n.f.Now, peer)
	if !ok || err != nil {
		n.f.TB.Fatalf("Connect(%v): %v %v", peer, ok, err)
	}
}

// live returns the connections in a state other than timewait.
func (n *mgrNode) established() []*Connection {
	var cs []*Connection
	for _, c := range n.m.Connections() {
		if c.State() == cm.StateEstablished {
			cs = append(cs, c)
		}
	}
	return cs
}

func (n *mgrNode) sendable() []*Connection {
	var cs []*Connection
	for _, c := range n.m.Connections() {
		if c.Sendable() {
			cs = append(cs, c)
		}
	}
	return cs
}

// checkQPs: every QP of an established connection went Init -> RTR -> RTS
// with what the CM agreed.
func checkQP(tb testing.TB, c *Connection) {
	tb.Helper()
	q := c.QP.(*fakeQP)
	if q.state != ib.StateRTS || len(q.mods) != 3 || q.closed != 0 {
		tb.Errorf("QP %v: state %v mods %d closed %d", q.num, q.state, len(q.mods), q.closed)
		return
	}
	rtr, rts := q.mods[1], q.mods[2]
	if rtr.DestQPN != c.comm.RemoteQPN || rtr.DestGID != c.Peer.GID || rtr.RecvPSN != c.comm.RecvPSN || rtr.PathMTU != c.comm.PathMTU || !rtr.PathMTU.Valid() ||
		rts.SendPSN != c.comm.SendPSN || q.mods[0].PKey != ib.DefaultPKey {
		tb.Errorf("QP %v modified with %+v for %+v", q.num, q.mods, c.comm)
	}
}

// ---------------------------------------------------------------------------
// Crossing REQs (RFC 4755 §3.3), every interleaving.
// ---------------------------------------------------------------------------

// crossAction is one choice of the explorer: deliver the i-th pending MAD,
// drop it, or let a node connect.
type crossSim struct {
	f      *fabric
	a, b   *mgrNode // a has the smaller link address
	conA   bool
	conB   bool
	drops  int
	policy Policy
}

func newCrossSim(tb testing.TB, p Policy, reconnect bool) *crossSim {
	f := newFabric(tb)
	s := &crossSim{f: f, policy: p}
	s.a = newMgrNode(f, 1, p, nil)
	s.b = newMgrNode(f, 2, p, nil)
	s.a.reconnect, s.b.reconnect = reconnect, reconnect
	if ib.CompareIgnoringFlags(s.a.local, s.b.local) >= 0 {
		tb.Fatal("a must have the smaller link address")
	}
	return s
}

const maxCrossDrops = 2

// options lists the choices at this point: 0..n-1 deliver pending[i];
// n..2n-1 drop pending[i-n] (REJs and REQs only, up to maxCrossDrops);
// then connect a, connect b.
func (s *crossSim) options() []string {
	var o []string
	for i := range s.f.Pending {
		o = append(o, fmt.Sprintf("deliver %v", s.f.Pending[i]))
	}
	if s.drops < maxCrossDrops {
		for i, w := range s.f.Pending {
			if w.Attr() == cm.AttrREJ {
				o = append(o, fmt.Sprintf("drop %d %v", i, w))
			}
		}
	}
	if !s.conA {
		o = append(o, "connect a")
	}
	if !s.conB {
		o = append(o, "connect b")
	}
	return o
}

func (s *crossSim) apply(opt string) {
	switch {
	case opt == "connect a":
		s.conA = true
		s.a.connect(s.b.local)
	case opt == "connect b":
		s.conB = true
		s.b.connect(s.a.local)
	case strings.HasPrefix(opt, "deliver "):
		for i, w := range s.f.Pending {
			if opt == "deliver "+w.String() {
				s.f.Pending = slices.Delete(s.f.Pending, i, i+1)
				s.f.Deliver(w)
				return
			}
		}
		panic(opt)
	case strings.HasPrefix(opt, "drop "):
		var i int
		fmt.Sscanf(opt, "drop %d", &i)
		s.f.Pending[i].Dropped = true
		s.f.Pending = slices.Delete(s.f.Pending, i, i+1)
		s.drops++
	}
}

// explore runs every interleaving, replaying from scratch for each prefix,
// and calls check at every leaf. It returns the number of leaves.
func exploreCross(t *testing.T, p Policy, reconnect bool, check func(t *testing.T, s *crossSim, path []string)) int {
	leaves := 0
	var walk func(path []string)
	walk = func(path []string) {
		s := newCrossSim(t, p, reconnect)
		for _, o := range path {
			s.apply(o)
		}
		opts := s.options()
		// Stop branching once both connected and the handshake is long
		// past the crossing: bounded depth keeps the tree finite.
		if len(opts) == 0 || len(path) >= 14 {
			s.f.Run(10 * time.Minute)
			leaves++
			check(t, s, path)
			return
		}
		for _, o := range opts {
			walk(append(slices.Clone(path), o))
			if t.Failed() {
				return
			}
		}
	}
	walk(nil)
	return leaves
}

// TestManagerCrossingRFC explores every interleaving of two REQs under
// the rfc policy. Where each REQ reached the other side while that side's
// own REQ was unanswered, the larger address rejects and one connection
// remains; where one arrived after the other side's REQ was answered (or
// after the crossing REJ was lost and the REQ retransmitted), it is
// accepted as a second connection. Nothing is ever torn down, both sides
// hold the same connections, and every one of them carries sends.
func TestManagerCrossingRFC(t *testing.T) {
	for _, reconnect := range []bool{false, true} {
		t.Run(fmt.Sprintf("reconnect-on-refused=%v", reconnect), func(t *testing.T) {
			var one, two int
			leaves := exploreCross(t, PolicyRFC, reconnect, func(t *testing.T, s *crossSim, path []string) {
				a, b := s.a, s.b
				fail := func(format string, args ...any) {
					t.Helper()
					t.Errorf("path %q: "+format, append([]any{path}, args...)...)
				}
				ea, eb := a.established(), b.established()
				if len(ea) != len(eb) || len(ea) < 1 || len(ea) > 2 {
					fail("established: a %d b %d, want 1 or 2 each, the same", len(ea), len(eb))
					return
				}
				if len(ea) == 1 {
					one++
				} else {
					two++
				}
				for _, ca := range ea {
					var cb *Connection
					for _, c := range eb {
						if ca.comm.RemoteQPN == c.QP.Num() && c.comm.RemoteQPN == ca.QP.Num() {
							cb = c
						}
					}
					if cb == nil || ca.Outgoing == cb.Outgoing {
						fail("a's connection %+v has no counterpart at b", ca.comm)
						return
					}
					if !ca.Sendable() || !cb.Sendable() {
						fail("not sendable: a %v b %v", ca.Sendable(), cb.Sendable())
					}
					if !ca.Peer.SameNode(b.local) || !cb.Peer.SameNode(a.local) || ca.MTU != cm.LinuxReceiveMTU-4 {
						fail("peers %v %v MTU %d", ca.Peer, cb.Peer, ca.MTU)
					}
					checkQP(t, ca)
					checkQP(t, cb)
				}
				if len(a.ups) != len(ea) || len(b.ups) != len(eb) {
					fail("Up called a %d b %d times", len(a.ups), len(b.ups))
				}
				if len(a.downs)+len(b.downs) != 0 {
					fail("Down called: a %v b %v", a.downs, b.downs)
				}
				// Only the larger address rejects, only with reason 28 and
				// its UD QPN in the private data; the smaller never does.
				for _, w := range s.f.Log {
					if w.Attr() != cm.AttrREJ {
						continue
					}
					r := decode[cm.REJ](t, w)
					if w.From != b.local.GID || r.Reason != cm.RejConsumerReject || r.MessageRejected != cm.MsgREQ ||
						ib.QPN(binary.BigEndian.Uint32(r.PrivateData[:4])) != b.local.QPN {
						fail("REJ %+v from %v", r, w.From)
					}
				}
				if a.m.Stats.CrossingRejected != 0 {
					fail("the smaller address rejected a crossing REQ")
				}
				// Nothing else lingers: rejected attempts are forgotten and
				// their QPs closed.
				for _, n := range []*mgrNode{a, b} {
					if n.eng.Conns() != len(ea) || len(n.m.Connections()) != len(ea) || n.qps.open() != len(ea) {
						fail("%v: engine conns %d, manager conns %d, open QPs %d", n.local.GID, n.eng.Conns(), len(n.m.Connections()), n.qps.open())
					}
				}
			})
			t.Logf("%d interleavings: %d ended with one connection, %d with two", leaves, one, two)
			if leaves < 40 || one == 0 || two == 0 {
				t.Errorf("only %d interleavings explored (%d one, %d two)", leaves, one, two)
			}
		})
	}
}

// TestManagerCrossingREJWire checks the crossing REJ on the wire when both
// REQs are in flight and a's arrives first, while b's is unanswered; when
// b's arrives first, a (the smaller) accepts it, and a's REQ then reaches a
// b whose REQ was answered: accepted, two connections, no REJ.
func TestManagerCrossingREJWire(t *testing.T) {
	for _, bFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("b-first=%v", bFirst), func(t *testing.T) {
			s := newCrossSim(t, PolicyRFC, false)
			s.a.connect(s.b.local)
			s.b.connect(s.a.local)
			if bFirst {
				s.f.LIFO = true
			}
			s.f.Run(time.Minute)
			rejs := s.f.Sent(ib.GID{}, cm.AttrREJ, true)
			if bFirst {
				if len(rejs) != 0 || len(s.a.established()) != 2 || len(s.b.established()) != 2 || s.b.m.Stats.CrossingRejected != 0 || s.a.m.Stats.CrossingAccepted != 1 {
					t.Fatalf("REJs %v, established %d %d, stats a %+v b %+v", rejs, len(s.a.established()), len(s.b.established()), s.a.m.Stats, s.b.m.Stats)
				}
				return
			}
			if len(rejs) != 1 || rejs[0].From != s.b.local.GID {
				t.Fatalf("REJs %v, want one from b", rejs)
			}
			r := decode[cm.REJ](t, rejs[0])
			reqA := decode[cm.REQ](t, s.f.Sent(s.a.local.GID, cm.AttrREQ, true)[0])
			if r.Reason != cm.RejConsumerReject || r.RemoteCommID != reqA.LocalCommID || binary.BigEndian.Uint32(r.PrivateData[:4]) != uint32(s.b.local.QPN) {
				t.Errorf("REJ %+v", r)
			}
			if s.b.m.Stats.CrossingRejected != 1 || s.a.m.Stats.CrossingAccepted != 1 {
				t.Errorf("stats a %+v b %+v", s.a.m.Stats, s.b.m.Stats)
			}
			if c := s.b.eng.Stats.RejSent.Of(cm.RejConsumerReject); c != 1 {
				t.Errorf("b counted %d consumer REJs sent", c)
			}
			// b's REQ carried a's service ID and b's private data.
			reqB := decode[cm.REQ](t, s.f.Sent(s.b.local.GID, cm.AttrREQ, true)[0])
			pd, err := cm.DecodePrivateData(reqB.PrivateData[:])
			if err != nil || reqB.ServiceID != cm.IPoIBServiceID(s.a.local.QPN) || pd.UDQPN != s.b.local.QPN || pd.ReceiveMTU != cm.LinuxReceiveMTU {
				t.Errorf("b's REQ: service %#x private %+v %v", reqB.ServiceID, pd, err)
			}
			if len(s.a.refused)+len(s.b.refused) != 0 {
				t.Errorf("refused a %v b %v", s.a.refused, s.b.refused)
			}
		})
	}
}

// TestManagerCrossingREJLoss: the crossing REJ lost once, twice or every
// time, in both delivery orders. b's own REQ is answered before a
// retransmits, so the retransmission is no longer a crossing REQ: b
// accepts it as a second connection. Nothing is torn down, and b refused
// exactly once.
func TestManagerCrossingREJLoss(t *testing.T) {
	for _, lost := range []int{1, 2, -1} {
		for _, lifo := range []bool{false, true} {
			t.Run(fmt.Sprintf("lost=%d/lifo=%v", lost, lifo), func(t *testing.T) {
				s := newCrossSim(t, PolicyRFC, false)
				s.f.LIFO = lifo
				if lost < 0 {
					s.f.DropAll[cm.AttrREJ] = true
				} else {
					for i := 1; i <= lost; i++ {
						s.f.DropNth(cm.AttrREJ, i)
					}
				}
				s.a.connect(s.b.local)
				s.b.connect(s.a.local)
				s.f.Run(10 * time.Minute)
				a, b := s.a, s.b
				if lifo {
					// b's REQ reached a first: no crossing at b at all.
					if len(s.f.Sent(b.local.GID, cm.AttrREJ, true)) != 0 {
						t.Errorf("b sent a REJ though its REQ was answered")
					}
				} else if rejs := s.f.Sent(b.local.GID, cm.AttrREJ, true); len(rejs) != 1 || b.m.Stats.CrossingRejected != 1 {
					t.Errorf("%d REJs, %d crossing rejects, want 1", len(rejs), b.m.Stats.CrossingRejected)
				}
				if len(a.established()) != 2 || len(b.established()) != 2 || len(a.ups) != 2 || len(b.ups) != 2 || len(a.downs)+len(b.downs) != 0 {
					t.Fatalf("established %d %d ups %d %d downs %v %v", len(a.established()), len(b.established()), len(a.ups), len(b.ups), a.downs, b.downs)
				}
				if a.eng.Conns() != 2 || b.eng.Conns() != 2 || a.qps.open() != 2 || b.qps.open() != 2 {
					t.Errorf("leftovers: engine conns %d %d open QPs %d %d", a.eng.Conns(), b.eng.Conns(), a.qps.open(), b.qps.open())
				}
			})
		}
	}
}

func TestManagerCrossingLinux(t *testing.T) {
	leaves := exploreCross(t, PolicyLinux, false, func(t *testing.T, s *crossSim, path []string) {
		for _, n := range []*mgrNode{s.a, s.b} {
			est := n.established()
			if len(est) != 2 {
				t.Errorf("path %q: %v has %d established, want 2 (one each way)", path, n.local.GID, len(est))
				return
			}
			var out, in int
			for _, c := range est {
				if c.Outgoing {
					out++
					if !c.Sendable() {
						t.Errorf("path %q: outgoing connection not sendable", path)
					}
				} else {
					in++
					if c.Sendable() {
						t.Errorf("path %q: incoming connection sendable under the linux policy", path)
					}
				}
				checkQP(t, c)
			}
			if out != 1 || in != 1 || len(n.ups) != 1 || !n.ups[0].Outgoing || len(n.downs) != 0 {
				t.Errorf("path %q: %v out %d in %d ups %d downs %v", path, n.local.GID, out, in, len(n.ups), n.downs)
			}
		}
		if rejs := s.f.Sent(ib.GID{}, cm.AttrREJ, true); len(rejs) != 0 {
			t.Errorf("path %q: REJ sent under the linux policy", path)
		}
	})
	t.Logf("%d interleavings", leaves)
}

// TestManagerCrossingCounted: a REQ that comes while ours to the same
// peer is unanswered is counted as crossing by both policies: under
// linux each side accepts and counts it; under rfc the smaller address
// accepts it and the larger rejects it. When b's REQ is answered before
// a's REQ reaches b (lifo), only a saw a crossing.
func TestManagerCrossingCounted(t *testing.T) {
	for _, tc := range []struct {
		policy     Policy
		lifo       bool
		aAcc, bAcc uint64 // crossing REQs accepted
		bRej       uint64 // crossing REQs rejected (b has the larger address)
		conns      int    // established at each
	}{
		{PolicyLinux, false, 1, 1, 0, 2},
		{PolicyLinux, true, 1, 0, 0, 2},
		{PolicyRFC, false, 1, 0, 1, 1},
		{PolicyRFC, true, 1, 0, 0, 2},
	} {
		t.Run(fmt.Sprintf("%v/lifo=%v", tc.policy, tc.lifo), func(t *testing.T) {
			s := newCrossSim(t, tc.policy, false)
			s.a.connect(s.b.local)
			s.b.connect(s.a.local)
			s.f.LIFO = tc.lifo
			s.f.Run(time.Minute)
			a, b := s.a.m.Stats, s.b.m.Stats
			if a.CrossingAccepted != tc.aAcc || b.CrossingAccepted != tc.bAcc || a.CrossingRejected != 0 || b.CrossingRejected != tc.bRej {
				t.Errorf("a %+v\nb %+v", a, b)
			}
			if len(s.a.established()) != tc.conns || len(s.b.established()) != tc.conns {
				t.Errorf("established a %d b %d, want %d each", len(s.a.established()), len(s.b.established()), tc.conns)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// Peer restart, send failure, idle reaping, MTU.
// ---------------------------------------------------------------------------

func establishedPair(t *testing.T, p Policy, modA, modB func(*ManagerConfig)) (*fabric, *mgrNode, *mgrNode) {
	t.Helper()
	f := newFabric(t)
	a := newMgrNode(f, 1, p, modA)
	b := newMgrNode(f, 2, p, modB)
	a.connect(b.local)
	f.Run(time.Second)
	if len(a.established()) != 1 || len(b.established()) != 1 || len(a.ups) != 1 {
		t.Fatalf("setup: established %d %d, ups %d", len(a.established()), len(b.established()), len(a.ups))
	}
	return f, a, b
}

func TestManagerPeerRestart(t *testing.T) {
	for _, sameQPN := range []bool{false, true} {
		t.Run(fmt.Sprintf("rc-qpn-reused=%v", sameQPN), func(t *testing.T) {
			f, _, b := establishedPair(t, PolicyRFC, nil, nil)
			oldB := b.established()[0]
			oldQP := oldB.QP.(*fakeQP)
			// a restarts: same GID and CA GUID, new UD QPN, fresh engine.
			a2 := newMgrNode(f, 1, PolicyRFC, func(c *ManagerConfig) { c.Local.QPN = 0x777 })
			a2.reconnect = true
			if !sameQPN {
				a2.qps.next = 0x50000
			}
			a2.connect(b.local)
			f.Run(time.Minute)
			// A new RC QPN reaches the manager's restart rule; a reused one
			// is caught first by the engine's stale rule (REJ 10, the
			// restarted node retries).
			wantDown, wantRefused := []string{"peer restarted"}, []string(nil)
			if sameQPN {
				wantDown, wantRefused = []string{"timeout"}, []string{"rejected: StaleConnection"}
			}
			if b.m.Stats.PeerRestarts != 1 || !slices.Equal(b.downs, wantDown) || !slices.Equal(a2.refused, wantRefused) {
				t.Errorf("b: restarts %d downs %v; restarted a refused %v", b.m.Stats.PeerRestarts, b.downs, a2.refused)
			}
			// A DREQ naming the old connection went out.
			var sawDREQ bool
			for _, w := range f.Sent(b.local.GID, cm.AttrDREQ, true) {
				if d := decode[cm.DREQ](t, w); d.RemoteQPN == oldB.comm.RemoteQPN {
					sawDREQ = true
				}
			}
			if !sawDREQ {
				t.Errorf("no DREQ for the old connection")
			}
			est := b.established()
			if len(est) != 1 || est[0] == oldB || est[0].Peer.QPN != 0x777 || len(b.ups) != 2 {
				t.Fatalf("b: established %v, ups %d", est, len(b.ups))
			}
			if e := a2.established(); len(e) != 1 || len(a2.ups) != 1 {
				t.Errorf("restarted a: established %d ups %d", len(e), len(a2.ups))
			}
			if oldQP.closed != 1 || b.eng.Conns() != 1 || len(b.m.Connections()) != 1 {
				t.Errorf("old QP closed %d, b engine conns %d, manager conns %d", oldQP.closed, b.eng.Conns(), len(b.m.Connections()))
			}
			if sameQPN && b.eng.Stats.Stale != 1 {
				t.Errorf("reused QPN: stale %d", b.eng.Stats.Stale)
			}
		})
	}
}

func TestManagerSendFailed(t *testing.T) {
	f, a, b := establishedPair(t, PolicyRFC, nil, nil)
	cb := b.established()[0]
	var refusedPeer ib.LinkAddr
	b.m.cfg.Refused = func(p ib.LinkAddr, reason string) { refusedPeer = p; b.refused = append(b.refused, reason) }
	nlog := len(f.Log)
	b.m.SendFailed(f.Now, cb.QP.Num()+12345, ib.WCRetryExceeded) // not ours: nothing
	if len(b.downs) != 0 || len(f.Log) != nlog {
		t.Fatalf("unknown QPN acted upon")
	}
	b.m.SendFailed(f.Now, cb.QP.Num(), ib.WCRetryExceeded)
	what := fmt.Sprintf("send failed on the RC connection, QPN %v to the peer's QPN %v", cb.QP.Num(), cb.RemoteQPN())
	if !slices.Equal(b.downs, []string{"send failed"}) || !slices.Equal(b.refused, []string{what}) || !refusedPeer.SameNode(a.local) || b.m.Stats.SendFails != 1 {
		t.Errorf("downs %v refused %v peer %v", b.downs, b.refused, refusedPeer)
	}
	out := f.Log[nlog:]
	if len(out) != 1 || out[0].Attr() != cm.AttrDREQ || decode[cm.DREQ](t, out[0]).RemoteQPN != cb.comm.RemoteQPN {
		t.Fatalf("sent %v, want one DREQ", out)
	}
	if cb.Sendable() {
		t.Errorf("failed connection still sendable")
	}
	b.m.SendFailed(f.Now, cb.QP.Num(), ib.WCRetryExceeded) // again: already going
	f.Run(time.Minute)
	if len(a.downs) != 1 || len(b.downs) != 1 {
		t.Errorf("downs a %v b %v", a.downs, b.downs)
	}
	for _, n := range []*mgrNode{a, b} {
		if n.eng.Conns() != 0 || len(n.m.Connections()) != 0 || n.qps.open() != 0 {
			t.Errorf("%v: conns %d %d open QPs %d", n.local.GID, n.eng.Conns(), len(n.m.Connections()), n.qps.open())
		}
	}
}

// TestManagerIdle: a connection without traffic is reaped after the idle
// timeout; sends or receives alone keep it (the linux policy's incoming
// connections carry only the peer's sends).
func TestManagerIdle(t *testing.T) {
	const idle = 10 * time.Second
	for _, tc := range []struct {
		name    string
		traffic func(c *Connection)
	}{
		{"idle", nil},
		{"sends", func(c *Connection) { c.Traffic.TxPackets.Add(1) }},
		{"receives", func(c *Connection) { c.Traffic.RxPackets.Add(1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			busy := tc.traffic != nil
			f, a, b := establishedPair(t, PolicyRFC, nil, func(c *ManagerConfig) { c.IdleTimeout = idle })
			cb := b.established()[0]
			start := f.Now
			var downAt time.Time
			for i := 0; i < 60; i++ {
				if busy {
					tc.traffic(cb)
				}
				f.Run(time.Second)
				if len(b.downs) > 0 && downAt.IsZero() {
					downAt = f.Now
				}
			}
			if busy {
				if len(b.downs)+len(a.downs) != 0 || cb.State() != cm.StateEstablished || b.m.Stats.IdleReaped != 0 {
					t.Errorf("busy connection reaped: downs %v %v", a.downs, b.downs)
				}
				return
			}
			if !slices.Equal(b.downs, []string{"idle"}) || b.m.Stats.IdleReaped != 1 {
				t.Fatalf("downs %v reaped %d", b.downs, b.m.Stats.IdleReaped)
			}
			if d := downAt.Sub(start); d < idle || d > 2*idle {
				t.Errorf("reaped after %v, want between %v and %v", d, idle, 2*idle)
			}
			if n := len(f.Sent(b.local.GID, cm.AttrDREQ, true)); n != 1 {
				t.Errorf("%d DREQs", n)
			}
			if len(a.downs) != 1 || a.eng.Conns()+b.eng.Conns() != 0 || a.qps.open()+b.qps.open() != 0 {
				t.Errorf("a downs %v, conns %d %d", a.downs, a.eng.Conns(), b.eng.Conns())
			}
		})
	}
}

func TestManagerMTU(t *testing.T) {
	cases := []struct {
		a, b uint32 // receive MTUs (0: default)
		want int
	}{
		{0, 0, 65520},
		{0, 2048, 2044},
		{2048, 0, 2044},
		{4100, 65524, 4096},
		{9000, 4096, 4092},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d-%d", tc.a, tc.b), func(t *testing.T) {
			f, a, b := establishedPair(t, PolicyRFC,
				func(c *ManagerConfig) { c.ReceiveMTU = tc.a },
				func(c *ManagerConfig) { c.ReceiveMTU = tc.b })
			ca, cb := a.established()[0], b.established()[0]
			if ca.MTU != tc.want || cb.MTU != tc.want {
				t.Errorf("MTU a %d b %d, want %d", ca.MTU, cb.MTU, tc.want)
			}
			want := tc.b
			if want == 0 {
				want = cm.LinuxReceiveMTU
			}
			rep := decode[cm.REP](t, f.Sent(b.local.GID, cm.AttrREP, true)[0])
			if pd, err := cm.DecodePrivateData(rep.PrivateData[:]); err != nil || pd.ReceiveMTU != want || pd.UDQPN != b.local.QPN {
				t.Errorf("REP private data %+v %v", pd, err)
			}
		})
	}
}

// TestManagerBadPeers: REQs and REPs an IPoIB peer must refuse.
func TestManagerBadPeers(t *testing.T) {
	t.Run("REP with receive MTU 4", func(t *testing.T) {
		f := newFabric(t)
		a := newMgrNode(f, 1, PolicyRFC, nil)
		b := newEnginePeer(f, 2)
		b.e.Listen(cm.IPoIBServiceID(0x200))
		a.connect(mgrAddr(2))
		f.Drain()
		bc := b.req
		if bc == nil || b.e.Conns() != 1 {
			t.Fatalf("the REQ reached b as %v; b has %d connections", bc, b.e.Conns())
		}
		var priv [8]byte
		binary.BigEndian.PutUint32(priv[0:4], 0x200)
		binary.BigEndian.PutUint32(priv[4:8], 4)
		if err := b.e.Accept(f.Now, bc, cm.AcceptParams{LocalQPN: 5, PrivateData: priv[:]}); err != nil {
			t.Fatal(err)
		}
		f.Run(time.Minute)
		rejs := f.Sent(a.local.GID, cm.AttrREJ, true)
		if len(rejs) != 1 {
			t.Fatalf("%d REJs", len(rejs))
		}
		if r := decode[cm.REJ](t, rejs[0]); r.Reason != cm.RejConsumerReject || r.MessageRejected != cm.MsgREP {
			t.Errorf("REJ %+v", r)
		}
		if len(a.ups) != 0 || len(a.refused) != 1 || a.qps.open() != 0 || a.eng.Conns() != 0 {
			t.Errorf("ups %d refused %v open QPs %d", len(a.ups), a.refused, a.qps.open())
		}
	})
	t.Run("QP that fails RTR", func(t *testing.T) {
		f := newFabric(t)
		a := newMgrNode(f, 1, PolicyRFC, nil)
		b := newMgrNode(f, 2, PolicyRFC, nil)
		b.qps.fail = ib.StateRTR
		a.connect(b.local)
		f.Run(time.Minute)
		if len(a.ups)+len(b.ups) != 0 || b.m.Stats.QPErrors != 1 || a.qps.open()+b.qps.open() != 0 || len(a.refused) != 1 {
			t.Errorf("ups %d %d QP errors %d open %d %d refused %v", len(a.ups), len(b.ups), b.m.Stats.QPErrors, a.qps.open(), b.qps.open(), a.refused)
		}
	})
	t.Run("UD-only peer", func(t *testing.T) {
		f := newFabric(t)
		a := newMgrNode(f, 1, PolicyRFC, nil)
		ud := mgrAddr(2)
		ud.Flags = 0
		if ok, err := a.m.Connect(f.Now, ud); ok || err != nil || len(f.Log) != 0 {
			t.Errorf("Connect to a UD-only peer: %v %v, sent %d", ok, err, len(f.Log))
		}
	})
}

// ---------------------------------------------------------------------------
// Scale: 1,000 peers at once.
// ---------------------------------------------------------------------------

func TestManagerThousandPeers(t *testing.T) {
	const peers = 1000
	f := newFabric(t)
	f.NoLog = true
	hub := newMgrNode(f, 1, PolicyRFC, nil)
	var ps []*mgrNode
	for i := range peers {
		p := newMgrNode(f, 2+i, PolicyRFC, nil)
		p.reconnect = true // a REJ (no resources at the hub) means: try again
		ps = append(ps, p)
	}
	for _, p := range ps {
		p.connect(hub.local)
	}
	f.Run(time.Minute)
	if n := len(hub.established()); n != peers || len(hub.ups) != peers || hub.eng.Conns() != peers {
		t.Fatalf("hub: %d established, %d ups, %d engine conns", n, len(hub.ups), hub.eng.Conns())
	}
	refusedPeers := 0
	for i, p := range ps {
		if len(p.established()) != 1 || len(p.ups) != 1 || len(p.downs) != 0 {
			t.Fatalf("peer %d: established %d ups %d downs %v", i, len(p.established()), len(p.ups), p.downs)
		}
		if len(p.refused) > 0 {
			refusedPeers++
		}
	}
	t.Logf("%d peers were refused (half-open limit %d) and retried; hub rejected %d REQs", refusedPeers, 256, hub.eng.Stats.Rejected)
	if hub.eng.HalfOpen() != 0 {
		t.Errorf("hub half-open %d", hub.eng.HalfOpen())
	}
	hub.m.Close(f.Now)
	f.Run(time.Minute)
	if hub.eng.Conns() != 0 || len(hub.m.Connections()) != 0 || hub.qps.open() != 0 || len(hub.downs) != peers {
		t.Errorf("hub after close: conns %d %d open QPs %d downs %d", hub.eng.Conns(), len(hub.m.Connections()), hub.qps.open(), len(hub.downs))
	}
	for i, p := range ps {
		if p.eng.Conns() != 0 || len(p.m.Connections()) != 0 || p.qps.open() != 0 || len(p.downs) != 1 {
			t.Fatalf("peer %d after close: conns %d open QPs %d downs %v", i, p.eng.Conns(), p.qps.open(), p.downs)
		}
	}
}

// ---------------------------------------------------------------------------
// A peer that behaves like the Linux kernel driver (docs/ipoib-cm.md,
// docs/linux-interop.md), built directly on the engine.
// ---------------------------------------------------------------------------

type linuxPeer struct {
	f       *fabric
	e       *cm.Engine
	local   ib.LinkAddr
	nextQPN ib.QPN
	tx      map[ib.LinkAddr]*cm.Comm // one sending connection per neighbor
	txUp    map[*cm.Comm]bool
	rx      []*cm.Comm
	rejects int
	reqs    []*cm.REQ // REQs it received
	reps    []*cm.REP // REPs it received
}

func newLinuxPeer(f *fabric, i int) *linuxPeer {
	l := &linuxPeer{f: f, local: mgrAddr(i), nextQPN: ib.QPN(0x10000 * i), tx: map[ib.LinkAddr]*cm.Comm{}, txUp: map[*cm.Comm]bool{}}
	l.e = cm.NewEngine(cm.EngineConfig{GID: l.local.GID, GUID: 0xa0a0 + uint64(i), PKey: ib.DefaultPKey, ResponseTimeout: 20, MaxRetries: 15,
		Send: f.Sender(l.local.GID), Event: l.event})
	l.e.Listen(cm.IPoIBServiceID(l.local.QPN))
	f.Add(l.local.GID, l.e)
	return l
}

func (l *linuxPeer) priv() []byte {
	var p [8]byte
	_ = cm.PrivateData{UDQPN: l.local.QPN, ReceiveMTU: cm.LinuxReceiveMTU}.Encode(p[:])
	return p[:]
}

// send is "a unicast packet to peer": use the tx connection, or open one.
func (l *linuxPeer) send(peer ib.LinkAddr) bool {
	k := peerKey(peer)
	if c := l.tx[k]; c != nil {
		return l.txUp[c]
	}
	l.nextQPN++
	c, err := l.e.Connect(l.f.Now, cm.ConnectParams{RemoteGID: peer.GID, ServiceID: cm.IPoIBServiceID(peer.QPN), LocalQPN: l.nextQPN,
		Transport: cm.TransportRC, PathMTU: ib.MTU2048, RetryCount: 0, RNRRetry: 0, ACKTimeout: 18, PrivateData: l.priv(), Context: k})
	if err != nil {
		l.f.TB.Fatalf("linux peer connect: %v", err)
	}
	l.tx[k] = c
	return false
}

func (l *linuxPeer) dropTx(c *cm.Comm) {
	if k, ok := c.Context.(ib.LinkAddr); ok && l.tx[k] == c {
		delete(l.tx, k)
		delete(l.txUp, c)
	}
}

func (l *linuxPeer) event(ev cm.Event) {
	switch ev.Type {
	case cm.EvRequest:
		l.reqs = append(l.reqs, ev.REQ)
		// Accept every REQ; echo its RNR retry count; PSN random.
		l.nextQPN++
		if err := l.e.Accept(l.f.Now, ev.Comm, cm.AcceptParams{LocalQPN: l.nextQPN, RecvPSN: 0xabcdef, RNRRetry: ev.REQ.RNRRetryCount, PrivateData: l.priv()}); err != nil {
			l.f.TB.Errorf("linux accept: %v", err)
		}
		l.rx = append(l.rx, ev.Comm)
	case cm.EvReply:
		l.reps = append(l.reps, ev.REP)
		pd, err := cm.DecodePrivateData(ev.REP.PrivateData[:])
		if err != nil || pd.ReceiveMTU <= 4 {
			_ = l.e.RejectReply(ev.Comm, cm.RejConsumerReject, nil)
			l.dropTx(ev.Comm)
			return
		}
		if err := l.e.Ready(ev.Comm); err != nil {
			l.f.TB.Errorf("linux ready: %v", err)
		}
		l.txUp[ev.Comm] = true
	case cm.EvRejected:
		l.rejects++
		l.dropTx(ev.Comm)
	case cm.EvTimeout, cm.EvTimewaitDone:
		l.dropTx(ev.Comm)
	}
}

func TestManagerAgainstLinuxPeer(t *testing.T) {
	for _, tc := range []struct {
		order  string
		policy Policy
	}{
		{"manager-first", PolicyLinux}, {"linux-first", PolicyLinux}, {"crossing-fifo", PolicyLinux}, {"crossing-lifo", PolicyLinux},
		// rfc sends on a connection the peer opened only when its REQ
		// carries ipoibd's mark, which Linux's never does: the kernel
		// receives on the connections it accepted only.
		{"manager-first", PolicyRFC}, {"linux-first", PolicyRFC},
	} {
		order := tc.order
		t.Run(order+"/"+tc.policy.String(), func(t *testing.T) {
			f := newFabric(t)
			// The manager has the larger address: under the RFC rule it
			// would reject the Linux REQ; under the linux policy it must not.
			l := newLinuxPeer(f, 1)
			m := newMgrNode(f, 2, tc.policy, nil)
			switch order {
			case "manager-first":
				m.connect(l.local)
				f.Run(time.Second)
				l.send(m.local)
			case "linux-first":
				l.send(m.local)
				f.Run(time.Second)
				m.connect(l.local)
			case "crossing-fifo", "crossing-lifo":
				f.LIFO = order == "crossing-lifo"
				m.connect(l.local)
				l.send(m.local)
			}
			f.Run(time.Minute)
			// The Linux peer's next packet finds its connection up.
			if !l.send(m.local) || l.rejects != 0 || len(l.tx) != 1 {
				t.Errorf("linux tx not up: rejects %d tx %d", l.rejects, len(l.tx))
			}
			if rejs := f.Sent(m.local.GID, cm.AttrREJ, true); len(rejs) != 0 {
				t.Errorf("manager sent %d REJs to the Linux peer", len(rejs))
			}
			// The manager sends on its own connection only.
			if s := m.sendable(); len(s) != 1 || !s[0].Outgoing || len(m.ups) != 1 || m.ups[0] != s[0] || len(m.downs) != 0 {
				t.Fatalf("manager sendable %v ups %d downs %v", s, len(m.ups), m.downs)
			}
			est := m.established()
			if len(est) != 2 {
				t.Fatalf("manager has %d established connections, want 2", len(est))
			}
			var in *Connection
			for _, c := range est {
				checkQP(t, c)
				if !c.Outgoing {
					in = c
				}
			}
			// The Linux connection into the manager: the requester's QP
			// gets RNR retry 7 from our REP; our passive QP answers with
			// what the REQ asked (retry count 0 from Linux).
			if len(l.reps) != 1 || l.reps[0].RNRRetryCount != 7 || in.MTU != cm.LinuxReceiveMTU-4 {
				t.Errorf("REPs to linux %d, MTU %d", len(l.reps), in.MTU)
			}
			if len(l.reqs) != 1 || l.reqs[0].ServiceID != cm.IPoIBServiceID(l.local.QPN) {
				t.Errorf("REQs from the manager: %d", len(l.reqs))
			}
			reqL := decode[cm.REQ](t, f.Sent(l.local.GID, cm.AttrREQ, true)[0])
			if reqL.RetryCount != 0 || reqL.RNRRetryCount != 0 || in.comm.RNRRetry != 0 {
				t.Errorf("linux REQ retry %d rnr %d", reqL.RetryCount, reqL.RNRRetryCount)
			}
		})
	}
	t.Run("linux drops after its REQ times out and re-REQs", func(t *testing.T) {
		f := newFabric(t)
		l := newLinuxPeer(f, 1)
		m := newMgrNode(f, 2, PolicyLinux, nil)
		f.DropNth(cm.AttrREQ, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16) // the first REQ times out
		l.send(m.local)
		f.Run(10 * time.Minute)
		if len(l.tx) != 0 {
			t.Fatalf("linux tx after REQ timeout: %d", len(l.tx))
		}
		l.send(m.local) // next packet: new REQ
		f.Run(time.Minute)
		if !l.send(m.local) || len(m.m.Connections()) != 1 || len(f.Sent(m.local.GID, cm.AttrREJ, true)) != 0 {
			t.Errorf("re-REQ: up %v, manager conns %d", l.send(m.local), len(m.m.Connections()))
		}
	})
}

// ---------------------------------------------------------------------------
// Benchmark.
// ---------------------------------------------------------------------------

// BenchmarkConnectionSetup measures REQ/REP/RTU setups between two managers
// over the in-memory fabric, including the QP transitions on fake QPs.
// Each iteration also tears the connection down (outside the timer) so the
// tables stay small.
func BenchmarkConnectionSetup(b *testing.B) {
	f := newFabric(b)
	f.NoLog = true
	x := newMgrNode(f, 1, PolicyRFC, nil)
	y := newMgrNode(f, 2, PolicyRFC, nil)
	var setup time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		x.connect(y.local)
		f.Drain()
		setup += time.Since(start)
		b.StopTimer()
		if len(x.ups) != i+1 {
			b.Fatalf("setup %d failed", i)
		}
		x.m.Disconnect(f.Now, y.local, "bench")
		f.Run(10 * time.Second)
		x.qps.all, y.qps.all = x.qps.all[:0], y.qps.all[:0]
		b.StartTimer()
	}
	b.ReportMetric(float64(b.N)/setup.Seconds(), "setups/s")
}

// TestManagerConnCountersKeys: the connection totals, and the manager's
// own counters, have the same names in the same order before the first
// connection, while one is up and after it is gone (the daemon's stats
// keep their keys); a total never goes backwards. A factory that cannot
// name its QPs' counters gets them with the first connection.
func TestManagerConnCountersKeys(t *testing.T) {
	names := func(cs []ib.Counter) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	for _, namer := range []bool{true, false} {
		t.Run(fmt.Sprintf("namer=%v", namer), func(t *testing.T) {
			mod := func(c *ManagerConfig) {
				if namer {
					c.QPCounters = namedQPs{}
				}
			}
			f := newFabric(t)
			a := newMgrNode(f, 1, PolicyRFC, mod)
			b := newMgrNode(f, 2, PolicyRFC, mod)
			fresh, freshCM := a.m.ConnCounters(), a.m.Counters()
			for _, c := range fresh {
				if c.Value != 0 {
					t.Errorf("fresh manager: %s = %d", c.Name, c.Value)
				}
			}
			for _, name := range []string{"rej_sent_consumer", "rej_sent_stale_conn", "unknown_rep", "unsupported_lap"} {
				if !slices.Contains(names(freshCM), name) {
					t.Errorf("fresh manager's counters lack %s: %v", name, names(freshCM))
				}
			}
			a.connect(b.local)
			f.Run(time.Second)
			if len(a.established()) != 1 {
				t.Fatalf("no connection: %d established", len(a.established()))
			}
			during := a.m.ConnCounters()
			a.m.Disconnect(f.Now, b.local, "test")
			f.Run(time.Minute)
			if n := len(a.m.Connections()); n != 0 {
				t.Fatalf("%d connections left", n)
			}
			after := a.m.ConnCounters()
			want := []string{"modifies", "closes"}
			if !namer {
				want = nil // nothing to name them by until a QP reports
			}
			if !slices.Equal(names(fresh), want) || !slices.Equal(names(during), []string{"modifies", "closes"}) || !slices.Equal(names(after), names(during)) {
				t.Errorf("conn counters fresh %v, during %v, after %v", fresh, during, after)
			}
			for k := range min(len(during), len(after)) {
				if after[k].Value < during[k].Value {
					t.Errorf("%s went back from %d to %d", after[k].Name, during[k].Value, after[k].Value)
				}
			}
			// Init, RTR, RTS, and Error when it went down.
			if len(after) == 0 || after[0].Value != 4 {
				t.Errorf("the gone connection's QP modifies folded as %v, want 4", after)
			}
			if got := names(a.m.Counters()); !slices.Equal(got, names(freshCM)) {
				t.Errorf("manager counters changed keys:\nfresh %v\nafter %v", names(freshCM), got)
			}
		})
	}
}

// TestManagerIBPath: on an InfiniBand port (PathTo set) our REQ carries the
// SA's path and our QP its LIDs, SL and rate; the passive side addresses
// its QP from the REQ's path; without a path yet, Connect says so and
// opens nothing.
func TestManagerIBPath(t *testing.T) {
	path := IBPath{
		REQ:     cm.Path{LocalLID: 0x11, RemoteLID: 0x22, SL: 3, PacketRate: 7, SubnetLocal: true, LocalACKTimeout: 19},
		Address: ib.Path{DLID: 0x22, SL: 3, StaticRate: 7},
		MTU:     ib.MTU2048,
	}
	known := true
	pathTo := func(c *ManagerConfig) {
		c.PathTo = func(ib.GID) (IBPath, bool) { return path, known }
	}
	f, a, b := establishedPair(t, PolicyLinux, pathTo, nil)
	ca, cb := a.established()[0], b.established()[0]
	checkQP(t, ca)
	checkQP(t, cb)
	rtrA, rtsA := ca.QP.(*fakeQP).mods[1], ca.QP.(*fakeQP).mods[2]
	if rtrA.Path != path.Address || rtrA.PathMTU != ib.MTU2048 || rtsA.Timeout != 19 {
		t.Errorf("active QP: RTR path %+v MTU %v, RTS timeout %d; want %+v, MTU 2048, 19", rtrA.Path, rtrA.PathMTU, rtsA.Timeout, path.Address)
	}
	// b answers over the REQ's path: a's LID is the path's local one.
	rtrB, rtsB := cb.QP.(*fakeQP).mods[1], cb.QP.(*fakeQP).mods[2]
	if want := (ib.Path{DLID: 0x11, SL: 3, StaticRate: 7}); rtrB.Path != want || rtsB.Timeout != 19 {
		t.Errorf("passive QP: RTR path %+v, RTS timeout %d; want %+v and 19", rtrB.Path, rtsB.Timeout, want)
	}

	known = false
	qps := a.qps.next
	c := newMgrNode(f, 3, PolicyLinux, nil)
	if ok, err := a.m.Connect(f.Now, c.local); !ok || !errors.Is(err, ErrNoPath) {
		t.Errorf("Connect without a path: %v %v, want ErrNoPath", ok, err)
	}
	if a.m.Connecting(c.local) || a.qps.next != qps {
		t.Errorf("Connect without a path left a connection in setup (%v) or made %d QPs", a.m.Connecting(c.local), a.qps.next-qps)
	}
}
