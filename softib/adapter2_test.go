package softib

import (
	"net"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/softib/wire"
)

func udQP(t *testing.T, h *host, qkey ib.QKey) ib.QP {
	t.Helper()
	return udQPIn(t, h, ib.DefaultPKey, qkey)
}

// udQPIn makes a UD QP in RTS on partition pkey.
func udQPIn(t *testing.T, h *host, pkey ib.PKey, qkey ib.QKey) ib.QP {
	t.Helper()
	q, err := h.dev.CreateQP(ib.QPAttr{Type: ib.UD, SendCQ: h.scq, RecvCQ: h.rcq, MaxSend: 64, MaxRecv: 64})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []ib.QPModify{{State: ib.StateInit, PKey: pkey, QKey: qkey}, {State: ib.StateRTR}, {State: ib.StateRTS}} {
		if err := q.Modify(m); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

func TestUDUnicastAndQKeyCheck(t *testing.T) {
	a := newHost(t, "127.0.0.1", testutil.Port(14792))
	b := newHost(t, "127.0.0.2", testutil.Port(14792))
	qa, qb := udQP(t, a, 0x0b1b), udQP(t, b, 0x0b1b)
	for i := range 4 {
		qb.PostRecv([]ib.RecvWR{{ID: uint64(i), SGE: b.slot(i, 4096+ib.GRHLen)}})
	}
	ah, err := a.dev.CreateAH(ib.AHAttr{DestGID: b.dev.Port().GID})
	if err != nil {
		t.Fatal(err)
	}
	msg := a.slot(0, 2044)
	testutil.Fill(a.bytes(msg), 5)
	send := func(qkey ib.QKey) {
		if _, err := qa.PostSend([]ib.SendWR{{ID: 1, SGE: msg, AH: ah, RemoteQPN: qb.Num(), RemoteQKey: qkey}}); err != nil {
			t.Fatal(err)
		}
		if wc := poll(t, a.scq, 1, time.Second)[0]; wc.Status != ib.WCSuccess {
			t.Fatalf("send completion %+v", wc)
		}
	}
	send(0x1234) // wrong Q_Key: dropped and counted
	send(0x0b1b)
	wc := poll(t, b.rcq, 1, 2*time.Second)[0]
	if wc.Status != ib.WCSuccess || wc.ByteLen != 2044+ib.GRHLen || wc.SrcQPN != qa.Num() || wc.SrcGID != a.dev.Port().GID || wc.ID != 0 {
		t.Fatalf("receive completion %+v", wc)
	}
	got := b.bytes(b.slot(0, 2044+ib.GRHLen))
	if got[0]>>4 != 6 || ib.GID(got[8:24]) != a.dev.Port().GID {
		t.Errorf("GRH not filled: % x", got[:40])
	}
	want := make([]byte, 2044)
	testutil.Fill(want, 5)
	if string(got[ib.GRHLen:]) != string(want) {
		t.Error("payload corrupted")
	}
	if n := CounterValue(b.dev.Counters(), "rx_drop_qkey"); n != 1 {
		t.Errorf("rx_drop_qkey = %d, want 1", n)
	}
}

func TestPartitionIsolation(t *testing.T) {
	a := newHost(t, "127.0.0.1", testutil.Port(14793))
	dev, err := Open(Config{Addr: netip.MustParseAddr("127.0.0.3"), Port: testutil.Port(14793), PKeys: []ib.PKey{0x8001}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	mads, _ := dev.MADs()
	am, _ := a.dev.MADs()
	mad := make([]byte, 256)
	if err := am.Send(ib.MADAddr{GID: dev.Port().GID, QPN: ib.QP1}, mad); err != nil {
		t.Fatal(err)
	}
	// A MAD in the right partition arrives; the one above must not.
	if err := am.Send(ib.MADAddr{GID: dev.Port().GID, QPN: ib.QP1, PKey: 0x8001}, mad); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-mads.Recv():
		if m.From.PKey != 0x8001 || m.From.GID != a.dev.Port().GID {
			t.Fatalf("MAD from %+v", m.From)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no MAD")
	}
	if n := CounterValue(dev.Counters(), "rx_drop_pkey"); n != 1 {
		t.Errorf("rx_drop_pkey = %d, want 1", n)
	}
}

// A port with two partitions in its table: each QP takes only its own
// partition's packets, and a QP cannot join a partition the table lacks.
func TestPartitionsOnOnePort(t *testing.T) {
	a := newHost(t, "127.0.0.1", testutil.Port(14795), ib.DefaultPKey, 0x8001)
	b := newHost(t, "127.0.0.2", testutil.Port(14795), ib.DefaultPKey, 0x8001)
	if got := b.dev.Port().PKeys; len(got) != 2 || got[0] != ib.DefaultPKey || got[1] != 0x8001 {
		t.Fatalf("P_Key table %v", got)
	}
	const qkey = 0x0b1b
	senders := map[ib.PKey]ib.QP{ib.DefaultPKey: udQPIn(t, a, ib.DefaultPKey, qkey), 0x8001: udQPIn(t, a, 0x8001, qkey)}
	dst := udQPIn(t, b, 0x8001, qkey)
	for i := range 4 {
		dst.PostRecv([]ib.RecvWR{{ID: uint64(i), SGE: b.slot(i, 256+ib.GRHLen)}})
	}
	ah, err := a.dev.CreateAH(ib.AHAttr{DestGID: b.dev.Port().GID})
	if err != nil {
		t.Fatal(err)
	}
	for _, pkey := range []ib.PKey{ib.DefaultPKey, 0x8001} {
		if _, err := senders[pkey].PostSend([]ib.SendWR{{ID: uint64(pkey), SGE: a.slot(0, 256), AH: ah, RemoteQPN: dst.Num(), RemoteQKey: qkey}}); err != nil {
			t.Fatal(err)
		}
		poll(t, a.scq, 1, time.Second)
	}
	wc := poll(t, b.rcq, 1, 2*time.Second)[0]
	if wc.Status != ib.WCSuccess || wc.PKey != 0x8001 || wc.SrcQPN != senders[0x8001].Num() {
		t.Errorf("receive %+v, want the 0x8001 sender's", wc)
	}
	if n := CounterValue(b.dev.Counters(), "rx_drop_pkey"); n != 1 {
		t.Errorf("rx_drop_pkey = %d, want 1 (the default partition's datagram)", n)
	}
	q, err := a.dev.CreateQP(ib.QPAttr{Type: ib.UD, SendCQ: a.scq, RecvCQ: a.rcq, MaxSend: 1, MaxRecv: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(ib.QPModify{State: ib.StateInit, PKey: 0x8002, QKey: qkey}); err == nil {
		t.Error("a QP joined P_Key 0x8002, which the port's table lacks")
	}
}

func TestRNRRecovery(t *testing.T) {
	a := newHost(t, "127.0.0.1", testutil.Port(14794))
	b := newHost(t, "127.0.0.2", testutil.Port(14794))
	qa, qb := connect(t, ib.RC, a, b, 7, 7)
	s := a.slot(0, 10000)
	testutil.Fill(a.bytes(s), 9)
	if _, err := qa.PostSend([]ib.SendWR{{ID: 7, SGE: s}}); err != nil {
		t.Fatal(err)
	}
	// Post the receive only after the sender was told "not ready".
	deadline := time.Now().Add(2 * time.Second)
	for CounterValue(qa.Counters(), "rnr_naks_received") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAK")
		}
		runtime.Gosched()
	}
	qb.PostRecv([]ib.RecvWR{{ID: 3, SGE: b.slot(0, 65536)}})
	if wc := poll(t, b.rcq, 1, 2*time.Second)[0]; wc.Status != ib.WCSuccess || wc.ByteLen != 10000 || wc.ID != 3 {
		t.Fatalf("receive %+v", wc)
	}
	if wc := poll(t, a.scq, 1, 2*time.Second)[0]; wc.Status != ib.WCSuccess || wc.ID != 7 {
		t.Fatalf("send %+v", wc)
	}
}

func TestRNRRetryExceeded(t *testing.T) {
	a := newHost(t, "127.0.0.1", testutil.Port(14795))
	b := newHost(t, "127.0.0.2", testutil.Port(14795))
	qa, _ := connect(t, ib.RC, a, b, 7, 2) // three tries, never a buffer
	s := a.slot(0, 100)
	qa.PostSend([]ib.SendWR{{ID: 1, SGE: s}, {ID: 2, SGE: s}})
	wcs := poll(t, a.scq, 2, 3*time.Second)
	if wcs[0].Status != ib.WCRNRRetryExceeded || wcs[1].Status != ib.WCFlushError || qa.State() != ib.StateError {
		t.Fatalf("completions %+v, state %v", wcs, qa.State())
	}
}

func TestVanishedPeerRetryExceeded(t *testing.T) {
	before := runtime.NumGoroutine()
	a := newHost(t, "127.0.0.1", testutil.Port(14796))
	b := newHost(t, "127.0.0.2", testutil.Port(14796))
	qa, _ := connect(t, ib.RC, a, b, 3, 7)
	b.dev.Close()
	s := a.slot(0, 30000)
	start := time.Now()
	qa.PostSend([]ib.SendWR{{ID: 1, SGE: s}, {ID: 2, SGE: s}, {ID: 3, SGE: s}})
	wcs := poll(t, a.scq, 3, 5*time.Second)
	if wcs[0].Status != ib.WCRetryExceeded || wcs[1].Status != ib.WCFlushError || wcs[2].Status != ib.WCFlushError {
		t.Fatalf("completions %+v", wcs)
	}
	// Timeout code 14 is 67 ms; four tries take about 270 ms.
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("error after %v, beyond the retry budget", el)
	}
	if n := CounterValue(qa.Counters(), "ack_timeouts"); n != 4 {
		t.Errorf("ack_timeouts = %d, want 4 (1 try + 3 retries)", n)
	}
	a.dev.Close()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines leaked: %d > %d\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestUCDelivers(t *testing.T) {
	a := newHost(t, "127.0.0.1", testutil.Port(14797))
	b := newHost(t, "127.0.0.2", testutil.Port(14797))
	qa, qb := connect(t, ib.UC, a, b, 0, 0)
	for i := range 8 {
		qb.PostRecv([]ib.RecvWR{{ID: uint64(i), SGE: b.slot(i, 65536)}})
	}
	for i := range 8 {
		s := a.slot(i, 5000*(i+1))
		testutil.Fill(a.bytes(s), i)
		qa.PostSend([]ib.SendWR{{ID: uint64(i), SGE: s}})
	}
	poll(t, a.scq, 8, time.Second)
	for i, wc := range poll(t, b.rcq, 8, 2*time.Second) {
		want := make([]byte, 5000*(i+1))
		testutil.Fill(want, i)
		if wc.Status != ib.WCSuccess || int(wc.ByteLen) != len(want) || string(b.bytes(b.slot(i, len(want)))) != string(want) {
			t.Fatalf("message %d: %+v", i, wc)
		}
	}
}

// TestBadInputDuringTransfer throws garbage at a device while an RC
// transfer runs: every bad datagram is dropped and counted, the transfer
// completes intact.
func TestBadInputDuringTransfer(t *testing.T) {
	port := testutil.Port(14798)
	a := newHost(t, "127.0.0.1", port)
	b := newHost(t, "127.0.0.2", port)
	qa, qb := connect(t, ib.RC, a, b, 7, 7)
	// The injector sends from the fabric port, so its ICRCs are valid.
	// SO_REUSEADDR: the devices' multicast sockets hold the wildcard port.
	d := net.Dialer{LocalAddr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9), Port: int(port)}, Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) })
	}}
	conn, err := d.Dial("udp4", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	packet := func(bth wire.BTH, icrcOK bool) []byte {
		b := make([]byte, wire.BTHLen+8+wire.ICRCLen)
		bth.Encode(b)
		crc := wire.DatagramICRC(b, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.9"), port), netip.MustParseAddr("127.0.0.2"), port)
		if !icrcOK {
			crc++
		}
		b[len(b)-4], b[len(b)-3], b[len(b)-2], b[len(b)-1] = byte(crc), byte(crc>>8), byte(crc>>16), byte(crc>>24)
		return b
	}
	ok := wire.BTH{Opcode: wire.OpRCSendOnly, PKey: ib.DefaultPKey, DestQP: qb.Num(), PSN: 0x100}
	wrongPKey, unknownQP, otherPartition := ok, ok, ok
	wrongPKey.PKey = 0x8005
	otherPartition.PKey = 0x7fff & 0x7005
	unknownQP.DestQP = qb.Num() ^ 0x800000
	bad := map[string][][]byte{
		"rx_drop_malformed":    {{1, 2, 3}, packet(ok, true)[:11], {0x77, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		"rx_drop_bad_icrc":     {packet(ok, false)},
		"rx_drop_pkey":         {packet(wrongPKey, true), packet(otherPartition, true)},
		"rx_drop_unknown_qp":   {packet(unknownQP, true)},
		"rx_drop_wrong_source": {packet(ok, true)}, // right QP, wrong peer
	}
	const n = 200
	for i := range n {
		qb.PostRecv([]ib.RecvWR{{ID: uint64(i), SGE: b.slot(i, 65536)}})
	}
	for i := range n {
		s := a.slot(i, 1000+i*300)
		testutil.Fill(a.bytes(s), i)
		qa.PostSend([]ib.SendWR{{ID: uint64(i), SGE: s}})
		for _, ds := range bad {
			for _, d := range ds {
				conn.Write(d)
			}
		}
	}
	wcs := poll(t, b.rcq, n, 10*time.Second)
	for i, wc := range wcs {
		want := make([]byte, 1000+i*300)
		testutil.Fill(want, i)
		if wc.Status != ib.WCSuccess || string(b.bytes(b.slot(i, len(want)))) != string(want) {
			t.Fatalf("message %d: %+v", i, wc)
		}
	}
	for name, ds := range bad {
		if v := CounterValue(b.dev.Counters(), name); v != uint64(n*len(ds)) {
			t.Errorf("%s = %d, want %d", name, v, n*len(ds))
		}
	}
}

// TestRNRWaitSurvivesAnACK: an ACK for everything before an RNR-NAKed
// packet must not cancel the RNR wait. It once stopped the QP's only timer,
// and the requester stalled for good with work outstanding.
func TestRNRWaitSurvivesAnACK(t *testing.T) {
	a := newHost(t, "127.0.0.1", testutil.Port(14799))
	b := newHost(t, "127.0.0.2", testutil.Port(14799))
	qa, _ := connect(t, ib.RC, a, b, 1, 7)
	b.dev.Close() // no real ACKs: the test plays the responder
	s := a.slot(0, 100)
	if _, err := qa.PostSend([]ib.SendWR{{ID: 1, SGE: s}, {ID: 2, SGE: s}}); err != nil {
		t.Fatal(err)
	}
	q := qa.(*qp)
	first := wire.PSN(0xfffff0) // connect's send PSN for a
	peer, local := q.destAddr, a.dev.fab.local
	q.onAck(ib.DefaultPKey, first.Add(1), wire.RNRNAK(1, 0), peer, local) // the second message found no receive
	q.onAck(ib.DefaultPKey, first, wire.ACK(1), peer, local)              // ...and the first one is acknowledged
	// The second message must be sent again after the RNR wait; the peer
	// is gone, so it ends in a retry-exceeded error, not in silence.
	wcs := poll(t, a.scq, 2, 3*time.Second)
	if wcs[0].ID != 1 || wcs[0].Status != ib.WCSuccess || wcs[1].ID != 2 || wcs[1].Status != ib.WCRetryExceeded {
		t.Fatalf("completions %+v: want 1 success, then 2 retry-exceeded", wcs)
	}
}
