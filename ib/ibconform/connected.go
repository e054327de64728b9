package ibconform

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

var connectedRules = []rule{
	{"MaxSend grants at least one", maxSend},
	{"RC and UC messages arrive whole and in order", messages},
	{"an SRQ feeds RC QPs and signals its limit", srqFeeds},
	{"RC fails with retry exceeded when the peer is gone", retryExceeded},
}

// Send retry settings of connected pairs. patient rides out a loaded or
// emulated machine (seven retries of a 67 ms ACK timeout); impatient gives
// up within about 8 ms, for the rule whose peer is gone.
var (
	patient   = ib.QPModify{State: ib.StateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7}
	impatient = ib.QPModify{State: ib.StateRTS, Timeout: 10, RetryCount: 1, RNRRetry: 7}
)

// connect makes a connected pair of typ whose RTS settings are rts; b's
// QP receives from srq when it is not nil.
func connect(t *testing.T, typ ib.QPType, a, b *end, rts ib.QPModify, srq ib.SRQ) (qa, qb ib.QP) {
	t.Helper()
	qa = a.qp(t, ib.QPAttr{Type: typ, MaxSend: 8, MaxRecv: 8})
	qb = b.qp(t, ib.QPAttr{Type: typ, SRQ: srq, MaxSend: 8, MaxRecv: 8})
	for _, x := range []struct {
		q, peer ib.QP
		pe      *end
	}{{qa, qb, b}, {qb, qa, a}} {
		modify(t, x.q, ib.QPModify{State: ib.StateInit, PKey: ib.DefaultPKey},
			ib.QPModify{State: ib.StateRTR, DestGID: x.pe.gid(), DestQPN: x.peer.Num(), PathMTU: ib.MTU1024, MinRNRTmr: 1}, rts)
	}
	return qa, qb
}

func maxSend(t *testing.T, a, _ *end) {
	for _, asked := range []int{0, 1, 8, 1024} {
		q, err := a.dev.CreateQP(ib.QPAttr{Type: ib.RC, SendCQ: a.scq, RecvCQ: a.rcq, MaxSend: asked, MaxRecv: 1})
		if err != nil {
			t.Fatalf("CreateQP with MaxSend %d: %v", asked, err)
		}
		// A device may grant fewer than a large depth (verbs: its
		// max_qp_wr), never fewer than a small one, never none.
		if got := q.MaxSend(); got < 1 || asked <= 8 && got < asked {
			t.Errorf("asked %d: MaxSend %d", asked, got)
		}
		q.Close()
	}
}

// messages sends one large message, then three small ones in one post,
// on RC and on UC: each arrives whole, the three in order, and every
// send and receive completes with its ID.
func messages(t *testing.T, a, b *end) {
	for _, typ := range []ib.QPType{ib.RC, ib.UC} {
		qa, qb := connect(t, typ, a, b, patient, nil)
		big := bytes.Repeat([]byte(typ.String()), 30000)
		copy(a.mem(), big)
		postRecv(t, qb, ib.RecvWR{ID: 5, SGE: b.sge(0, 65536)})
		postSend(t, qa, ib.SendWR{ID: 6, SGE: a.sge(0, len(big))})
		wc := b.wait(t, b.rcq, typ.String()+" receive")
		if wc.ID != 5 || wc.Status != ib.WCSuccess || wc.Opcode != ib.WCRecv || wc.QPN != qb.Num() ||
			!bytes.Equal(b.mem()[:min(int(wc.ByteLen), slabSize)], big) {
			t.Errorf("%v receive %+v, want ID 5 with the %d-octet message", typ, wc, len(big))
		}
		if wc := a.wait(t, a.scq, typ.String()+" send"); wc.ID != 6 || wc.Status != ib.WCSuccess || wc.QPN != qa.Num() {
			t.Errorf("%v send %+v, want ID 6, success", typ, wc)
		}
		inOrder(t, typ, qa, qb, a, b)
	}
}

// inOrder sends three messages of different lengths in one post: they
// complete in order on both sides.
func inOrder(t *testing.T, typ ib.QPType, qa, qb ib.QP, a, b *end) {
	t.Helper()
	var sends []ib.SendWR
	for k := range 3 {
		msg := fmt.Sprintf("%v message %d%s", typ, k, bytes.Repeat([]byte{'.'}, 100*k))
		copy(a.mem()[k*4096:], msg)
		postRecv(t, qb, ib.RecvWR{ID: uint64(10 + k), SGE: b.sge(k*4096, 4096)})
		sends = append(sends, ib.SendWR{ID: uint64(20 + k), SGE: a.sge(k*4096, len(msg))})
	}
	postSend(t, qa, sends...)
	for k, s := range sends {
		wc := b.wait(t, b.rcq, typ.String()+" receive")
		off := int(wc.ID-10) * 4096
		if wc.ID != uint64(10+k) || wc.Status != ib.WCSuccess || int(wc.ByteLen) != s.SGE.Length || off < 0 || off >= slabSize ||
			!bytes.Equal(b.mem()[off:off+s.SGE.Length], a.mem()[k*4096:k*4096+s.SGE.Length]) {
			t.Errorf("%v: receive %d is %+v, want ID %d with %d octets", typ, k, wc, 10+k, s.SGE.Length)
		}
	}
	for k := range sends {
		if wc := a.wait(t, a.scq, typ.String()+" send"); wc.ID != uint64(20+k) || wc.Status != ib.WCSuccess {
			t.Errorf("%v: send completion %d is %+v, want ID %d", typ, k, wc, 20+k)
		}
	}
}

func srqFeeds(t *testing.T, a, b *end) {
	srq, err := b.dev.CreateSRQ(ib.SRQAttr{MaxWR: 8, Limit: 2})
	if err != nil {
		t.Fatalf("CreateSRQ: %v", err)
	}
	t.Cleanup(func() { srq.Close() })
	qa, qb := connect(t, ib.RC, a, b, patient, srq)
	postRecv(t, srq, ib.RecvWR{ID: 1, SGE: b.sge(0, 4096)}, ib.RecvWR{ID: 2, SGE: b.sge(4096, 4096)},
		ib.RecvWR{ID: 3, SGE: b.sge(8192, 4096)})
	if n := srq.Posted(); n != 3 {
		t.Errorf("Posted %d, want 3", n)
	}
	copy(a.mem(), "through the SRQ")
	postSend(t, qa, ib.SendWR{ID: 7, SGE: a.sge(0, 15)}, ib.SendWR{ID: 8, SGE: a.sge(0, 15)})
	for range 2 {
		if wc := b.wait(t, b.rcq, "receive"); wc.Status != ib.WCSuccess || wc.QPN != qb.Num() || wc.ByteLen != 15 || wc.ID < 1 || wc.ID > 3 {
			t.Errorf("receive %+v, want one of the SRQ's buffers on QP %v", wc, qb.Num())
		}
	}
	a.wait(t, a.scq, "send")
	a.wait(t, a.scq, "send")
	if n := srq.Posted(); n != 1 {
		t.Errorf("Posted %d after two receives, want 1", n)
	}
	select {
	case <-srq.LimitReached():
	case <-timeAfter(b.cfg.timeout):
		t.Errorf("one receive posted, limit 2: LimitReached did not fire in %v", b.cfg.timeout)
	}
}

// retryExceeded closes the peer's QP: the first send fails with retry
// exceeded, the second flushes, and the QP is in Error.
func retryExceeded(t *testing.T, a, b *end) {
	qa, qb := connect(t, ib.RC, a, b, impatient, nil)
	qb.Close()
	postSend(t, qa, ib.SendWR{ID: 1, SGE: a.sge(0, 100)}, ib.SendWR{ID: 2, SGE: a.sge(0, 100)})
	if wc := a.wait(t, a.scq, "send"); wc.ID != 1 || wc.Status != ib.WCRetryExceeded {
		t.Errorf("first send %+v, want retry exceeded", wc)
	}
	if wc := a.wait(t, a.scq, "send"); wc.ID != 2 || wc.Status != ib.WCFlushError {
		t.Errorf("second send %+v, want flushed", wc)
	}
	if st := qa.State(); st != ib.StateError {
		t.Errorf("sender in %v, want ERROR", st)
	}
}
