package ibconform

import (
	"bytes"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

var udRules = []rule{
	{"UD lands behind a GRH", udBehindGRH},
	{"UD with another Q_Key does not land", udQKey},
	{"UD multicast reaches the attached QPs only", udMulticast},
}

func udBehindGRH(t *testing.T, a, b *end) {
	qa, qb := a.ud(t, 0x0b1b), b.ud(t, 0x0b1b)
	postRecv(t, qb, ib.RecvWR{ID: 1, SGE: b.sge(0, 4096)})
	ah := a.ah(t, b.gid())
	copy(a.mem(), "hello, b")
	postSend(t, qa, ib.SendWR{ID: 2, SGE: a.sge(0, 8), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: 0x0b1b})
	if wc := a.wait(t, a.scq, "send"); wc.ID != 2 || wc.Status != ib.WCSuccess || wc.Opcode != ib.WCSend || wc.QPN != qa.Num() {
		t.Errorf("send completion %+v, want ID 2, success, on QP %v", wc, qa.Num())
	}
	wc := b.wait(t, b.rcq, "receive")
	want := ib.Completion{ID: 1, Status: ib.WCSuccess, Opcode: ib.WCRecv, QPN: qb.Num(), ByteLen: ib.GRHLen + 8,
		SrcQPN: qa.Num(), SrcGID: a.gid(), PKey: ib.DefaultPKey}
	if wc.SrcLID, wc.SL, wc.GRH = 0, 0, false; wc != want { // the LID fields are the fabric's
		t.Errorf("receive completion\n got %+v\nwant %+v", wc, want)
	}
	if got := b.mem()[ib.GRHLen : ib.GRHLen+8]; string(got) != "hello, b" {
		t.Errorf("payload after the GRH %q, want %q", got, "hello, b")
	}
	checkGRH(t, b.mem()[:ib.GRHLen], a.gid(), b.gid())
}

// checkGRH checks the octets in front of a UD datagram as verbs writes
// them: a GRH (or IPv6 header) with the source GID at 8 and the
// destination at 24, or, on RoCEv2 over IPv4, the IPv4 header in the last
// 20 octets with the GIDs' IPv4 addresses.
func checkGRH(t *testing.T, grh []byte, src, dst ib.GID) {
	t.Helper()
	if ip := grh[20:]; ip[0] == 0x45 && src.IsIPv4Mapped() {
		if !bytes.Equal(ip[12:16], src[12:]) || !bytes.Equal(ip[16:20], dst[12:]) {
			t.Errorf("IPv4 header in the GRH area from %v to %v, want %v to %v", ip[12:16], ip[16:20], src, dst)
		}
		return
	}
	if grh[0]>>4 != 6 || ib.GID(grh[8:24]) != src || ib.GID(grh[24:40]) != dst {
		t.Errorf("GRH % x, want version 6 from %v to %v", grh, src, dst)
	}
}

func (e *end) ah(t *testing.T, gid ib.GID) ib.AH {
	t.Helper()
	ah, err := e.dev.CreateAH(ib.AHAttr{DestGID: gid})
	if err != nil {
		t.Fatalf("%s: CreateAH %v: %v", e.dev.Name(), gid, err)
	}
	t.Cleanup(func() { ah.Close() })
	return ah
}

// udQKey sends a datagram with the wrong Q_Key, then one with the right
// one: the receive buffer must hold the second. Moving to Error then
// flushes the receive still posted.
func udQKey(t *testing.T, a, b *end) {
	qa, qb := a.ud(t, 0x0b1b), b.ud(t, 0x1234)
	postRecv(t, qb, ib.RecvWR{ID: 1, SGE: b.sge(0, 4096)})
	ah := a.ah(t, b.gid())
	before, counts := counter(b.dev, "rx_drop_qkey")
	copy(a.mem(), "wrong Q_Key")
	copy(a.mem()[4096:], "right Q_Key")
	postSend(t, qa, ib.SendWR{ID: 1, SGE: a.sge(0, 11), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: 0x0b1b})
	postSend(t, qa, ib.SendWR{ID: 2, SGE: a.sge(4096, 11), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: 0x1234})
	a.wait(t, a.scq, "send")
	a.wait(t, a.scq, "send")
	if wc := b.wait(t, b.rcq, "receive"); wc.ID != 1 || wc.Status != ib.WCSuccess || wc.ByteLen != ib.GRHLen+11 {
		t.Errorf("receive %+v, want ID 1 with %d octets", wc, ib.GRHLen+11)
	}
	if got := string(b.mem()[ib.GRHLen : ib.GRHLen+11]); got != "right Q_Key" {
		t.Errorf("received %q: the datagram with another Q_Key landed", got)
	}
	if after, _ := counter(b.dev, "rx_drop_qkey"); counts && after <= before {
		t.Errorf("rx_drop_qkey stays %d", after)
	}
	postRecv(t, qb, ib.RecvWR{ID: 3, SGE: b.sge(0, 4096)})
	modify(t, qb, ib.QPModify{State: ib.StateError})
	if wc := b.wait(t, b.rcq, "flush"); wc.ID != 3 || wc.Status != ib.WCFlushError {
		t.Errorf("posted receive after Error: %+v, want 3 flushed", wc)
	}
}

func udMulticast(t *testing.T, a, b *end) {
	mgid, _ := ib.ParseGID("ff12:401b:ffff::77")
	qa, qb, stays := a.ud(t, 9), b.ud(t, 9), b.ud(t, 9)
	for _, q := range []ib.QP{qb, stays} {
		if err := b.dev.AttachMulticast(q, mgid, 0); err != nil {
			t.Fatalf("AttachMulticast: %v", err)
		}
	}
	t.Cleanup(func() { b.dev.DetachMulticast(stays, mgid) })
	postRecv(t, qb, ib.RecvWR{ID: 1, SGE: b.sge(0, 4096)}, ib.RecvWR{ID: 2, SGE: b.sge(4096, 4096)})
	postRecv(t, stays, ib.RecvWR{ID: 3, SGE: b.sge(8192, 4096)}, ib.RecvWR{ID: 4, SGE: b.sge(12288, 4096)})
	ah := a.ah(t, mgid)
	send := func() {
		postSend(t, qa, ib.SendWR{SGE: a.sge(0, 100), AH: ah, RemoteQPN: ib.MulticastQPN, RemoteQKey: 9})
		a.wait(t, a.scq, "multicast send")
	}
	send()
	got := map[uint64]bool{}
	for range 2 {
		wc := b.wait(t, b.rcq, "multicast receive")
		if wc.Status != ib.WCSuccess || wc.SrcQPN != qa.Num() || wc.ByteLen != ib.GRHLen+100 {
			t.Errorf("multicast receive %+v", wc)
		}
		got[wc.ID] = true
	}
	if !got[1] || !got[3] {
		t.Errorf("receives %v, want 1 and 3: both members", got)
	}
	if err := b.dev.DetachMulticast(qb, mgid); err != nil {
		t.Fatalf("DetachMulticast: %v", err)
	}
	send()
	// A provider hands a datagram to the group's members in one go: once
	// the member that stayed has it, the one that left would too.
	if wc := b.wait(t, b.rcq, "multicast receive"); wc.ID != 4 {
		t.Errorf("after detaching the first member: receive %+v, want 4 (the second member's)", wc)
	}
	none(t, b.rcq, "the detached QP received")
}
