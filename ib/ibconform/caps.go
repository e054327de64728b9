package ibconform

import (
	"slices"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

var capRules = []rule{
	{"the optional capabilities declared behave", capsBehave},
}

// capsBehave checks each capability ib.CapsOf finds on the device.
func capsBehave(t *testing.T, a, b *end) {
	caps := ib.CapsOf(a.dev)
	t.Logf("%s: %v", a.dev.Name(), caps.Names())
	if caps.CQHandler {
		t.Run("CQHandler", func(t *testing.T) { cqHandlerRuns(t, a, b) })
	}
	if n := caps.QPCounters; n != nil {
		q := a.qp(t, ib.QPAttr{Type: ib.RC, MaxSend: 1, MaxRecv: 1})
		var got []string
		for _, c := range q.Counters() {
			got = append(got, c.Name)
		}
		if want := n.QPCounterNames(); !slices.Equal(got, want) {
			t.Errorf("QPCounterNamer: QPCounterNames %v, a QP's counters %v", want, got)
		}
	}
	if p := caps.PortState; p != nil && !p.PortActive() {
		t.Errorf("PortStater: the port of %s, which carries traffic, is not active", a.dev.Name())
	}
	if e := caps.SubnetEvents; e != nil {
		if n, m := e.SubnetEvents(), e.SubnetEvents(); m < n {
			t.Errorf("SubnetEventer: the count went from %d back to %d", n, m)
		}
	}
}

// cqHandlerRuns sets a handler on a receive CQ of b: a datagram's
// completion must reach it.
func cqHandlerRuns(t *testing.T, a, b *end) {
	rcq := b.cq(t, 16)
	if _, ok := rcq.(ib.CQHandler); !ok {
		t.Fatalf("%s declares CQHandlers, but its CQ %T is no ib.CQHandler", b.dev.Name(), rcq)
	}
	got := make(chan ib.Completion, 16)
	ib.CapsOf(b.dev).SetCQHandler(rcq, func() {
		var wc [4]ib.Completion
		for n := rcq.Poll(wc[:]); n > 0; n = rcq.Poll(wc[:]) {
			for _, c := range wc[:n] {
				got <- c
			}
		}
	})
	qa := a.ud(t, 0x77)
	qb := b.qp(t, ib.QPAttr{Type: ib.UD, SendCQ: b.scq, RecvCQ: rcq, MaxSend: 1, MaxRecv: 1})
	modify(t, qb, ib.QPModify{State: ib.StateInit, PKey: ib.DefaultPKey, QKey: 0x77}, ib.QPModify{State: ib.StateRTR},
		ib.QPModify{State: ib.StateRTS})
	postRecv(t, qb, ib.RecvWR{ID: 9, SGE: b.sge(0, 4096)})
	postSend(t, qa, ib.SendWR{SGE: a.sge(0, 10), AH: a.ah(t, b.gid()), RemoteQPN: qb.Num(), RemoteQKey: 0x77})
	select {
	case wc := <-got:
		if wc.ID != 9 || wc.Status != ib.WCSuccess {
			t.Errorf("the handler polled %+v, want the receive 9", wc)
		}
	case <-timeAfter(b.cfg.timeout):
		t.Errorf("the handler did not run in %v", b.cfg.timeout)
	}
}
