package softib

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// host is one test adapter with its memory, CQs and a slot allocator.
type host struct {
	t    testing.TB
	dev  *Device
	slab *ib.Slab
	mr   ib.MR
	scq  ib.CQ
	rcq  ib.CQ
}

const (
	slotSize = 65536 + ib.GRHLen
	numSlots = 256
)

func newHost(t testing.TB, addr string, port uint16, pkeys ...ib.PKey) *host {
	t.Helper()
	dev, err := Open(Config{Addr: netip.MustParseAddr(addr), Port: port, PKeys: pkeys})
	if err != nil {
		t.Fatal(err)
	}
	slab, err := ib.NewSlab(slotSize * numSlots)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := dev.RegisterMemory(slab)
	if err != nil {
		t.Fatal(err)
	}
	scq, _ := dev.CreateCQ(4096)
	rcq, _ := dev.CreateCQ(4096)
	h := &host{t: t, dev: dev, slab: slab, mr: mr, scq: scq, rcq: rcq}
	t.Cleanup(func() {
		dev.Close()
		slab.Close()
	})
	return h
}

func (h *host) slot(i int, n int) ib.SGE {
	return ib.SGE{MR: h.mr, Offset: (i % numSlots) * slotSize, Length: n}
}

func (h *host) bytes(s ib.SGE) []byte { b, _ := s.Bytes(); return b }

// connect makes a connected pair of QPs of type t between a and b.
func connect(t testing.TB, typ ib.QPType, a, b *host, retry, rnr uint8) (ib.QP, ib.QP) {
	t.Helper()
	mk := func(h *host) ib.QP {
		q, err := h.dev.CreateQP(ib.QPAttr{Type: typ, SendCQ: h.scq, RecvCQ: h.rcq, MaxSend: 512, MaxRecv: 512})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Modify(ib.QPModify{State: ib.StateInit, PKey: ib.DefaultPKey}); err != nil {
			t.Fatal(err)
		}
		return q
	}
	qa, qb := mk(a), mk(b)
	up := func(q ib.QP, peer *host, pq ib.QP, rpsn, spsn uint32) {
		if err := q.Modify(ib.QPModify{State: ib.StateRTR, DestGID: peer.dev.Port().GID, DestQPN: pq.Num(), PathMTU: ib.MTU4096, RecvPSN: rpsn, MinRNRTmr: 1}); err != nil {
			t.Fatal(err)
		}
		if err := q.Modify(ib.QPModify{State: ib.StateRTS, SendPSN: spsn, Timeout: 14, RetryCount: retry, RNRRetry: rnr}); err != nil {
			t.Fatal(err)
		}
	}
	up(qa, b, qb, 0x100, 0xfffff0) // PSNs that wrap during the test
	up(qb, a, qa, 0xfffff0, 0x100)
	return qa, qb
}

// poll waits for n completions on c.
func poll(t *testing.T, c ib.CQ, n int, timeout time.Duration) []ib.Completion {
	t.Helper()
	out := make([]ib.Completion, 0, n)
	buf := make([]ib.Completion, 64)
	deadline := time.After(timeout)
	for len(out) < n {
		k := c.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k > 0 {
			continue
		}
		select {
		case <-c.Ready():
		case <-deadline:
			t.Fatalf("got %d of %d completions", len(out), n)
		}
	}
	return out
}

// pollFor returns the completions c has within d, none if none came.
func pollFor(c ib.CQ, d time.Duration) []ib.Completion {
	buf := make([]ib.Completion, 64)
	deadline := time.After(d)
	for {
		if k := c.Poll(buf); k > 0 {
			return buf[:k]
		}
		select {
		case <-c.Ready():
		case <-deadline:
			return nil
		}
	}
}

func TestRCMessagesInOrder(t *testing.T) {
	a := newHost(t, "127.0.0.1", testutil.Port(14791))
	b := newHost(t, "127.0.0.2", testutil.Port(14791))
	qa, qb := connect(t, ib.RC, a, b, 7, 7)
	sizes := []int{1, 3, 4, 255, 4095, 4096, 4097, 8192, 12345, 61440, 65536}
	const rounds = 20
	total := len(sizes) * rounds
	posted := 0
	for i := 0; i < total; i++ {
		if _, err := qb.PostRecv([]ib.RecvWR{{ID: uint64(i), SGE: b.slot(i, 65536)}}); err != nil {
			t.Fatal(err)
		}
	}
	for posted < total {
		n := sizes[posted%len(sizes)]
		s := a.slot(posted, n)
		testutil.Fill(a.bytes(s), posted)
		if _, err := qa.PostSend([]ib.SendWR{{ID: uint64(posted), SGE: s}}); err != nil {
			t.Fatal(err)
		}
		posted++
		if posted%128 == 0 {
			poll(t, a.scq, 128, 10*time.Second)
		}
	}
	recvs := poll(t, b.rcq, total, 20*time.Second)
	for i, wc := range recvs {
		if wc.Status != ib.WCSuccess || wc.ID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
		n := sizes[i%len(sizes)]
		if int(wc.ByteLen) != n {
			t.Fatalf("message %d: %d octets, want %d", i, wc.ByteLen, n)
		}
		want := make([]byte, n)
		testutil.Fill(want, i)
		if got := b.bytes(b.slot(i, n)); !bytes.Equal(got, want) {
			t.Fatalf("message %d corrupted", i)
		}
	}
	t.Log(a.dev.Counters(), qa.Counters())
}
