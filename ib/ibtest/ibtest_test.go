package ibtest

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// end is one side of a test: a device with a slab, its MR and two CQs.
type end struct {
	dev      *Device
	mr       ib.MR
	scq, rcq ib.CQ
}

const slabSize = 1 << 20

func newEnd(t *testing.T, f *Fabric, cfg Config) *end {
	t.Helper()
	d, err := f.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ib.NewSlab(slabSize)
	if err != nil {
		t.Fatal(err)
	}
	mr, _ := d.RegisterMemory(s)
	scq, _ := d.CreateCQ(64)
	rcq, _ := d.CreateCQ(64)
	t.Cleanup(func() { _ = d.Close(); _ = s.Close() })
	return &end{dev: d, mr: mr, scq: scq, rcq: rcq}
}

func (e *end) sge(off, n int) ib.SGE { return ib.SGE{MR: e.mr, Offset: off, Length: n} }

// put writes b into the slab at off and returns the SGE naming it.
func (e *end) put(off int, b []byte) ib.SGE {
	copy(e.mr.Slab().Bytes()[off:], b)
	return e.sge(off, len(b))
}

// qp makes a QP of type typ, moved to Init with pkey and qkey.
func (e *end) qp(t *testing.T, typ ib.QPType, pkey ib.PKey, qkey ib.QKey, srq ib.SRQ) ib.QP {
	t.Helper()
	q, err := e.dev.CreateQP(ib.QPAttr{Type: typ, SendCQ: e.scq, RecvCQ: e.rcq, SRQ: srq, MaxSend: 16, MaxRecv: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(ib.QPModify{State: ib.StateInit, PKey: pkey, QKey: qkey}); err != nil {
		t.Fatal(err)
	}
	return q
}

func udReady(t *testing.T, e *end, pkey ib.PKey, qkey ib.QKey) ib.QP {
	t.Helper()
	q := e.qp(t, ib.UD, pkey, qkey, nil)
	for _, s := range []ib.QPState{ib.StateRTR, ib.StateRTS} {
		if err := q.Modify(ib.QPModify{State: s}); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// connect makes a connected pair of type typ between a and b.
func connect(t *testing.T, typ ib.QPType, a, b *end, srqB ib.SRQ, rnrRetry uint8) (qa, qb ib.QP) {
	t.Helper()
	qa = a.qp(t, typ, ib.DefaultPKey, 0, nil)
	qb = b.qp(t, typ, ib.DefaultPKey, 0, srqB)
	for _, x := range []struct {
		q    ib.QP
		peer *end
		pqp  ib.QP
	}{{qa, b, qb}, {qb, a, qa}} {
		if err := x.q.Modify(ib.QPModify{State: ib.StateRTR, DestGID: x.peer.dev.Port().GID, DestQPN: x.pqp.Num(), PathMTU: ib.MTU4096}); err != nil {
			t.Fatal(err)
		}
		if err := x.q.Modify(ib.QPModify{State: ib.StateRTS, RNRRetry: rnrRetry}); err != nil {
			t.Fatal(err)
		}
	}
	return qa, qb
}

// wait returns the next completion of c, failing after 5 s.
func wait(t *testing.T, c ib.CQ) ib.Completion {
	t.Helper()
	var wc [1]ib.Completion
	deadline := time.After(5 * time.Second)
	for {
		if c.Poll(wc[:]) == 1 {
			return wc[0]
		}
		select {
		case <-c.Ready():
		case <-deadline:
			t.Fatal("no completion in 5 s")
		}
	}
}

// none fails if c holds a completion once d settled.
func none(t *testing.T, d *Device, c ib.CQ) {
	t.Helper()
	d.Settle()
	var wc [1]ib.Completion
	if c.Poll(wc[:]) != 0 {
		t.Fatalf("unexpected completion %+v", wc[0])
	}
}

func TestUD(t *testing.T) {
	other := ib.PKey(0x8002)
	for _, tc := range []struct {
		name     string
		qkey     ib.QKey // the receiver's
		pkey     ib.PKey // the receiver's QP's
		recvLen  int     // 0: no receive posted
		payload  int
		wantDrop string // "": delivered
	}{
		{"delivered behind a GRH", 0x0b1b, ib.DefaultPKey, 2048, 1000, ""},
		{"other Q_Key", 0x1234, ib.DefaultPKey, 2048, 1000, "rx_drop_qkey"},
		{"other partition on the QP", 0x0b1b, other, 2048, 1000, "rx_drop_pkey"},
		{"no receive buffer", 0x0b1b, ib.DefaultPKey, 0, 1000, "rx_drop_no_recv_buffer"},
		{"buffer without room for the GRH", 0x0b1b, ib.DefaultPKey, 1000, 1000, "rx_drop_too_long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFabric()
			a := newEnd(t, f, Config{})
			b := newEnd(t, f, Config{PKeys: []ib.PKey{ib.DefaultPKey, other}})
			qa := udReady(t, a, ib.DefaultPKey, 0x0b1b)
			qb := udReady(t, b, tc.pkey, tc.qkey)
			if tc.recvLen > 0 {
				if _, err := qb.PostRecv([]ib.RecvWR{{ID: 7, SGE: b.sge(0, tc.recvLen)}}); err != nil {
					t.Fatal(err)
				}
			}
			ah, _ := a.dev.CreateAH(ib.AHAttr{DestGID: b.dev.Port().GID})
			msg := bytes.Repeat([]byte{0xab}, tc.payload)
			if _, err := qa.PostSend([]ib.SendWR{{ID: 1, SGE: a.put(0, msg), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: 0x0b1b}}); err != nil {
				t.Fatal(err)
			}
			if wc := wait(t, a.scq); wc.Status != ib.WCSuccess || wc.ID != 1 || wc.Opcode != ib.WCSend {
				t.Errorf("send completion %+v, want success of 1", wc)
			}
			if tc.wantDrop != "" {
				none(t, b.dev, b.rcq)
				if b.dev.Counter(tc.wantDrop) != 1 {
					t.Errorf("%s = %d, want 1", tc.wantDrop, b.dev.Counter(tc.wantDrop))
				}
				return
			}
			wc := wait(t, b.rcq)
			if wc.ID != 7 || wc.ByteLen != uint32(ib.GRHLen+tc.payload) || wc.SrcQPN != qa.Num() || wc.SrcGID != a.dev.Port().GID || wc.PKey != ib.DefaultPKey {
				t.Errorf("receive %+v, want ID 7, %d octets from %v %v", wc, ib.GRHLen+tc.payload, a.dev.Port().GID, qa.Num())
			}
			got := b.mr.Slab().Bytes()[:wc.ByteLen]
			if got[0] != 0x60 || ib.GID(got[8:24]) != a.dev.Port().GID || !bytes.Equal(got[ib.GRHLen:], msg) {
				t.Errorf("received GRH % x and %d payload octets, want a GRH from %v and the datagram", got[:24], len(got)-ib.GRHLen, a.dev.Port().GID)
			}
		})
	}
}

func TestUDSendErrors(t *testing.T) {
	f := NewFabric()
	a := newEnd(t, f, Config{ActiveMTU: ib.MTU2048})
	b := newEnd(t, f, Config{})
	qa := udReady(t, a, ib.DefaultPKey, 1)
	ah, _ := a.dev.CreateAH(ib.AHAttr{DestGID: b.dev.Port().GID})
	foreign, _ := b.dev.CreateAH(ib.AHAttr{DestGID: a.dev.Port().GID})
	for _, tc := range []struct {
		name string
		wr   ib.SendWR
		want ib.WCStatus
	}{
		{"larger than the port MTU", ib.SendWR{SGE: a.sge(0, 2049), AH: ah}, ib.WCLocalLengthError},
		{"another device's AH", ib.SendWR{SGE: a.sge(0, 10), AH: foreign}, ib.WCLocalQPError},
		{"to no QP", ib.SendWR{SGE: a.sge(0, 10), AH: ah, RemoteQPN: 0x777}, ib.WCSuccess},
	} {
		if _, err := qa.PostSend([]ib.SendWR{tc.wr}); err != nil {
			t.Fatal(err)
		}
		if wc := wait(t, a.scq); wc.Status != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, wc.Status, tc.want)
		}
	}
	b.dev.Settle()
	if n := b.dev.Counter("rx_drop_unknown_qp"); n != 1 {
		t.Errorf("rx_drop_unknown_qp %d, want 1", n)
	}
	if _, err := qa.PostSend([]ib.SendWR{{SGE: a.sge(slabSize-1, 2), AH: ah}}); !errors.Is(err, ib.ErrBadLength) {
		t.Errorf("send outside the MR: %v, want ErrBadLength", err)
	}
}

func TestMulticast(t *testing.T) {
	f := NewFabric()
	a := newEnd(t, f, Config{})
	b := newEnd(t, f, Config{})
	mgid, _ := ib.ParseGID("ff12:401b:ffff::1")
	qa := udReady(t, a, ib.DefaultPKey, 5)
	qb := udReady(t, b, ib.DefaultPKey, 5)
	qb2 := udReady(t, b, ib.DefaultPKey, 5)
	for _, q := range []ib.QP{qb, qb2} {
		if err := b.dev.AttachMulticast(q, mgid, 0xc000); err != nil {
			t.Fatal(err)
		}
		q.PostRecv([]ib.RecvWR{{ID: uint64(q.Num()), SGE: b.sge(int(q.Num()&0xf)*4096, 4096)}})
	}
	ah, _ := a.dev.CreateAH(ib.AHAttr{DestGID: mgid})
	send := func() {
		t.Helper()
		if _, err := qa.PostSend([]ib.SendWR{{SGE: a.sge(0, 100), AH: ah, RemoteQKey: 5}}); err != nil {
			t.Fatal(err)
		}
		wait(t, a.scq)
	}
	send()
	got := map[uint64]bool{}
	for range 2 {
		got[wait(t, b.rcq).ID] = true
	}
	if !got[uint64(qb.Num())] || !got[uint64(qb2.Num())] {
		t.Errorf("receives for %v, want both members", got)
	}
	a.dev.Settle()
	if n := a.dev.Counter("rx_drop_not_member"); n != 1 {
		t.Errorf("a (no member) counted %d not_member drops, want 1", n)
	}
	for _, q := range []ib.QP{qb, qb2} {
		if err := b.dev.DetachMulticast(q, mgid); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.dev.DetachMulticast(qb, mgid); err == nil {
		t.Error("a second detach succeeded")
	}
	send()
	none(t, b.dev, b.rcq)
	if n := b.dev.Counter("rx_drop_not_member"); n != 1 {
		t.Errorf("b after detach counted %d not_member drops, want 1", n)
	}
}

func TestQPStates(t *testing.T) {
	f := NewFabric()
	a := newEnd(t, f, Config{})
	q, _ := a.dev.CreateQP(ib.QPAttr{Type: ib.RC, SendCQ: a.scq, RecvCQ: a.rcq})
	gid := a.dev.Port().GID
	for _, tc := range []struct {
		m       ib.QPModify
		wantErr bool
		want    ib.QPState
	}{
		{ib.QPModify{State: ib.StateRTR}, true, ib.StateReset},
		{ib.QPModify{State: ib.StateInit, PKey: 0x8005}, true, ib.StateReset}, // not in the table
		{ib.QPModify{State: ib.StateInit, PKey: ib.DefaultPKey}, false, ib.StateInit},
		{ib.QPModify{State: ib.StateRTS}, true, ib.StateInit},
		{ib.QPModify{State: ib.StateRTR, DestGID: gid, DestQPN: 5}, true, ib.StateInit}, // no path MTU
		{ib.QPModify{State: ib.StateRTR, DestQPN: 5, PathMTU: ib.MTU1024}, true, ib.StateInit},
		{ib.QPModify{State: ib.StateRTR, DestGID: gid, DestQPN: 5, PathMTU: ib.MTU1024}, false, ib.StateRTR},
		{ib.QPModify{State: ib.StateRTS}, false, ib.StateRTS},
		{ib.QPModify{State: ib.StateError}, false, ib.StateError},
		{ib.QPModify{State: ib.StateRTS}, true, ib.StateError},
		{ib.QPModify{State: ib.StateReset}, false, ib.StateReset},
	} {
		err := q.Modify(tc.m)
		if (err != nil) != tc.wantErr || q.State() != tc.want {
			t.Errorf("modify to %v from there: %v, state %v; want error %v, state %v", tc.m.State, err, q.State(), tc.wantErr, tc.want)
		}
	}
	if _, err := q.PostSend([]ib.SendWR{{SGE: a.sge(0, 1)}}); !errors.Is(err, ib.ErrBadState) {
		t.Errorf("send in Reset: %v, want ErrBadState", err)
	}
}

func TestConnected(t *testing.T) {
	for _, typ := range []ib.QPType{ib.RC, ib.UC} {
		t.Run(typ.String(), func(t *testing.T) {
			f := NewFabric()
			a, b := newEnd(t, f, Config{}), newEnd(t, f, Config{})
			qa, qb := connect(t, typ, a, b, nil, 7)
			msg := bytes.Repeat([]byte{1, 2, 3}, MaxMessage/3)
			qb.PostRecv([]ib.RecvWR{{ID: 9, SGE: b.sge(0, MaxMessage)}})
			if _, err := qa.PostSend([]ib.SendWR{{ID: 3, SGE: a.put(0, msg)}}); err != nil {
				t.Fatal(err)
			}
			wc := wait(t, b.rcq)
			if wc.ID != 9 || wc.Status != ib.WCSuccess || wc.QPN != qb.Num() || !bytes.Equal(b.mr.Slab().Bytes()[:wc.ByteLen], msg) {
				t.Errorf("receive %+v, want the %d-octet message on %v", wc, len(msg), qb.Num())
			}
			if wc := wait(t, a.scq); wc.ID != 3 || wc.Status != ib.WCSuccess {
				t.Errorf("send completion %+v, want success", wc)
			}
			if _, err := qa.PostSend([]ib.SendWR{{SGE: a.sge(0, MaxMessage+1)}}); err == nil {
				t.Errorf("a %d-octet message was taken", MaxMessage+1)
			}
		})
	}
}

// TestConnectedFailures: what a connected QP's sends and receives
// complete with when things go wrong.
func TestConnectedFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		typ      ib.QPType
		rnrRetry uint8
		setup    func(t *testing.T, a, b *end, qa, qb ib.QP) // after connect, before the send
		wantSend ib.WCStatus
		wantRecv func(t *testing.T, b *end, qb ib.QP)
	}{
		{name: "RC peer device gone", typ: ib.RC, setup: func(t *testing.T, a, b *end, qa, qb ib.QP) {
			b.dev.Close()
		}, wantSend: ib.WCRetryExceeded},
		{name: "RC peer QP gone", typ: ib.RC, setup: func(t *testing.T, a, b *end, qa, qb ib.QP) {
			qb.Close()
		}, wantSend: ib.WCRetryExceeded},
		{name: "RC peer in Error", typ: ib.RC, setup: func(t *testing.T, a, b *end, qa, qb ib.QP) {
			qb.Modify(ib.QPModify{State: ib.StateError})
		}, wantSend: ib.WCRetryExceeded},
		{name: "RC peer connected elsewhere", typ: ib.RC, setup: func(t *testing.T, a, b *end, qa, qb ib.QP) {
			qb.Modify(ib.QPModify{State: ib.StateReset})
			qb.Modify(ib.QPModify{State: ib.StateInit, PKey: ib.DefaultPKey})
			qb.Modify(ib.QPModify{State: ib.StateRTR, DestGID: ib.GID{0xfe, 0x80, 15: 9}, DestQPN: qa.Num(), PathMTU: ib.MTU4096})
			qb.PostRecv([]ib.RecvWR{{ID: 1, SGE: b.sge(0, 100)}})
		}, wantSend: ib.WCRetryExceeded, wantRecv: func(t *testing.T, b *end, qb ib.QP) {
			b.dev.Settle()
			if n := b.dev.Counter("rx_drop_wrong_source"); n != 2 {
				t.Errorf("rx_drop_wrong_source %d, want 2 (both messages)", n)
			}
		}},
		{name: "RC receive buffer too small", typ: ib.RC, setup: func(t *testing.T, a, b *end, qa, qb ib.QP) {
			qb.PostRecv([]ib.RecvWR{{ID: 1, SGE: b.sge(0, 10)}})
		}, wantSend: ib.WCRemoteInvalidRequest, wantRecv: func(t *testing.T, b *end, qb ib.QP) {
			if wc := wait(t, b.rcq); wc.Status != ib.WCLocalLengthError {
				t.Errorf("receive %v, want local length error", wc.Status)
			}
			if qb.State() != ib.StateError {
				t.Errorf("receiver in %v, want ERROR", qb.State())
			}
		}},
		{name: "RC no receive buffer, finite RNR retries", typ: ib.RC, rnrRetry: 0, wantSend: ib.WCRNRRetryExceeded},
		{name: "RC no receive buffer, infinite RNR retries", typ: ib.RC, rnrRetry: 7, setup: func(t *testing.T, a, b *end, qa, qb ib.QP) {
			go func() { b.dev.Settle(); qb.PostRecv([]ib.RecvWR{{ID: 4, SGE: b.sge(0, 100)}}) }()
		}, wantSend: ib.WCSuccess, wantRecv: func(t *testing.T, b *end, qb ib.QP) {
			if wc := wait(t, b.rcq); wc.ID != 4 || wc.Status != ib.WCSuccess {
				t.Errorf("receive %+v, want the message in buffer 4 once posted", wc)
			}
		}},
		{name: "UC no receive buffer", typ: ib.UC, wantSend: ib.WCSuccess, wantRecv: func(t *testing.T, b *end, qb ib.QP) {
			b.dev.Settle()
			if n := b.dev.Counter("rx_drop_no_recv_buffer"); n != 2 {
				t.Errorf("rx_drop_no_recv_buffer %d, want 2 (both messages)", n)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFabric()
			a, b := newEnd(t, f, Config{}), newEnd(t, f, Config{})
			qa, qb := connect(t, tc.typ, a, b, nil, tc.rnrRetry)
			if tc.setup != nil {
				tc.setup(t, a, b, qa, qb)
			}
			if _, err := qa.PostSend([]ib.SendWR{{ID: 1, SGE: a.sge(0, 50)}, {ID: 2, SGE: a.sge(0, 50)}}); err != nil {
				t.Fatal(err)
			}
			if wc := wait(t, a.scq); wc.ID != 1 || wc.Status != tc.wantSend {
				t.Errorf("first send %d: %v, want %v", wc.ID, wc.Status, tc.wantSend)
			}
			if tc.wantSend != ib.WCSuccess {
				if wc := wait(t, a.scq); wc.ID != 2 || wc.Status != ib.WCFlushError {
					t.Errorf("second send %d: %v, want flushed", wc.ID, wc.Status)
				}
				if qa.State() != ib.StateError {
					t.Errorf("sender in %v, want ERROR", qa.State())
				}
			}
			if tc.wantRecv != nil {
				tc.wantRecv(t, b, qb)
			}
		})
	}
}

func TestFlushOnClose(t *testing.T) {
	f := NewFabric()
	a := newEnd(t, f, Config{})
	q := udReady(t, a, ib.DefaultPKey, 1)
	q.PostRecv([]ib.RecvWR{{ID: 1, SGE: a.sge(0, 100)}, {ID: 2, SGE: a.sge(100, 100)}})
	q.Close()
	for _, id := range []uint64{1, 2} {
		if wc := wait(t, a.rcq); wc.ID != id || wc.Status != ib.WCFlushError || wc.Opcode != ib.WCRecv {
			t.Errorf("completion %+v, want receive %d flushed", wc, id)
		}
	}
}

func TestSRQ(t *testing.T) {
	f := NewFabric()
	a, b := newEnd(t, f, Config{}), newEnd(t, f, Config{})
	s, _ := b.dev.CreateSRQ(ib.SRQAttr{MaxWR: 4, Limit: 2})
	qa, qb := connect(t, ib.RC, a, b, s, 7)
	if _, err := qb.PostRecv(nil); err == nil {
		t.Error("PostRecv on a QP of an SRQ succeeded")
	}
	var wrs []ib.RecvWR
	for k := range 5 {
		wrs = append(wrs, ib.RecvWR{ID: uint64(k), SGE: b.sge(k*100, 100)})
	}
	if n, err := s.PostRecv(wrs); n != 4 || !errors.Is(err, ib.ErrQueueFull) {
		t.Errorf("posted %d of 5 on a 4-deep SRQ: %v, want 4 and ErrQueueFull", n, err)
	}
	for k := range 3 {
		qa.PostSend([]ib.SendWR{{ID: uint64(k), SGE: a.sge(0, 10)}})
		wait(t, b.rcq)
		select {
		case <-s.LimitReached():
			if k != 2 {
				t.Errorf("limit reached after %d receives with 4 posted and limit 2", k+1)
			}
		default:
			if k == 2 {
				t.Error("no limit event with 1 posted and limit 2")
			}
		}
	}
	if s.Posted() != 1 {
		t.Errorf("posted %d, want 1", s.Posted())
	}
}

func TestCQHandler(t *testing.T) {
	f := NewFabric()
	a, b := newEnd(t, f, Config{}), newEnd(t, f, Config{})
	qa, qb := connect(t, ib.RC, a, b, nil, 7)
	ran := make(chan int, 1)
	b.rcq.(ib.CQHandler).SetHandler(func() {
		var wc [4]ib.Completion
		ran <- b.rcq.Poll(wc[:])
	})
	qb.PostRecv([]ib.RecvWR{{SGE: b.sge(0, 100)}})
	qa.PostSend([]ib.SendWR{{SGE: a.sge(0, 10)}})
	select {
	case n := <-ran:
		if n != 1 {
			t.Errorf("the handler polled %d completions, want 1", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not run")
	}
	select {
	case <-b.rcq.Ready():
		t.Error("Ready fired for a completion the handler took")
	default:
	}
}

func TestMADs(t *testing.T) {
	f := NewFabric()
	a, b := newEnd(t, f, Config{}), newEnd(t, f, Config{PKeys: []ib.PKey{0x8001, ib.DefaultPKey}})
	ma, err := a.dev.MADs()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.dev.MADs(); err == nil {
		t.Error("a second MADs() succeeded")
	}
	mb, _ := b.dev.MADs()
	if err := ma.Send(ib.MADAddr{GID: b.dev.Port().GID}, make([]byte, 100)); err == nil {
		t.Error("a 100-octet MAD was sent")
	}
	mad := make([]byte, 256)
	mad[0], mad[255] = 1, 2
	if err := ma.Send(ib.MADAddr{GID: b.dev.Port().GID, QPN: ib.QP1, PKey: ib.DefaultPKey}, mad); err != nil {
		t.Fatal(err)
	}
	got := <-mb.Recv()
	if got.From != (ib.MADAddr{GID: a.dev.Port().GID, QPN: ib.QP1, PKey: ib.DefaultPKey}) || !bytes.Equal(got.Data[:], mad) {
		t.Errorf("b got a MAD from %+v, want a's from QP1", got.From)
	}
	mb.Send(ib.MADAddr{GID: a.dev.Port().GID}, mad) // the port's default P_Key, 0x8001: not a's partition
	a.dev.Settle()
	if n := a.dev.Counter("rx_drop_pkey"); n != 1 {
		t.Errorf("a counted %d P_Key drops, want 1 for a MAD of partition 0x8001", n)
	}
	if s, ok := ma.(interface{ String() string }); !ok || s.String() != "ibtest0 on an in-memory fabric" {
		t.Errorf("the MAD service names itself %v", s)
	}
	mb.Close()
	if _, open := <-mb.Recv(); open {
		t.Error("Recv still open after Close")
	}
	if _, err := b.dev.MADs(); err != nil {
		t.Errorf("MADs after the first closed: %v", err)
	}
}

// TestImpair: loss and reordering follow the seed and are counted.
func TestImpair(t *testing.T) {
	run := func(im Impair) (order []byte, f *Fabric) {
		f = NewFabric()
		a, b := newEnd(t, f, Config{}), newEnd(t, f, Config{})
		qa, qb := udReady(t, a, ib.DefaultPKey, 1), udReady(t, b, ib.DefaultPKey, 1)
		for k := range 64 {
			qb.PostRecv([]ib.RecvWR{{ID: uint64(k), SGE: b.sge(k*100, 100)}})
		}
		ah, _ := a.dev.CreateAH(ib.AHAttr{DestGID: b.dev.Port().GID})
		f.SetImpair(im)
		for k := range 50 {
			qa.PostSend([]ib.SendWR{{SGE: a.put(k, []byte{byte(k)}), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: 1}})
		}
		f.Flush()
		b.dev.Settle()
		var wc [64]ib.Completion
		n := b.rcq.Poll(wc[:])
		for _, c := range wc[:n] {
			order = append(order, b.mr.Slab().Bytes()[int(c.ID)*100+ib.GRHLen])
		}
		return order, f
	}
	count := func(f *Fabric, name string) uint64 {
		for _, c := range f.Counters() {
			if c.Name == name {
				return c.Value
			}
		}
		return 0
	}
	plain, _ := run(Impair{})
	if len(plain) != 50 {
		t.Fatalf("%d of 50 delivered without impairment", len(plain))
	}
	lossy, f := run(Impair{Drop: 0.2, Seed: 1})
	again, _ := run(Impair{Drop: 0.2, Seed: 1})
	if dropped := count(f, "impair_dropped"); int(dropped)+len(lossy) != 50 || dropped == 0 {
		t.Errorf("%d delivered and %d counted dropped, want 50 in all and some dropped", len(lossy), dropped)
	}
	if !bytes.Equal(lossy, again) {
		t.Errorf("two runs with one seed lost different datagrams: %v and %v", lossy, again)
	}
	mixed, f := run(Impair{Reorder: 0.2, Seed: 2})
	swaps := 0
	for k := 1; k < len(mixed); k++ {
		if mixed[k] < mixed[k-1] {
			swaps++
		}
	}
	// A datagram held back comes one place late: one inversion each, but
	// for the last one, which Flush delivers in its place.
	if n := count(f, "impair_reordered"); len(mixed) != 50 || swaps == 0 || uint64(swaps) != n && uint64(swaps)+1 != n {
		t.Errorf("reordered run: %d delivered, %d out of order, %d counted; want 50 and as many out of order as counted",
			len(mixed), swaps, count(f, "impair_reordered"))
	}
}

// TestNoGoroutinesAfterClose: closing its devices leaves nothing running.
func TestNoGoroutinesAfterClose(t *testing.T) {
	before := runtime.NumGoroutine()
	f := NewFabric()
	var ds []*Device
	for range 5 {
		d, err := f.Open(Config{})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	if _, err := f.Open(Config{GID: ds[0].Port().GID}); err == nil {
		t.Error("a second device with one GID opened")
	}
	for _, d := range ds {
		d.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before Open", runtime.NumGoroutine(), before)
		}
		runtime.Gosched()
	}
}

// TestMaxQPWRCapsSendQueue: a device opened with MaxQPWR grants a QP no
// deeper a send queue than that, as a verbs device's max_qp_wr, and says
// so (MaxSend); RC sends beyond the grant are refused while the first
// ones await their acknowledgement (the peer has no receive buffer).
func TestMaxQPWRCapsSendQueue(t *testing.T) {
	for _, tc := range []struct {
		maxWR, want int
	}{{0, 16}, {4, 4}, {16, 16}, {100, 16}} {
		f := NewFabric()
		a, b := newEnd(t, f, Config{MaxQPWR: tc.maxWR}), newEnd(t, f, Config{MaxQPWR: tc.maxWR})
		qa, _ := connect(t, ib.RC, a, b, nil, 7) // asks 16
		if got := qa.MaxSend(); got != tc.want {
			t.Errorf("MaxQPWR %d: MaxSend %d, want %d", tc.maxWR, got, tc.want)
		}
		wrs := make([]ib.SendWR, tc.want+1)
		for k := range wrs {
			wrs[k] = ib.SendWR{ID: uint64(k), SGE: a.sge(0, 8)}
		}
		if n, _ := qa.PostSend(wrs); n != tc.want {
			t.Errorf("MaxQPWR %d: %d of %d sends posted, want the %d granted", tc.maxWR, n, len(wrs), tc.want)
		}
	}
}
