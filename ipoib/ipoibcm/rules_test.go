package ipoibcm

import (
	"slices"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
)

// testREQ is a REQ for UD QPN 0xabcdef as a peer at gid would send it.
func testREQ(gid ib.GID, guid uint64, commID uint32, qpn ib.QPN) *cm.REQ {
	return &cm.REQ{
		LocalCommID: commID, ServiceID: cm.IPoIBServiceID(0xabcdef), LocalCAGUID: guid, LocalQPN: qpn,
		TransportType: cm.TransportRC, PathMTU: ib.MTU2048, StartingPSN: 0x4242,
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, MaxCMRetries: 15,
		Primary: cm.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: gid, HopLimit: 64},
	}
}

// TestManagerRestartAndReplace: a REQ from a known peer's GID never tears
// its connections down by itself. A new UD QPN ("peer restarted") is acted
// on only when the new connection is established, which needs the REP to
// reach whoever sent the REQ; under rfc a REQ from a peer we are connected
// to is a second connection, never a replacement. With SharedGIDs (pods'
// children on one port) a new UD QPN is another interface, and both stay.
func TestManagerRestartAndReplace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		policy    Policy
		newUDQPN  bool
		completes bool // the REQ's sender receives our REP and sends the RTU
		shared    bool // b's SharedGIDs
		wantDowns []string
	}{
		{"linux: new UD QPN, spoofed (the real peer rejects our REP)", PolicyLinux, true, false, false, nil},
		{"linux: new UD QPN, handshake completes", PolicyLinux, true, true, false, []string{"peer restarted"}},
		{"rfc: new UD QPN, spoofed", PolicyRFC, true, false, false, nil},
		{"rfc: new UD QPN, handshake completes", PolicyRFC, true, true, false, []string{"peer restarted"}},
		{"rfc: same UD QPN, spoofed", PolicyRFC, false, false, false, nil},
		{"rfc: same UD QPN, handshake completes", PolicyRFC, false, true, false, nil},
		{"linux: shared GIDs, new UD QPN, handshake completes", PolicyLinux, true, true, true, nil},
		{"rfc: shared GIDs, new UD QPN, handshake completes", PolicyRFC, true, true, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, a, b := establishedPair(t, tc.policy, nil, func(c *ManagerConfig) { c.SharedGIDs = tc.shared })
			old := b.established()[0]
			ud := a.local.QPN
			if tc.newUDQPN {
				ud = 0x999
			}
			req := testREQ(a.local.GID, 0x0002c90300000001, 0x7777, 0x5555)
			req.ServiceID = cm.IPoIBServiceID(b.local.QPN)
			_ = cm.PrivateData{UDQPN: ud, ReceiveMTU: cm.LinuxReceiveMTU}.Encode(req.PrivateData[:])
			out := inject(t, f, b, a.local.GID, req, 0x123)
			rep := decode[cm.REP](t, onlyWire(t, out, cm.AttrREP))
			f.Pending = slices.DeleteFunc(f.Pending, func(w *wire) bool { return w.Attr() == cm.AttrREP })
			if len(b.downs) != 0 || b.m.Stats.PeerRestarts != 0 {
				t.Fatalf("the REQ alone: downs %v restarts %d", b.downs, b.m.Stats.PeerRestarts)
			}
			if tc.completes {
				inject(t, f, b, a.local.GID, &cm.RTU{LocalCommID: req.LocalCommID, RemoteCommID: rep.LocalCommID}, 0x123)
			} else {
				// The real a gets a REP for a REQ it never sent: REJ 6.
				inject(t, f, a, b.local.GID, rep, 0x123)
			}
			f.Run(time.Minute)
			restarted := tc.wantDowns != nil
			// Under linux b never sent on its incoming connection, so it
			// was never up and its end calls no Down.
			if tc.policy == PolicyLinux {
				tc.wantDowns = nil
			}
			if !slices.Equal(b.downs, tc.wantDowns) {
				t.Errorf("downs %v, want %v", b.downs, tc.wantDowns)
			}
			if (b.m.Stats.PeerRestarts == 1) != restarted || (old.State() == cm.StateEstablished) == restarted {
				t.Errorf("restarts %d, old connection %v", b.m.Stats.PeerRestarts, old.State())
			}
			wantEst := 1
			if tc.completes && !restarted {
				wantEst = 2
			}
			if n := len(b.established()); n != wantEst {
				t.Errorf("%d established at b, want %d", n, wantEst)
			}
			if len(b.refused) != 0 {
				t.Errorf("b sent a neighbor back to resolution: %v", b.refused)
			}
			if !tc.completes && (b.eng.Conns() != 1 || a.eng.Stats.Unknown.Of(cm.AttrREP) != 1) {
				t.Errorf("spoofed attempt left %d connections at b; a counted %d unknown REPs", b.eng.Conns(), a.eng.Stats.Unknown.Of(cm.AttrREP))
			}
		})
	}
}

func TestManagerDefaultPolicy(t *testing.T) {
	var cfg ManagerConfig
	if cfg.Policy != PolicyLinux || cfg.Policy.String() != "linux" {
		t.Errorf("zero policy %v", cfg.Policy)
	}
	for s, want := range map[string]Policy{"linux": PolicyLinux, "rfc": PolicyRFC} {
		if p, err := ParsePolicy(s); err != nil || p != want || p.String() != s {
			t.Errorf("ParsePolicy(%q) = %v %v", s, p, err)
		}
	}
}

// TestManagerCounters: the Manager's and the engine's counters come from
// their stats structs, each field once, with no name shown twice.
func TestManagerCounters(t *testing.T) {
	f, a, b := establishedPair(t, PolicyLinux, nil, nil)
	b.m.Stats.QPErrors = 7
	b.eng.Stats.SendErrors = 5
	inject(t, f, b, a.local.GID, &cm.DREP{LocalCommID: 1, RemoteCommID: 2}, 1)
	cs := b.m.Counters()
	seen := map[string]bool{}
	for _, c := range cs {
		if seen[c.Name] {
			t.Errorf("counter %s twice", c.Name)
		}
		seen[c.Name] = true
	}
	wantCounter(t, cs, "qp_errors", 7)
	wantCounter(t, cs, "send_errors", 5)
	wantCounter(t, cs, "unknown_drep", 1)
	wantCounter(t, cs, "accepted", 1)
	wantCounter(t, cs, "established", 1)
	for _, name := range []string{"connects", "crossing_rejected", "peer_restarts", "mads_in", "reqs_refused", "stale_foreign", "req_source_mismatch", "req_busy_source"} {
		if !seen[name] {
			t.Errorf("counter %s not shown", name)
		}
	}
}

// TestUnpredictableNumbers: starting PSNs (ours on both sides) and comm
// IDs come from crypto/rand: over many connections they are distinct,
// within 24 (PSN) bits, and neither a constant step apart nor derived
// from the QPN.
func TestUnpredictableNumbers(t *testing.T) {
	const n = 400
	f := newFabric(t)
	f.NoLog = true
	hub := newMgrNode(f, 1, PolicyLinux, nil)
	var activePSN, passivePSN, commIDs []uint32
	var qpns []ib.QPN
	for i := range n {
		p := newMgrNode(f, 2+i, PolicyLinux, nil)
		hub.connect(p.local)
		f.Drain()
	}
	for _, c := range hub.m.Connections() {
		activePSN = append(activePSN, c.comm.RecvPSN)
		commIDs = append(commIDs, c.comm.LocalCommID)
		qpns = append(qpns, c.QP.Num())
	}
	for _, g := range f.GIDs() {
		if g == hub.local.GID {
			continue
		}
		for _, c := range f.Node(g).(*mgrNode).m.Connections() {
			passivePSN = append(passivePSN, c.comm.RecvPSN)
		}
	}
	for _, tc := range []struct {
		name string
		vals []uint32
		bits uint
	}{
		{"active receive PSNs (Manager.Connect)", activePSN, 24},
		{"passive receive PSNs (the engine's REP)", passivePSN, 24},
		{"comm IDs", commIDs, 32},
	} {
		if len(tc.vals) != n {
			t.Fatalf("%s: %d values", tc.name, len(tc.vals))
		}
		distinct := map[uint32]bool{}
		steps := map[uint32]bool{}
		high := 0
		for i, v := range tc.vals {
			if uint64(v)>>tc.bits != 0 {
				t.Errorf("%s: %#x wider than %d bits", tc.name, v, tc.bits)
			}
			distinct[v] = true
			if i > 0 {
				steps[v-tc.vals[i-1]] = true
			}
			if v>>(tc.bits-1) != 0 {
				high++
			}
		}
		// Collisions among 400 random 24-bit values: about 0.005 expected.
		if len(distinct) < n-2 || len(steps) < n/2 || high < n/4 || high > 3*n/4 {
			t.Errorf("%s: %d distinct, %d distinct steps, %d with the top bit", tc.name, len(distinct), len(steps), high)
		}
	}
	for i, q := range qpns {
		if activePSN[i] == uint32(q) || activePSN[i] == uint32(q+1) {
			t.Errorf("PSN %#x follows QPN %v", activePSN[i], q)
		}
	}
}
