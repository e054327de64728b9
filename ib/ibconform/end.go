package ibconform

import (
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// end is one device of a rule with a slab, its MR and two CQs of the
// rule's own.
type end struct {
	dev      ib.Device
	cfg      *config
	mr       ib.MR
	scq, rcq ib.CQ
}

// slabSize holds 16 slots of 64 KiB.
const slabSize = 1 << 20

func newEnd(t *testing.T, d ib.Device, cfg *config) *end {
	t.Helper()
	s, err := ib.NewSlab(slabSize)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := d.RegisterMemory(s)
	if err != nil {
		s.Close()
		t.Fatalf("%s: RegisterMemory: %v", d.Name(), err)
	}
	e := &end{dev: d, cfg: cfg, mr: mr}
	t.Cleanup(func() { mr.Close(); s.Close() })
	e.scq, e.rcq = e.cq(t, 64), e.cq(t, 64)
	return e
}

func (e *end) cq(t *testing.T, size int) ib.CQ {
	t.Helper()
	c, err := e.dev.CreateCQ(size)
	if err != nil {
		t.Fatalf("%s: CreateCQ: %v", e.dev.Name(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (e *end) sge(off, n int) ib.SGE { return ib.SGE{MR: e.mr, Offset: off, Length: n} }
func (e *end) mem() []byte           { return e.mr.Slab().Bytes() }
func (e *end) gid() ib.GID           { return e.dev.Port().GID }

func (e *end) qp(t *testing.T, attr ib.QPAttr) ib.QP {
	t.Helper()
	if attr.SendCQ == nil {
		attr.SendCQ, attr.RecvCQ = e.scq, e.rcq
	}
	q, err := e.dev.CreateQP(attr)
	if err != nil {
		t.Fatalf("%s: CreateQP %v: %v", e.dev.Name(), attr.Type, err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func modify(t *testing.T, q ib.QP, ms ...ib.QPModify) {
	t.Helper()
	for _, m := range ms {
		if err := q.Modify(m); err != nil {
			t.Fatalf("QP %v to %v: %v", q.Num(), m.State, err)
		}
	}
}

// ud makes a UD QP in RTS with qkey.
func (e *end) ud(t *testing.T, qkey ib.QKey) ib.QP {
	t.Helper()
	q := e.qp(t, ib.QPAttr{Type: ib.UD, MaxSend: 8, MaxRecv: 8})
	modify(t, q, ib.QPModify{State: ib.StateInit, PKey: ib.DefaultPKey, QKey: qkey}, ib.QPModify{State: ib.StateRTR},
		ib.QPModify{State: ib.StateRTS})
	return q
}

func postRecv(t *testing.T, q interface {
	PostRecv([]ib.RecvWR) (int, error)
}, wrs ...ib.RecvWR) {
	t.Helper()
	if n, err := q.PostRecv(wrs); n != len(wrs) || err != nil {
		t.Fatalf("PostRecv: %d of %d posted: %v", n, len(wrs), err)
	}
}

func postSend(t *testing.T, q ib.QP, wrs ...ib.SendWR) {
	t.Helper()
	if n, err := q.PostSend(wrs); n != len(wrs) || err != nil {
		t.Fatalf("PostSend on QP %v: %d of %d posted: %v", q.Num(), n, len(wrs), err)
	}
}

// wait returns the next completion of c.
func (e *end) wait(t *testing.T, c ib.CQ, what string) ib.Completion {
	t.Helper()
	var wc [1]ib.Completion
	deadline := time.NewTimer(e.cfg.timeout)
	defer deadline.Stop()
	for c.Poll(wc[:]) == 0 {
		select {
		case <-c.Ready():
		case <-deadline.C:
			t.Fatalf("%s: no %s completion in %v", e.dev.Name(), what, e.cfg.timeout)
		}
	}
	return wc[0]
}

// none reports a completion c has now that it should not have.
func none(t *testing.T, c ib.CQ, what string) {
	t.Helper()
	var wc [1]ib.Completion
	if c.Poll(wc[:]) != 0 {
		t.Errorf("%s: %+v", what, wc[0])
	}
}

// counter returns the device counter called name and whether the device
// has one.
func counter(d ib.Device, name string) (uint64, bool) {
	for _, c := range d.Counters() {
		if c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}
