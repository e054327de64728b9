package ipoibcm

import (
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/cm/cmtest"
	"github.com/ipoibd/ipoibd/ib"
)

// TestEveryCounterShown gives every field of ManagerStats and EngineStats
// (each element of the by-kind and by-reason arrays) a value of its own
// and looks for each value in the manager's Counters, under a name of its
// own: a field without a counter tag would be counted and never shown.
func TestEveryCounterShown(t *testing.T) {
	var e *cm.Engine
	m, err := NewManager(ManagerConfig{
		Local: ib.LinkAddr{QPN: 0x48},
		Service: func(ev func(cm.Event)) (cm.Service, error) {
			e = cm.NewEngine(cm.EngineConfig{Event: ev})
			return e, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cmtest.EveryCounterShown(t, m.Counters, &m.Stats, &e.Stats)
}

// TestConnectionFigures: each side's connection records the path MTU its
// QP was brought up with and when the handshake completed; ByQPN finds it
// by its local QPN, for the receive side of the datapath, as long as the
// manager holds it, and not once it is gone. A path MTU smaller on one
// side (the REQ's) is the one both sides use.
func TestConnectionFigures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mtuA  ib.MTU // the connecting side's PathMTU setting
		mtuB  ib.MTU
		wantA ib.MTU
	}{
		{"same MTU", ib.MTU4096, ib.MTU4096, ib.MTU4096},
		{"the REQ's smaller", ib.MTU2048, ib.MTU4096, ib.MTU2048},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, a, b := establishedPair(t, PolicyRFC,
				func(c *ManagerConfig) { c.PathMTU = tc.mtuA }, func(c *ManagerConfig) { c.PathMTU = tc.mtuB })
			for _, n := range []*mgrNode{a, b} {
				cs := n.established()
				if len(cs) != 1 {
					t.Fatalf("%v: %d connections", n.local.GID, len(cs))
				}
				c := cs[0]
				if c.PathMTU != tc.wantA {
					t.Errorf("%v: path MTU %v, want %v", n.local.GID, c.PathMTU, tc.wantA)
				}
				if c.Established.IsZero() || c.Established.Before(c.Since) || c.Established.After(f.Now) {
					t.Errorf("%v: established at %v, made at %v, now %v", n.local.GID, c.Established, c.Since, f.Now)
				}
				if got := n.m.ByQPN(c.QP.Num()); got != c {
					t.Errorf("%v: ByQPN(%v) = %p, want the connection %p", n.local.GID, c.QP.Num(), got, c)
				}
				if got := n.m.ByQPN(c.QP.Num() + 1); got != nil {
					t.Errorf("%v: ByQPN(%v) = %p, want none", n.local.GID, c.QP.Num()+1, got)
				}
			}
			qa, qb := a.established()[0].QP.Num(), b.established()[0].QP.Num()
			a.m.Disconnect(f.Now, b.local, "test")
			f.Run(time.Minute) // DREQ, DREP, timewait
			if len(a.m.Connections())+len(b.m.Connections()) != 0 || a.m.ByQPN(qa) != nil || b.m.ByQPN(qb) != nil {
				t.Errorf("after teardown: %d and %d connections, ByQPN %p %p", len(a.m.Connections()), len(b.m.Connections()), a.m.ByQPN(qa), b.m.ByQPN(qb))
			}
		})
	}
}
