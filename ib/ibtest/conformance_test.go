package ibtest_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibtest"
	"github.com/ipoibd/ipoibd/softib"
)

// TestConformance runs one scenario on ibtest and on softib (over UDP on
// 127.0.0.x, which needs no root) and checks that both behave as ipoib
// expects of a provider: UD with its GRH prefix and Q_Key check,
// multicast attach and detach, RC and UC messages and their completions,
// RC retry exceeded once the peer is gone, flushes, and QP1 MADs.
func TestConformance(t *testing.T) {
	for _, p := range []struct {
		name string
		open func(t *testing.T) (a, b ib.Device)
	}{
		{"ibtest", func(t *testing.T) (a, b ib.Device) {
			f := ibtest.NewFabric()
			da, err := f.Open(ibtest.Config{})
			if err != nil {
				t.Fatal(err)
			}
			db, err := f.Open(ibtest.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return da, db
		}},
		{"softib", func(t *testing.T) (a, b ib.Device) {
			// A port of this process's own: tests of other packages run
			// softib on 127.0.0.x at the same time.
			port := uint16(30000 + os.Getpid()%20000)
			var ds [2]ib.Device
			for k := range ds {
				d, err := softib.Open(softib.Config{Addr: netip.AddrFrom4([4]byte{127, 0, 0, byte(21 + k)}), Port: port})
				if err != nil {
					if k > 0 {
						ds[0].Close()
					}
					t.Skipf("softib cannot open on 127.0.0.%d:%d here: %v", 21+k, port, err)
				}
				ds[k] = d
			}
			return ds[0], ds[1]
		}},
	} {
		t.Run(p.name, func(t *testing.T) {
			a, b := p.open(t)
			t.Cleanup(func() { a.Close(); b.Close() })
			for _, s := range scenario {
				t.Run(s.name, func(t *testing.T) { s.run(t, newEnd(t, a), newEnd(t, b)) })
			}
		})
	}
}

// end is one device of the scenario with a slab, its MR and two CQs of
// one step's own.
type end struct {
	dev      ib.Device
	mr       ib.MR
	scq, rcq ib.CQ
}

func newEnd(t *testing.T, d ib.Device) *end {
	t.Helper()
	s, err := ib.NewSlab(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := d.RegisterMemory(s)
	if err != nil {
		t.Fatal(err)
	}
	scq, _ := d.CreateCQ(64)
	rcq, _ := d.CreateCQ(64)
	t.Cleanup(func() { scq.Close(); rcq.Close(); mr.Close(); s.Close() })
	return &end{dev: d, mr: mr, scq: scq, rcq: rcq}
}

func (e *end) sge(off, n int) ib.SGE { return ib.SGE{MR: e.mr, Offset: off, Length: n} }
func (e *end) mem() []byte           { return e.mr.Slab().Bytes() }

func (e *end) ud(t *testing.T, qkey ib.QKey) ib.QP {
	t.Helper()
	q, err := e.dev.CreateQP(ib.QPAttr{Type: ib.UD, SendCQ: e.scq, RecvCQ: e.rcq, MaxSend: 8, MaxRecv: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	for _, m := range []ib.QPModify{{State: ib.StateInit, PKey: ib.DefaultPKey, QKey: qkey}, {State: ib.StateRTR}, {State: ib.StateRTS}} {
		if err := q.Modify(m); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// Send retry settings of connect's pairs. patient rides out a loaded
// machine (seven retries of a 67 ms ACK timeout): with one retry of 4 ms
// a GC pause or a busy CPU between the last packet and its ACK failed a
// 60,000-octet RC send now and then. impatient gives up within about
// 8 ms, for the scenario whose peer is gone.
var (
	patient   = ib.QPModify{State: ib.StateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7}
	impatient = ib.QPModify{State: ib.StateRTS, Timeout: 10, RetryCount: 1, RNRRetry: 7}
)

// connect makes a connected pair of typ whose RTS settings are rts.
func connect(t *testing.T, typ ib.QPType, a, b *end, rts ib.QPModify) (qa, qb ib.QP) {
	t.Helper()
	mk := func(e *end) ib.QP {
		q, err := e.dev.CreateQP(ib.QPAttr{Type: typ, SendCQ: e.scq, RecvCQ: e.rcq, MaxSend: 8, MaxRecv: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		if err := q.Modify(ib.QPModify{State: ib.StateInit, PKey: ib.DefaultPKey}); err != nil {
			t.Fatal(err)
		}
		return q
	}
	qa, qb = mk(a), mk(b)
	for _, x := range []struct {
		q, peer ib.QP
		pe      *end
	}{{qa, qb, b}, {qb, qa, a}} {
		if err := x.q.Modify(ib.QPModify{State: ib.StateRTR, DestGID: x.pe.dev.Port().GID, DestQPN: x.peer.Num(), PathMTU: ib.MTU1024}); err != nil {
			t.Fatal(err)
		}
		if err := x.q.Modify(rts); err != nil {
			t.Fatal(err)
		}
	}
	return qa, qb
}

func wait(t *testing.T, c ib.CQ) ib.Completion {
	t.Helper()
	var wc [1]ib.Completion
	deadline := time.After(10 * time.Second)
	for c.Poll(wc[:]) == 0 {
		select {
		case <-c.Ready():
		case <-deadline:
			t.Fatal("no completion in 10 s")
		}
	}
	return wc[0]
}

func counter(d ib.Device, name string) uint64 {
	for _, c := range d.Counters() {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// waitCounter waits until d's counter name exceeds before.
func waitCounter(t *testing.T, d ib.Device, name string, before uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); counter(d, name) <= before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s stays %d", name, before)
		}
	}
}

var scenario = []struct {
	name string
	run  func(t *testing.T, a, b *end)
}{
	{"UD behind a GRH", func(t *testing.T, a, b *end) {
		qa, qb := a.ud(t, 0x0b1b), b.ud(t, 0x0b1b)
		qb.PostRecv([]ib.RecvWR{{ID: 1, SGE: b.sge(0, 4096)}})
		ah, _ := a.dev.CreateAH(ib.AHAttr{DestGID: b.dev.Port().GID})
		copy(a.mem(), "hello, b")
		qa.PostSend([]ib.SendWR{{ID: 2, SGE: a.sge(0, 8), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: 0x0b1b}})
		if wc := wait(t, a.scq); wc.ID != 2 || wc.Status != ib.WCSuccess {
			t.Errorf("send %+v", wc)
		}
		wc := wait(t, b.rcq)
		if wc.ID != 1 || wc.ByteLen != ib.GRHLen+8 || wc.SrcQPN != qa.Num() || wc.SrcGID != a.dev.Port().GID || wc.PKey != ib.DefaultPKey {
			t.Errorf("receive %+v, want 1 with %d octets from %v %v", wc, ib.GRHLen+8, a.dev.Port().GID, qa.Num())
		}
		grh := b.mem()[:ib.GRHLen]
		if ib.GID(grh[8:24]) != a.dev.Port().GID || ib.GID(grh[24:40]) != b.dev.Port().GID || string(b.mem()[ib.GRHLen:ib.GRHLen+8]) != "hello, b" {
			t.Errorf("GRH % x and payload %q", grh, b.mem()[ib.GRHLen:ib.GRHLen+8])
		}
	}},
	{"UD with another Q_Key is dropped", func(t *testing.T, a, b *end) {
		qa, qb := a.ud(t, 0x0b1b), b.ud(t, 0x1234)
		qb.PostRecv([]ib.RecvWR{{ID: 1, SGE: b.sge(0, 4096)}})
		ah, _ := a.dev.CreateAH(ib.AHAttr{DestGID: b.dev.Port().GID})
		before := counter(b.dev, "rx_drop_qkey")
		qa.PostSend([]ib.SendWR{{SGE: a.sge(0, 8), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: 0x0b1b}})
		wait(t, a.scq)
		waitCounter(t, b.dev, "rx_drop_qkey", before)
		if n := b.rcq.Poll(make([]ib.Completion, 1)); n != 0 {
			t.Error("a datagram with another Q_Key was received")
		}
		qb.Modify(ib.QPModify{State: ib.StateError})
		if wc := wait(t, b.rcq); wc.ID != 1 || wc.Status != ib.WCFlushError {
			t.Errorf("posted receive after Error: %+v, want flushed", wc)
		}
	}},
	{"UD multicast attach and detach", func(t *testing.T, a, b *end) {
		mgid, _ := ib.ParseGID("ff12:401b:ffff::77")
		qa, qb, stays := a.ud(t, 9), b.ud(t, 9), b.ud(t, 9)
		for _, q := range []ib.QP{qb, stays} {
			if err := b.dev.AttachMulticast(q, mgid, 0); err != nil {
				t.Fatal(err)
			}
		}
		qb.PostRecv([]ib.RecvWR{{ID: 1, SGE: b.sge(0, 4096)}, {ID: 2, SGE: b.sge(4096, 4096)}})
		stays.PostRecv([]ib.RecvWR{{ID: 3, SGE: b.sge(8192, 4096)}, {ID: 4, SGE: b.sge(12288, 4096)}})
		ah, _ := a.dev.CreateAH(ib.AHAttr{DestGID: mgid})
		send := func() {
			qa.PostSend([]ib.SendWR{{SGE: a.sge(0, 100), AH: ah, RemoteQPN: ib.MulticastQPN, RemoteQKey: 9}})
			wait(t, a.scq)
		}
		send()
		got := map[uint64]bool{}
		for range 2 {
			wc := wait(t, b.rcq)
			if wc.SrcQPN != qa.Num() || wc.ByteLen != ib.GRHLen+100 {
				t.Errorf("multicast receive %+v", wc)
			}
			got[wc.ID] = true
		}
		if !got[1] || !got[3] {
			t.Errorf("receives %v, want 1 and 3: both members", got)
		}
		if err := b.dev.DetachMulticast(qb, mgid); err != nil {
			t.Fatal(err)
		}
		send()
		// Both providers hand a datagram to the group's members in one go:
		// once the member that stayed has it, the one that left would too.
		if wc := wait(t, b.rcq); wc.ID != 4 {
			t.Errorf("after detaching the first member: receive %d, want 4 (the second member's)", wc.ID)
		}
		if n := b.rcq.Poll(make([]ib.Completion, 1)); n != 0 {
			t.Error("the detached QP received")
		}
	}},
	{"MaxSend is the send queue depth granted", func(t *testing.T, a, b *end) {
		// Neither fake device caps the depth: as asked, at least one.
		for _, asked := range []int{0, 1, 8, 1024} {
			q, err := a.dev.CreateQP(ib.QPAttr{Type: ib.RC, SendCQ: a.scq, RecvCQ: a.rcq, MaxSend: asked, MaxRecv: 1})
			if err != nil {
				t.Fatal(err)
			}
			if got := q.MaxSend(); got != max(asked, 1) {
				t.Errorf("asked %d: MaxSend %d, want %d", asked, got, max(asked, 1))
			}
			q.Close()
		}
	}},
	{"RC and UC messages", func(t *testing.T, a, b *end) {
		for _, typ := range []ib.QPType{ib.RC, ib.UC} {
			qa, qb := connect(t, typ, a, b, patient)
			msg := bytes.Repeat([]byte(typ.String()), 30000)
			copy(a.mem(), msg)
			qb.PostRecv([]ib.RecvWR{{ID: 5, SGE: b.sge(0, 65536)}})
			qa.PostSend([]ib.SendWR{{ID: 6, SGE: a.sge(0, len(msg))}})
			wc := wait(t, b.rcq)
			if wc.ID != 5 || wc.Status != ib.WCSuccess || wc.QPN != qb.Num() || !bytes.Equal(b.mem()[:wc.ByteLen], msg) {
				t.Errorf("%v receive %+v, want the %d-octet message", typ, wc, len(msg))
			}
			if wc := wait(t, a.scq); wc.ID != 6 || wc.Status != ib.WCSuccess {
				t.Errorf("%v send %+v, want success", typ, wc)
			}
		}
	}},
	{"RC retry exceeded when the peer is gone", func(t *testing.T, a, b *end) {
		qa, qb := connect(t, ib.RC, a, b, impatient)
		qb.Close()
		qa.PostSend([]ib.SendWR{{ID: 1, SGE: a.sge(0, 100)}, {ID: 2, SGE: a.sge(0, 100)}})
		if wc := wait(t, a.scq); wc.ID != 1 || wc.Status != ib.WCRetryExceeded {
			t.Errorf("first send %+v, want retry exceeded", wc)
		}
		if wc := wait(t, a.scq); wc.ID != 2 || wc.Status != ib.WCFlushError {
			t.Errorf("second send %+v, want flushed", wc)
		}
		if qa.State() != ib.StateError {
			t.Errorf("sender in %v, want ERROR", qa.State())
		}
	}},
	{"QP1 MADs", func(t *testing.T, a, b *end) {
		ma, err := a.dev.MADs()
		if err != nil {
			t.Fatal(err)
		}
		defer ma.Close()
		mb, err := b.dev.MADs()
		if err != nil {
			t.Fatal(err)
		}
		defer mb.Close()
		mad := make([]byte, 256)
		copy(mad, "CM REQ")
		if err := ma.Send(ib.MADAddr{GID: b.dev.Port().GID, QPN: ib.QP1, PKey: ib.DefaultPKey}, mad); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-mb.Recv():
			if got.From != (ib.MADAddr{GID: a.dev.Port().GID, QPN: ib.QP1, PKey: ib.DefaultPKey}) || !bytes.Equal(got.Data[:], mad) {
				t.Errorf("MAD from %+v", got.From)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no MAD in 10 s")
		}
		if _, ok := ma.(fmt.Stringer); !ok {
			t.Error("the MAD service does not name its transport")
		}
	}},
}
