//go:build rdma

package rdmacm

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/verbs"
)

// The service tests need two RDMA devices on the same link (soft-RoCE rxe0
// and rxe1 on the ends of a veth pair in the test bed), named by the same
// variable as the verbs tests, port 1 each, and the kernel's rdma_ucm.
const devicesEnv = "IPOIBD_VERBS_DEVICES"

const (
	slotSize = 72 << 10 // a 64 KiB message
	numSlots = 24
	waitFor  = 20 * time.Second // generous: the test bed runs under TCG
)

// end is one device, opened through librdmacm as ipoibd --cm kernel opens
// it, with a registered slab and a pair of CQs.
type end struct {
	dev      ib.Device
	slab     *ib.Slab
	mr       ib.MR
	scq, rcq ib.CQ
}

func openPair(t *testing.T) (a, b *end) {
	t.Helper()
	names := strings.Split(os.Getenv(devicesEnv), ",")
	if len(names) != 2 || names[0] == "" || names[1] == "" {
		t.Skipf("set %s=rxe0,rxe1 (two RDMA devices on the same link, port 1, rdma_ucm loaded) to run the kernel CM service tests", devicesEnv)
	}
	return openEnd(t, names[0]), openEnd(t, names[1])
}

func openEnd(t *testing.T, name string) *end {
	t.Helper()
	d, err := verbs.Open(verbs.Config{Device: name, Port: 1, GIDIndex: -1})
	if err != nil {
		t.Fatalf("verbs.Open(%s): %v", name, err)
	}
	e := &end{dev: d}
	t.Cleanup(func() {
		if err := e.dev.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
		if e.slab != nil {
			e.slab.Close()
		}
	})
	if e.slab, err = ib.NewSlab(slotSize * numSlots); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = d.RegisterMemory(e.slab); err != nil {
		t.Fatal(err)
	}
	if e.scq, err = d.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	if e.rcq, err = d.CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *end) sge(slot, n int) ib.SGE { return ib.SGE{MR: e.mr, Offset: slot * slotSize, Length: n} }
func (e *end) buf(slot int) []byte    { return e.slab.Bytes()[slot*slotSize : (slot+1)*slotSize] }
func (e *end) port() ib.PortAttr      { return e.dev.Port() }

// udQP makes a UD QP in RTS: its number is the node's link address.
func (e *end) udQP(t *testing.T) ib.QP {
	t.Helper()
	q, err := e.dev.CreateQP(ib.QPAttr{Type: ib.UD, SendCQ: e.scq, RecvCQ: e.rcq, MaxSend: 64, MaxRecv: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	for _, m := range []ib.QPModify{
		{State: ib.StateInit, PKey: e.port().PKeys[0], QKey: ib.DefaultIPoIBQKey},
		{State: ib.StateRTR},
		{State: ib.StateRTS, SendPSN: 1},
	} {
		if err := q.Modify(m); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// one returns the next completion of cq, waiting on Ready between polls.
func one(t *testing.T, cq ib.CQ, what string) ib.Completion {
	t.Helper()
	var wc [1]ib.Completion
	deadline := time.After(waitFor)
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		select {
		case <-cq.Ready():
		case <-deadline:
			t.Fatalf("no %s completion within %v", what, waitFor)
		}
	}
}

func counter(cs []ib.Counter, name string) uint64 {
	for _, c := range cs {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}
