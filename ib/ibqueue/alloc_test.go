package ibqueue

import (
	"sync/atomic"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// The per-packet operations allocate nothing: a completion pushed and
// polled, a receive posted and taken, a MAD delivered and read.
func TestQueuesDoNotAllocate(t *testing.T) {
	var overruns atomic.Uint64
	c := NewCQ(4, &overruns)
	wc := make([]ib.Completion, 4)
	slab, err := ib.NewSlab(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer slab.Close()
	wrs := []ib.RecvWR{{ID: 1, SGE: ib.SGE{MR: NewMR(slab), Length: 4096}}}
	q := NewRecvQueue(4, 0, true)
	var mads MADs
	mq, _ := mads.Open(4, true)
	mad := make([]byte, MADLen)
	n := testing.AllocsPerRun(100, func() {
		c.Push(&ib.Completion{ID: 7, Status: ib.WCSuccess})
		c.Signal()
		c.Poll(wc)
		q.PostRecv(wrs)
		q.Take()
		mads.Deliver(ib.MADAddr{QPN: ib.QP1}, mad)
		<-mq.Recv()
	})
	if n != 0 {
		t.Errorf("%v allocations per packet, want 0", n)
	}
	if overruns.Load() != 0 {
		t.Errorf("%d overruns", overruns.Load())
	}
}

// A full or closed CQ loses the completion and counts it.
func TestCQOverrun(t *testing.T) {
	var overruns atomic.Uint64
	c := NewCQ(1, &overruns)
	c.Push(&ib.Completion{ID: 1})
	c.Push(&ib.Completion{ID: 2})
	c.Close()
	c.Push(&ib.Completion{ID: 3})
	wc := make([]ib.Completion, 2)
	if n := c.Poll(wc); n != 1 || wc[0].ID != 1 || overruns.Load() != 2 {
		t.Errorf("polled %d (%+v), %d overruns; want 1 completion and 2 overruns", n, wc[0], overruns.Load())
	}
}
