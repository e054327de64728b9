//go:build rdma

package verbs

import (
	"bytes"
	"errors"
	"math"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// These tests need two RDMA devices on the same link (soft-RoCE rxe0 and
// rxe1 on the ends of a veth pair in the test bed), named by the
// environment, port 1 each.
const devicesEnv = "IPOIBD_VERBS_DEVICES"

const (
	slotSize = 72 << 10 // a 64 KiB message, or a UD datagram with its GRH
	numSlots = 48
	testQKey = ib.DefaultIPoIBQKey
	waitFor  = 20 * time.Second // generous: the test bed runs under TCG
)

// end is one device with a registered slab and a pair of CQs.
type end struct {
	dev      *Device
	slab     *ib.Slab
	mr       ib.MR
	scq, rcq ib.CQ
}

func openPair(t *testing.T) (a, b *end) {
	t.Helper()
	names := deviceNames(t)
	return openEnd(t, names[0]), openEnd(t, names[1])
}

// deviceNames returns the two devices the environment names, or skips.
func deviceNames(t *testing.T) [2]string {
	t.Helper()
	names := strings.Split(os.Getenv(devicesEnv), ",")
	if len(names) != 2 || names[0] == "" || names[1] == "" {
		t.Skipf("set %s=rxe0,rxe1 (two RDMA devices on the same link, port 1) to run the verbs tests", devicesEnv)
	}
	return [2]string{names[0], names[1]}
}

func openEnd(t *testing.T, name string) *end {
	t.Helper()
	return openEndWith(t, Config{Device: name, Port: 1, GIDIndex: -1})
}

func openEndWith(t *testing.T, cfg Config) *end {
	t.Helper()
	name := cfg.Device
	d, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", name, err)
	}
	e := &end{dev: d.(*Device)}
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

// ahTo makes an address handle to gid, closed when the test ends.
func (e *end) ahTo(t *testing.T, gid ib.GID) ib.AH {
	t.Helper()
	ah, err := e.dev.CreateAH(ib.AHAttr{DestGID: gid})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ah.Close() })
	return ah
}

func (e *end) qp(t *testing.T, typ ib.QPType, srq ib.SRQ) ib.QP {
	t.Helper()
	q, err := e.dev.CreateQP(ib.QPAttr{Type: typ, SendCQ: e.scq, RecvCQ: e.rcq, SRQ: srq, MaxSend: 64, MaxRecv: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// udQP makes a UD QP in RTS.
func (e *end) udQP(t *testing.T) ib.QP {
	t.Helper()
	q := e.qp(t, ib.UD, nil)
	for _, m := range []ib.QPModify{
		{State: ib.StateInit, PKey: e.port().PKeys[0], QKey: testQKey},
		{State: ib.StateRTR},
		{State: ib.StateRTS, SendPSN: 1},
	} {
		if err := q.Modify(m); err != nil {
			t.Fatal(err)
		}
	}
	if s := q.State(); s != ib.StateRTS {
		t.Fatalf("UD QP in %v after the moves to RTS", s)
	}
	return q
}

// rcParams are the RTS parameters of connected QPs.
type rcParams struct{ timeout, retry, rnrRetry uint8 }

// connect moves qa (on a) and qb (on b) to RTS towards each other with the
// path MTU both ports support.
func connect(t *testing.T, a, b *end, qa, qb ib.QP, p rcParams) {
	t.Helper()
	mtu := min(a.port().ActiveMTU, b.port().ActiveMTU)
	for _, s := range []struct {
		e        *end
		q, peer  ib.QP
		peerGID  ib.GID
		sendPSN  uint32
		recvPSN  uint32
		peerName string
	}{
		{a, qa, qb, b.port().GID, 100, 200, "b"},
		{b, qb, qa, a.port().GID, 200, 100, "a"},
	} {
		for _, m := range []ib.QPModify{
			{State: ib.StateInit, PKey: s.e.port().PKeys[0]},
			{State: ib.StateRTR, DestGID: s.peerGID, DestQPN: s.peer.Num(), PathMTU: mtu, RecvPSN: s.recvPSN, MinRNRTmr: 12},
		} {
			if err := s.q.Modify(m); err != nil {
				t.Fatalf("QP towards %s: %v", s.peerName, err)
			}
		}
	}
	for _, s := range []struct {
		q   ib.QP
		psn uint32
	}{{qa, 100}, {qb, 200}} {
		if err := s.q.Modify(ib.QPModify{State: ib.StateRTS, SendPSN: s.psn, Timeout: p.timeout, RetryCount: p.retry, RNRRetry: p.rnrRetry}); err != nil {
			t.Fatal(err)
		}
	}
}

// waiter collects completions, waiting on Ready between polls. Its timer
// is made once, so waiting allocates nothing.
type waiter struct {
	t     *testing.T
	timer *time.Timer
	wc    [16]ib.Completion
}

func newWaiter(t *testing.T) *waiter {
	w := &waiter{t: t, timer: time.NewTimer(time.Hour)}
	w.timer.Stop()
	return w
}

// one returns the next completion of cq.
func (w *waiter) one(cq ib.CQ, what string) ib.Completion {
	w.timer.Reset(waitFor)
	defer w.timer.Stop()
	for {
		if cq.Poll(w.wc[:1]) == 1 {
			return w.wc[0]
		}
		select {
		case <-cq.Ready():
		case <-w.timer.C:
			w.t.Fatalf("no %s completion within %v", what, waitFor)
		}
	}
}

func (w *waiter) n(cq ib.CQ, n int, what string) []ib.Completion {
	var out []ib.Completion
	for len(out) < n {
		out = append(out, w.one(cq, what))
	}
	return out
}

func TestOpenQuery(t *testing.T) {
	a, b := openPair(t)
	for _, e := range []*end{a, b} {
		p := e.port()
		t.Logf("%s: GID %v (index %d), link %s, active MTU %v, P_Keys %v, GUID %016x", e.dev.Name(), p.GID, e.dev.gidIndex, p.LinkLayer, p.ActiveMTU, p.PKeys, p.GUID)
		if p.LinkLayer == "Ethernet" && !p.GID.IsIPv4Mapped() {
			t.Errorf("%s: RoCE GID %v is not IPv4-mapped", e.dev.Name(), p.GID)
		}
		if p.ActiveMTU < ib.MTU1024 {
			t.Errorf("%s: active MTU %v, want at least 1024", e.dev.Name(), p.ActiveMTU)
		}
		if len(p.PKeys) == 0 || !p.PKeys[0].Valid() {
			t.Errorf("%s: P_Key table %v", e.dev.Name(), p.PKeys)
		}
		if p.GUID == 0 {
			t.Errorf("%s: node GUID is zero", e.dev.Name())
		}
		// ib_umad gives QP1's CM class to one agent: the kernel CM's
		// while ib_cm is loaded (as here, for the rdma_cm tests).
		if loaded, _ := CMModuleHolders(); loaded {
			if _, err := e.dev.MADs(); err == nil || !strings.Contains(err.Error(), "ib_cm is loaded") {
				t.Errorf("%s: MADs() = %v, want an error saying ib_cm is loaded", e.dev.Name(), err)
			}
		} else if m, err := e.dev.MADs(); err != nil {
			t.Errorf("%s: MADs() without ib_cm: %v", e.dev.Name(), err)
		} else if err := m.Close(); err != nil {
			t.Errorf("%s: closing the MAD service: %v", e.dev.Name(), err)
		}
		names := map[string]bool{}
		for _, c := range e.dev.Counters() {
			names[c.Name] = true
		}
		if !names["completions_bad"] || !names["async_srq_limit_reached"] {
			t.Errorf("%s: counters lack the provider's own: %v", e.dev.Name(), e.dev.Counters())
		}
	}
	if a.port().GID == b.port().GID {
		t.Errorf("both devices have GID %v", a.port().GID)
	}
	if _, err := Open(Config{Device: "no-such-device", GIDIndex: -1}); err == nil || !strings.Contains(err.Error(), a.dev.Name()) {
		t.Errorf("Open of a missing device: %v, want an error listing %s", err, a.dev.Name())
	}
}

func TestUDUnicast(t *testing.T) {
	a, b := openPair(t)
	qa, qb := a.udQP(t), b.udQP(t)
	w := newWaiter(t)
	for _, c := range []struct {
		name       string
		from, to   *end
		qFrom, qTo ib.QP
		size       int
	}{
		{"a to b", a, b, qa, qb, 200},
		{"b to a", b, a, qb, qa, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			w.t = t
			if _, err := c.qTo.PostRecv([]ib.RecvWR{{ID: 7, SGE: c.to.sge(1, slotSize)}}); err != nil {
				t.Fatal(err)
			}
			ah, err := c.from.dev.CreateAH(ib.AHAttr{DestGID: c.to.port().GID})
			if err != nil {
				t.Fatal(err)
			}
			defer ah.Close()
			testutil.Fill(c.from.buf(0)[:c.size], c.size)
			if _, err := c.qFrom.PostSend([]ib.SendWR{{ID: 3, SGE: c.from.sge(0, c.size), AH: ah, RemoteQPN: c.qTo.Num(), RemoteQKey: testQKey}}); err != nil {
				t.Fatal(err)
			}
			if s := w.one(c.from.scq, "send"); s.ID != 3 || s.Status != ib.WCSuccess || s.Opcode != ib.WCSend || s.QPN != c.qFrom.Num() {
				t.Errorf("send completion %+v", s)
			}
			r := w.one(c.to.rcq, "receive")
			want := ib.Completion{ID: 7, Status: ib.WCSuccess, Opcode: ib.WCRecv, QPN: c.qTo.Num(), ByteLen: uint32(ib.GRHLen + c.size),
				SrcQPN: c.qFrom.Num(), SrcGID: c.from.port().GID, PKey: c.to.port().PKeys[0]}
			if r != want {
				t.Errorf("receive completion\n got %+v\nwant %+v", r, want)
			}
			if got := c.to.buf(1)[ib.GRHLen : ib.GRHLen+c.size]; !bytes.Equal(got, c.from.buf(0)[:c.size]) {
				t.Error("payload after the GRH differs from what was sent")
			}
		})
	}
}

func TestUDMulticast(t *testing.T) {
	a, b := openPair(t)
	qa, qb := a.udQP(t), b.udQP(t)
	// RoCEv2 over IPv4 carries groups as IPv4 multicast (as mckey does).
	mgid := ib.GIDFromAddr(netip.MustParseAddr("239.1.2.3"))
	ends := []struct {
		e *end
		q ib.QP
	}{{a, qa}, {b, qb}}
	for _, s := range ends {
		if err := s.e.dev.AttachMulticast(s.q, mgid, 0); err != nil {
			t.Fatal(err)
		}
		if n := counter(s.e.dev.Counters(), "ip_join_errors"); n != 0 {
			t.Fatalf("%s: the interface could not join IP group %v (see the log)", s.e.dev.Name(), mgid.Addr())
		}
		if _, err := s.q.PostRecv([]ib.RecvWR{{ID: 10, SGE: s.e.sge(10, slotSize)}, {ID: 11, SGE: s.e.sge(11, slotSize)}}); err != nil {
			t.Fatal(err)
		}
	}
	w := newWaiter(t)
	for i, s := range ends {
		ah, err := s.e.dev.CreateAH(ib.AHAttr{DestGID: mgid})
		if err != nil {
			t.Fatal(err)
		}
		defer ah.Close()
		testutil.Fill(s.e.buf(0)[:100], 50+i)
		if _, err := s.q.PostSend([]ib.SendWR{{ID: 1, SGE: s.e.sge(0, 100), AH: ah, RemoteQPN: ib.MulticastQPN, RemoteQKey: testQKey}}); err != nil {
			t.Fatal(err)
		}
		if c := w.one(s.e.scq, "multicast send"); c.Status != ib.WCSuccess {
			t.Fatalf("%s: multicast send %v", s.e.dev.Name(), c.Status)
		}
	}
	// Each member receives the other's datagram; its own may come back too
	// (IP multicast loopback), which the receiver ignores by source QPN and GID.
	for i, s := range ends {
		peer := ends[1-i]
		got := false
		for k := 0; k < 2 && !got; k++ {
			c := w.one(s.e.rcq, "multicast receive")
			if c.Status != ib.WCSuccess {
				t.Fatalf("%s: multicast receive %v", s.e.dev.Name(), c.Status)
			}
			// Both devices number their QPs alike: our own copy is the one
			// from our QPN and our GID.
			if c.SrcQPN == s.q.Num() && c.SrcGID == s.e.port().GID {
				continue
			}
			got = true
			if c.SrcQPN != peer.q.Num() || c.SrcGID != peer.e.port().GID || c.ByteLen != ib.GRHLen+100 {
				t.Errorf("%s: multicast receive %+v", s.e.dev.Name(), c)
			}
			if !bytes.Equal(s.e.buf(int(c.ID))[ib.GRHLen:ib.GRHLen+100], peer.e.buf(0)[:100]) {
				t.Errorf("%s: multicast payload differs", s.e.dev.Name())
			}
		}
		if !got {
			t.Errorf("%s: did not receive the other member's datagram", s.e.dev.Name())
		}
	}
	for _, s := range ends {
		if err := s.e.dev.DetachMulticast(s.q, mgid); err != nil {
			t.Error(err)
		}
	}
}

// RC (receiving through an SRQ, whose limit event must fire) and UC
// messages arrive intact at the port's path MTU.
func TestConnectedMessages(t *testing.T) {
	sizes := []int{1, 4096, 65536}
	for _, typ := range []ib.QPType{ib.RC, ib.UC} {
		t.Run(typ.String(), func(t *testing.T) {
			a, b := openPair(t)
			var srq ib.SRQ
			const posted, limit = 6, 4 // three messages take the count below the limit
			if typ == ib.RC {
				var err error
				if srq, err = b.dev.CreateSRQ(ib.SRQAttr{MaxWR: 16, Limit: limit}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { srq.Close() })
			}
			qa, qb := a.qp(t, typ, nil), b.qp(t, typ, srq)
			connect(t, a, b, qa, qb, rcParams{timeout: 14, retry: 7, rnrRetry: 7})
			var wrs []ib.RecvWR
			for i := range posted {
				wrs = append(wrs, ib.RecvWR{ID: uint64(20 + i), SGE: b.sge(20+i, slotSize)})
			}
			post := qb.PostRecv
			if srq != nil {
				post = srq.PostRecv
				if _, err := qb.PostRecv(wrs); err == nil {
					t.Error("PostRecv on a QP with an SRQ succeeded")
				}
			}
			if n, err := post(wrs); n != posted || err != nil {
				t.Fatalf("posted %d receives: %v", n, err)
			}
			if srq != nil && srq.Posted() != posted {
				t.Fatalf("SRQ Posted() = %d, want %d", srq.Posted(), posted)
			}
			var sends []ib.SendWR
			for i, n := range sizes {
				testutil.Fill(a.buf(i)[:n], n+i)
				sends = append(sends, ib.SendWR{ID: uint64(i), SGE: a.sge(i, n)})
			}
			if n, err := qa.PostSend(sends); n != len(sends) || err != nil {
				t.Fatalf("posted %d sends: %v", n, err)
			}
			w := newWaiter(t)
			for i, c := range w.n(a.scq, len(sizes), "send") {
				if c.ID != uint64(i) || c.Status != ib.WCSuccess || c.QPN != qa.Num() {
					t.Errorf("send completion %d: %+v", i, c)
				}
			}
			for i, c := range w.n(b.rcq, len(sizes), "receive") {
				if c.Status != ib.WCSuccess || c.Opcode != ib.WCRecv || c.QPN != qb.Num() || c.ByteLen != uint32(sizes[i]) {
					t.Errorf("receive completion %d: %+v, want %d octets", i, c, sizes[i])
					continue
				}
				if !bytes.Equal(b.buf(int(c.ID))[:sizes[i]], a.buf(i)[:sizes[i]]) {
					t.Errorf("%d-octet message arrived changed", sizes[i])
				}
			}
			if srq == nil {
				return
			}
			if got := srq.Posted(); got != posted-len(sizes) {
				t.Errorf("SRQ Posted() = %d after %d completions, want %d", got, len(sizes), posted-len(sizes))
			}
			select {
			case <-srq.LimitReached():
			case <-time.After(waitFor):
				t.Fatalf("no SRQ limit event with %d posted and a limit of %d", srq.Posted(), limit)
			}
			srq.Arm(2) // three are posted: no signal
			select {
			case <-srq.LimitReached():
				t.Error("LimitReached after arming a limit below the posted count")
			default:
			}
			srq.Arm(5) // already below: signalled at once
			select {
			case <-srq.LimitReached():
			default:
				t.Error("no LimitReached after arming a limit above the posted count")
			}
		})
	}
}

// A send towards a destroyed QP exhausts its retries; the sends behind it
// are flushed, and the QP is in ERROR.
func TestRCRetryExceeded(t *testing.T) {
	a, b := openPair(t)
	qa, qb := a.qp(t, ib.RC, nil), b.qp(t, ib.RC, nil)
	connect(t, a, b, qa, qb, rcParams{timeout: 10, retry: 1, rnrRetry: 1}) // ~4 ms ACK timeout, one retry
	if err := qb.Close(); err != nil {
		t.Fatal(err)
	}
	sends := []ib.SendWR{{ID: 1, SGE: a.sge(0, 64)}, {ID: 2, SGE: a.sge(1, 64)}, {ID: 3, SGE: a.sge(2, 64)}}
	if _, err := qa.PostSend(sends); err != nil {
		t.Fatal(err)
	}
	w := newWaiter(t)
	cs := w.n(a.scq, len(sends), "send")
	want := []ib.WCStatus{ib.WCRetryExceeded, ib.WCFlushError, ib.WCFlushError}
	for i, c := range cs {
		if c.ID != uint64(i+1) || c.Status != want[i] || c.QPN != qa.Num() {
			t.Errorf("send %d: %+v, want status %v", i+1, c, want[i])
		}
	}
	if s := qa.State(); s != ib.StateError {
		t.Errorf("QP state after retry exceeded: %v", s)
	}
}

// Closing a QP completes what it had outstanding as flushed, once.
func TestCloseFlushes(t *testing.T) {
	a, _ := openPair(t)
	q := a.udQP(t)
	if _, err := q.PostRecv([]ib.RecvWR{{ID: 5, SGE: a.sge(5, slotSize)}, {ID: 6, SGE: a.sge(6, slotSize)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.rcq.Close(); err == nil {
		t.Fatal("a CQ closed under its QP")
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	w := newWaiter(t)
	seen := map[uint64]bool{}
	for _, c := range w.n(a.rcq, 2, "flushed receive") {
		if c.Status != ib.WCFlushError || c.Opcode != ib.WCRecv || seen[c.ID] {
			t.Errorf("flushed receive %+v", c)
		}
		seen[c.ID] = true
	}
	if n := a.rcq.Poll(make([]ib.Completion, 4)); n != 0 {
		t.Errorf("%d more completions after the flushes", n)
	}
	if _, err := q.PostRecv([]ib.RecvWR{{ID: 7, SGE: a.sge(7, slotSize)}}); !errors.Is(err, ib.ErrClosed) {
		t.Errorf("PostRecv after Close: %v", err)
	}
	if err := a.rcq.Close(); err != nil {
		t.Errorf("CQ Close after its QP: %v", err)
	}
}

// PostSend, PostRecv and Poll allocate nothing in steady state.
func TestNoAllocsPerPacket(t *testing.T) {
	for _, typ := range []ib.QPType{ib.UD, ib.RC} {
		t.Run(typ.String(), func(t *testing.T) {
			a, b := openPair(t)
			var qa, qb ib.QP
			var ah ib.AH
			if typ == ib.UD {
				qa, qb = a.udQP(t), b.udQP(t)
				var err error
				if ah, err = a.dev.CreateAH(ib.AHAttr{DestGID: b.port().GID}); err != nil {
					t.Fatal(err)
				}
			} else {
				qa, qb = a.qp(t, typ, nil), b.qp(t, typ, nil)
				connect(t, a, b, qa, qb, rcParams{timeout: 14, retry: 7, rnrRetry: 7})
			}
			const depth = 8
			recvs := make([]ib.RecvWR, depth)
			for i := range recvs {
				recvs[i] = ib.RecvWR{ID: uint64(i), SGE: b.sge(i, slotSize)}
			}
			if _, err := qb.PostRecv(recvs); err != nil {
				t.Fatal(err)
			}
			send := []ib.SendWR{{ID: 1, SGE: a.sge(0, 512), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: testQKey}}
			w := newWaiter(t)
			repost := make([]ib.RecvWR, 1)
			round := func() {
				if _, err := qa.PostSend(send); err != nil {
					t.Fatal(err)
				}
				if c := w.one(a.scq, "send"); c.Status != ib.WCSuccess {
					t.Fatalf("send: %v", c.Status)
				}
				c := w.one(b.rcq, "receive")
				if c.Status != ib.WCSuccess {
					t.Fatalf("receive: %v", c.Status)
				}
				repost[0] = ib.RecvWR{ID: c.ID, SGE: b.sge(int(c.ID), slotSize)}
				if _, err := qb.PostRecv(repost); err != nil {
					t.Fatal(err)
				}
			}
			for range 100 { // warm up
				round()
			}
			// The fewest of three measurements: the counts are the whole
			// process's, and a background goroutine's rare allocation
			// (seen once under TCG: 11 in 1000 rounds) is not the
			// datapath's, which would show in every one.
			const rounds = 1000
			allocs := uint64(math.MaxUint64)
			for range 3 {
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for range rounds {
					round()
				}
				runtime.ReadMemStats(&after)
				allocs = min(allocs, after.Mallocs-before.Mallocs)
			}
			t.Logf("%d allocations in %d send/receive rounds (fewest of 3)", allocs, rounds)
			if allocs*100 >= rounds {
				t.Errorf("%d allocations in %d rounds: the datapath allocates", allocs, rounds)
			}
			if ah != nil {
				ah.Close()
			}
		})
	}
}

// Every Close is idempotent, the device's last.
func TestCloseTwice(t *testing.T) {
	a, _ := openPair(t)
	q := a.udQP(t)
	srq, err := a.dev.CreateSRQ(ib.SRQAttr{MaxWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	ah, err := a.dev.CreateAH(ib.AHAttr{DestGID: a.port().GID})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []interface{ Close() error }{q, q, srq, srq, ah, ah, a.scq, a.scq, a.mr, a.mr, a.dev, a.dev} {
		if err := c.Close(); err != nil {
			t.Errorf("%T.Close: %v", c, err)
		}
	}
	if _, err := a.dev.CreateCQ(1); !errors.Is(err, ib.ErrClosed) {
		t.Errorf("CreateCQ after Close: %v", err)
	}
}

// A CQ without a handler (ipoibd's send CQ) raises an event only when its
// consumer is about to wait on Ready: sends reaped by polling cost no
// event, and a wait still wakes for a completion added after it began.
func TestSendCQArmedOnlyForWaiters(t *testing.T) {
	a, b := openPair(t)
	qa, qb := a.udQP(t), b.udQP(t)
	ah := a.ahTo(t, b.port().GID)
	send := func(id uint64) {
		t.Helper()
		if _, err := qa.PostSend([]ib.SendWR{{ID: id, SGE: a.sge(0, 64), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: testQKey}}); err != nil {
			t.Fatal(err)
		}
	}
	var wc [1]ib.Completion
	reap := func(id uint64) {
		t.Helper()
		deadline := time.Now().Add(waitFor)
		for a.scq.Poll(wc[:]) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("send %d: no completion within %v", id, waitFor)
			}
			runtime.Gosched()
		}
		if wc[0].ID != id || wc[0].Status != ib.WCSuccess {
			t.Fatalf("send %d: completion %+v", id, wc[0])
		}
	}
	events := func() uint64 { return a.dev.ctr.cqEvents.Load() }

	// The CQ is armed when made: the first completion raises one event.
	send(1)
	reap(1)
	first := time.Now().Add(waitFor)
	for events() == 0 && time.Now().Before(first) {
		runtime.Gosched()
	}
	before := events()
	const polled = 20
	for id := uint64(2); id < 2+polled; id++ {
		send(id)
		reap(id)
	}
	// Were the CQ armed again after each event, most of these would have
	// raised one by now.
	if got := events() - before; got != 0 {
		t.Errorf("%d sends reaped by polling raised %d completion events, want 0", polled, got)
	}

	// A waiter: Ready arms and signals at once (completions before the arm
	// are polled); then the next completion signals through an event.
	ready := a.scq.Ready()
	select {
	case <-ready:
	case <-time.After(waitFor):
		t.Fatal("Ready of an unarmed CQ was not signalled at once")
	}
	if n := a.scq.Poll(wc[:]); n != 0 {
		t.Fatalf("a completion nobody sent: %+v", wc[0])
	}
	send(100)
	select {
	case <-ready:
	case <-time.After(waitFor):
		t.Fatal("a send completed after Ready armed the CQ did not signal it")
	}
	reap(100)
	if got := events() - before; got != 1 {
		t.Errorf("the waited-for send raised %d completion events, want 1", got)
	}
}

// UD sends of at most inlineWanted octets go inline where the adapter
// offers inline data (rxe and every InfiniBand HCA do), larger ones as
// gather entries; both arrive whole. Connected QPs ask for no inline data.
func TestSmallSendsGoInline(t *testing.T) {
	a, b := openPair(t)
	qa, qb := a.udQP(t), b.udQP(t)
	if n := qa.(*qp).maxInline; n <= 0 {
		t.Fatalf("%s granted no inline data (maxInline %d)", a.dev.Name(), n)
	}
	if n := a.qp(t, ib.RC, nil).(*qp).maxInline; n != 0 {
		t.Errorf("an RC QP sends up to %d octets inline, want none", n)
	}
	ah := a.ahTo(t, b.port().GID)
	w := newWaiter(t)
	for _, c := range []struct {
		size   int
		inline bool
	}{
		{1, true},
		{56, true}, // an IPoIB TCP ACK
		{inlineWanted, true},
		{inlineWanted + 1, false},
		{2000, false},
	} {
		if _, err := qb.PostRecv([]ib.RecvWR{{ID: 9, SGE: b.sge(1, slotSize)}}); err != nil {
			t.Fatal(err)
		}
		testutil.Fill(a.buf(0)[:c.size], c.size)
		before := a.dev.ctr.sendsInline.Load()
		if _, err := qa.PostSend([]ib.SendWR{{ID: 4, SGE: a.sge(0, c.size), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: testQKey}}); err != nil {
			t.Fatal(err)
		}
		if got := a.dev.ctr.sendsInline.Load() - before; got != map[bool]uint64{true: 1, false: 0}[c.inline] {
			t.Errorf("%d octets: %d sends went inline, want inline=%v", c.size, got, c.inline)
		}
		if s := w.one(a.scq, "send"); s.Status != ib.WCSuccess {
			t.Errorf("%d octets: send completion %+v", c.size, s)
		}
		r := w.one(b.rcq, "receive")
		if r.Status != ib.WCSuccess || r.ByteLen != uint32(ib.GRHLen+c.size) {
			t.Errorf("%d octets: receive completion %+v", c.size, r)
		} else if got := b.buf(1)[ib.GRHLen : ib.GRHLen+c.size]; !bytes.Equal(got, a.buf(0)[:c.size]) {
			t.Errorf("%d octets: the payload arrived changed", c.size)
		}
	}
}

// With BusyPoll, a receive CQ's handler goes on polling after it drained
// the CQ: completions that come within the window are taken without an
// event each.
func TestBusyPollTakesCompletionsWithoutEvents(t *testing.T) {
	a, _ := openPair(t)
	b := openEndWith(t, Config{Device: deviceNames(t)[1], Port: 1, GIDIndex: -1, BusyPoll: 200 * time.Millisecond})
	qa, qb := a.udQP(t), b.udQP(t)
	ah := a.ahTo(t, b.port().GID)
	const posts = 10
	got := make(chan ib.Completion, posts)
	var wc [16]ib.Completion
	b.rcq.(*cq).SetHandler(func() {
		for k := range b.rcq.Poll(wc[:]) {
			got <- wc[k]
		}
	})
	recvs := make([]ib.RecvWR, posts)
	for k := range recvs {
		recvs[k] = ib.RecvWR{ID: uint64(k), SGE: b.sge(k, slotSize)}
	}
	if _, err := qb.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	w := newWaiter(t)
	for k := range posts {
		// One at a time: each send completes before the next is posted,
		// so its datagram comes while the receiver polls or sleeps.
		if _, err := qa.PostSend([]ib.SendWR{{ID: uint64(k), SGE: a.sge(0, 100), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: testQKey}}); err != nil {
			t.Fatal(err)
		}
		if c := w.one(a.scq, "send"); c.Status != ib.WCSuccess {
			t.Fatalf("send %d: %+v", k, c)
		}
		select {
		case c := <-got:
			if c.Status != ib.WCSuccess {
				t.Fatalf("receive %d: %+v", k, c)
			}
		case <-time.After(waitFor):
			t.Fatalf("receive %d: not taken within %v", k, waitFor)
		}
	}
	events, hits := b.dev.ctr.cqEvents.Load(), b.dev.ctr.busyPollHits.Load()
	t.Logf("%d receives: %d completion events, %d busy poll hits", posts, events, hits)
	if hits == 0 || events >= posts {
		t.Errorf("%d receives 200 ms of busy polling could take: %d completion events, %d busy poll hits; want fewer events, and hits", posts, events, hits)
	}
}
