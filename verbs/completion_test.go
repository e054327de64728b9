package verbs

import (
	"sync/atomic"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// post allocates an entry the way the posting paths do.
func post(t *testing.T, tab *wrTable, id uint64, buf []byte) uint64 {
	t.Helper()
	tab.mu.Lock()
	defer tab.mu.Unlock()
	wrid, ok := tab.allocLocked(id, buf)
	if !ok {
		t.Fatal("table full")
	}
	tab.stats.posted.Add(1)
	return wrid
}

func TestComplete(t *testing.T) {
	var r registry
	pkeys := []ib.PKey{0xffff, 0x8001}
	var udPKey atomic.Uint32
	udPKey.Store(0xffff)
	ud := newWRTable(8, wrOwner{recv: true, ud: true, qpn: 0x11, pkey: &udPKey})
	send := newWRTable(8, wrOwner{qpn: 0x11})
	srq := newWRTable(8, wrOwner{recv: true})
	for _, tab := range []*wrTable{ud, send, srq} {
		if err := r.add(tab); err != nil {
			t.Fatal(err)
		}
	}
	peer := ib.GID{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 2}
	dgram := append(append(make([]byte, 20), ipv4Header([4]byte{192, 0, 2, 2}, [4]byte{192, 0, 2, 1})...), "hello"...)

	for _, c := range []struct {
		name string
		tab  *wrTable
		id   uint64
		buf  []byte
		raw  rawWC
		want ib.Completion
	}{
		{"UD receive", ud, 1, dgram,
			rawWC{status: wcSuccess, byteLen: 45, qpNum: 0x11, srcQP: 0x22, pkeyIndex: 7, grh: true},
			ib.Completion{ID: 1, Status: ib.WCSuccess, Opcode: ib.WCRecv, QPN: 0x11, ByteLen: 45, SrcQPN: 0x22, SrcGID: peer, PKey: 0xffff}},
		{"UD receive without a GRH on InfiniBand: the source LID and SL", ud, 7, dgram,
			rawWC{status: wcSuccess, byteLen: 45, qpNum: 0x11, srcQP: 0x22, pkeyIndex: 7, slid: 0x1234, sl: 5},
			ib.Completion{ID: 7, Status: ib.WCSuccess, Opcode: ib.WCRecv, QPN: 0x11, ByteLen: 45, SrcQPN: 0x22, PKey: 0xffff, SrcLID: 0x1234, SL: 5}},
		{"send retry exceeded: opcode and length are not valid", send, 2, nil,
			rawWC{status: wcRetryExcErr, byteLen: 999, qpNum: 0x11, srcQP: 0x33},
			ib.Completion{ID: 2, Status: ib.WCRetryExceeded, Opcode: ib.WCSend, QPN: 0x11}},
		{"RC receive through an SRQ", srq, 3, make([]byte, 64),
			rawWC{status: wcSuccess, byteLen: 64, qpNum: 0x44, srcQP: 0x55},
			ib.Completion{ID: 3, Status: ib.WCSuccess, Opcode: ib.WCRecv, QPN: 0x44, ByteLen: 64}},
		{"UD receive through an SRQ: P_Key by index", srq, 4, dgram,
			rawWC{status: wcSuccess, byteLen: 45, qpNum: 0x66, srcQP: 0x77, pkeyIndex: 1, grh: true},
			ib.Completion{ID: 4, Status: ib.WCSuccess, Opcode: ib.WCRecv, QPN: 0x66, ByteLen: 45, SrcQPN: 0x77, SrcGID: peer, PKey: 0x8001}},
		{"flushed receive", ud, 5, dgram,
			rawWC{status: wcWRFlushErr, byteLen: 45, qpNum: 0x11, grh: true},
			ib.Completion{ID: 5, Status: ib.WCFlushError, Opcode: ib.WCRecv, QPN: 0x11}},
	} {
		c.raw.wrID = post(t, c.tab, c.id, c.buf)
		var got ib.Completion
		if !r.complete(&c.raw, pkeys, &got) {
			t.Errorf("%s: taken as stale", c.name)
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
		if r.complete(&c.raw, pkeys, &got) {
			t.Errorf("%s: completed twice", c.name)
		}
	}

	// A completion still in the CQ when its QP closed.
	late := rawWC{wrID: post(t, send, 6, nil), status: wcWRFlushErr}
	send.mu.Lock()
	var flushed []ib.Completion
	send.retireLocked(func(e wrEntry) { flushed = append(flushed, send.flushCompletion(e)) })
	send.mu.Unlock()
	r.remove(send)
	if want := (ib.Completion{ID: 6, Status: ib.WCFlushError, Opcode: ib.WCSend, QPN: 0x11}); len(flushed) != 1 || flushed[0] != want {
		t.Errorf("retire flushed %+v, want %+v", flushed, want)
	}
	var got ib.Completion
	if r.complete(&late, pkeys, &got) {
		t.Error("a completion of a retired table was delivered again")
	}

	wantCounters := map[*wrTable][]ib.Counter{
		ud:   {{Name: "x_posted", Value: 3}, {Name: "x_completed", Value: 3}, {Name: "x_errors", Value: 0}, {Name: "x_flushed", Value: 1}},
		send: {{Name: "x_posted", Value: 2}, {Name: "x_completed", Value: 2}, {Name: "x_errors", Value: 1}, {Name: "x_flushed", Value: 1}},
		srq:  {{Name: "x_posted", Value: 2}, {Name: "x_completed", Value: 2}, {Name: "x_errors", Value: 0}, {Name: "x_flushed", Value: 0}},
	}
	for tab, want := range wantCounters {
		got := tab.stats.counters("x_")
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("queue of QP %v: counters %v, want %v", tab.qpn, got, want)
				break
			}
		}
	}
}

// A UD QP's own P_Key wins over the index verbs leaves undefined; before
// INIT (no P_Key yet) the index is all there is.
func TestRecvPKey(t *testing.T) {
	pkeys := []ib.PKey{0xffff, 0x8001}
	var p atomic.Uint32
	tab := newWRTable(1, wrOwner{recv: true, ud: true, pkey: &p})
	if got := tab.recvPKey(1, pkeys); got != 0x8001 {
		t.Errorf("without a QP P_Key: %v", got)
	}
	p.Store(0xffff)
	if got := tab.recvPKey(1, pkeys); got != 0xffff {
		t.Errorf("with the QP's P_Key: %v", got)
	}
	if got := newWRTable(1, wrOwner{recv: true}).recvPKey(9, pkeys); got != 0 {
		t.Errorf("index outside the table: %v", got)
	}
}
