package softib

import (
	"context"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// scriptedPeer is the far end of an RC QP played by the test: a UDP socket
// on the peer's address that reads what the QP sends and answers with
// hand-made ACKs and NAKs, and a stranger's socket on another address.
type scriptedPeer struct {
	t        *testing.T
	a        *host
	q        *qp
	port     uint16
	conn     *net.UDPConn // 127.0.0.2:port, the QP's peer
	stranger *net.UDPConn // 127.0.0.9, anyone else on the underlay
	first    wire.PSN     // the QP's first send PSN
}

const (
	scriptedPeerQPN = 0x4d4d4d
	scriptedFirst   = wire.PSN(0xfffffe) // wraps during the tests
)

func reusePort(_, _ string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) })
}

// newScriptedPeer opens a device on 127.0.0.1:port with an RC QP whose
// peer is the test.
func newScriptedPeer(t *testing.T, port uint16, retry, rnrRetry uint8) *scriptedPeer {
	t.Helper()
	port = testutil.Port(port)
	a := newHost(t, "127.0.0.1", port)
	// SO_REUSEADDR: the device's multicast socket holds the wildcard port.
	lc := net.ListenConfig{Control: reusePort}
	pc, err := lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port).String())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)})
	if err != nil {
		t.Fatal(err)
	}
	p := &scriptedPeer{t: t, a: a, port: port, conn: pc.(*net.UDPConn), stranger: sc, first: scriptedFirst}
	t.Cleanup(func() { p.conn.Close(); p.stranger.Close() })
	iq, err := a.dev.CreateQP(ib.QPAttr{Type: ib.RC, SendCQ: a.scq, RecvCQ: a.rcq, MaxSend: 256, MaxRecv: 256})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []ib.QPModify{
		{State: ib.StateInit, PKey: ib.DefaultPKey},
		{State: ib.StateRTR, DestGID: ib.GIDFromAddr(netip.MustParseAddr("127.0.0.2")), DestQPN: scriptedPeerQPN, PathMTU: ib.MTU4096, RecvPSN: 0x77, MinRNRTmr: 1},
		{State: ib.StateRTS, SendPSN: uint32(scriptedFirst), Timeout: 16, RetryCount: retry, RNRRetry: rnrRetry},
	} {
		if err := iq.Modify(m); err != nil {
			t.Fatal(err)
		}
	}
	p.q = iq.(*qp)
	return p
}

// post sends messages of the given sizes.
func (p *scriptedPeer) post(sizes ...int) {
	p.t.Helper()
	for i, n := range sizes {
		if _, err := p.q.PostSend([]ib.SendWR{{ID: uint64(i), SGE: p.a.slot(i, n)}}); err != nil {
			p.t.Fatal(err)
		}
	}
}

// read returns the PSN of the next packet the QP sent.
func (p *scriptedPeer) read() wire.PSN {
	p.t.Helper()
	buf := make([]byte, 65536)
	_ = p.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := p.conn.Read(buf)
	if err != nil {
		p.t.Fatalf("waiting for the QP's packet: %v", err)
	}
	var pkt wire.Packet
	if err := wire.ParsePacket(buf[:n], &pkt); err != nil {
		p.t.Fatal(err)
	}
	return pkt.BTH.PSN
}

// readUntil reads the QP's packets until one carries psn.
func (p *scriptedPeer) readUntil(psn wire.PSN) {
	p.t.Helper()
	for p.read() != psn {
	}
}

// respond sends an ACK/NAK for psn to the QP, from the peer or from the
// stranger.
func (p *scriptedPeer) respond(fromStranger bool, psn wire.PSN, aeth wire.AETH) {
	p.t.Helper()
	b := make([]byte, wire.BTHLen+wire.AETHLen+wire.ICRCLen)
	(&wire.BTH{Opcode: wire.OpRCAck, PKey: ib.DefaultPKey, DestQP: p.q.num, PSN: psn & wire.PSNMask}).Encode(b)
	aeth.Encode(b[wire.BTHLen:])
	c := p.conn
	if fromStranger {
		c = p.stranger
	}
	src := c.LocalAddr().(*net.UDPAddr).AddrPort()
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	wire.PutICRC(b[len(b)-wire.ICRCLen:], wire.DatagramICRC(b, src, netip.MustParseAddr("127.0.0.1"), p.port))
	if _, err := c.WriteToUDP(b, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(p.port)}); err != nil {
		p.t.Fatal(err)
	}
}

// noCompletion checks that the QP completed nothing and still runs.
func (p *scriptedPeer) noCompletion() {
	p.t.Helper()
	var wc [4]ib.Completion
	if n := p.a.scq.Poll(wc[:]); n != 0 {
		p.t.Fatalf("completions %+v, want none", wc[:n])
	}
	if st := p.q.State(); st != ib.StateRTS {
		p.t.Fatalf("QP %v, want RTS", st)
	}
}

// wantCompletions waits for the sends' completions.
func (p *scriptedPeer) wantCompletions(status ...ib.WCStatus) {
	p.t.Helper()
	wcs := poll(p.t, p.a.scq, len(status), 5*time.Second)
	for i, wc := range wcs {
		if wc.Status != status[i] || wc.ID != uint64(i) {
			p.t.Fatalf("completion %d: %+v, want ID %d %v", i, wc, i, status[i])
		}
	}
}

// Responses from anyone but the peer, and the peer's responses for PSNs
// the requester does not have outstanding, are dropped and counted: they
// complete nothing, fail nothing and delay nothing.
func TestForgedAndStaleResponsesIgnored(t *testing.T) {
	p := newScriptedPeer(t, 14810, 7, 7)
	// Two messages: PSNs f, f+1 (5000 octets at MTU 4096) and f+2.
	p.post(5000, 100)
	f := p.first
	for i := range uint32(3) {
		if got := p.read(); got != f.Add(i) {
			t.Fatalf("packet %d: PSN %#x", i, got)
		}
	}
	tests := []struct {
		name     string
		stranger bool
		psn      wire.PSN
		aeth     wire.AETH
		counter  string
	}{
		{"stranger ACK", true, f.Add(2), wire.ACK(2), "rx_drop_wrong_source"},
		{"stranger NAK invalid request", true, f, wire.NAK(wire.NAKInvalidRequest, 0), "rx_drop_wrong_source"},
		{"stranger NAK remote access", true, f, wire.NAK(wire.NAKRemoteAccessError, 0), "rx_drop_wrong_source"},
		{"stranger NAK remote operational", true, f, wire.NAK(wire.NAKRemoteOperational, 0), "rx_drop_wrong_source"},
		{"stranger RNR NAK", true, f, wire.RNRNAK(0, 0), "rx_drop_wrong_source"},
		{"stranger sequence NAK", true, f.Add(1), wire.NAK(wire.NAKPSNSequenceError, 0), "rx_drop_wrong_source"},
		{"ACK acked-1", false, f.Prev(), wire.ACK(0), "rx_stale_acks"},
		{"ACK beyond sent", false, f.Add(3), wire.ACK(2), "rx_stale_acks"},
		{"ACK half the space away", false, f.Add(1 << 23), wire.ACK(2), "rx_stale_acks"},
		{"NAK invalid request, acked PSN", false, f.Prev(), wire.NAK(wire.NAKInvalidRequest, 0), "rx_stale_acks"},
		{"NAK remote access, far PSN", false, f.Add(1000), wire.NAK(wire.NAKRemoteAccessError, 0), "rx_stale_acks"},
		{"NAK remote operational, next PSN", false, f.Add(3), wire.NAK(wire.NAKRemoteOperational, 0), "rx_stale_acks"},
		{"RNR NAK acked PSN", false, f.Add(-5 & 0xffffff), wire.RNRNAK(0, 0), "rx_stale_acks"},
		{"RNR NAK mid-message", false, f.Add(1), wire.RNRNAK(0, 0), "rx_stale_acks"},
		{"sequence NAK beyond sent", false, f.Add(3), wire.NAK(wire.NAKPSNSequenceError, 0), "rx_stale_acks"},
		{"sequence NAK acked PSN", false, f.Prev(), wire.NAK(wire.NAKPSNSequenceError, 0), "rx_stale_acks"},
		{"reserved NAK code", false, f, wire.NAK(7, 0), "rx_drop_malformed"},
	}
	want := map[string]uint64{}
	for _, tc := range tests {
		p.respond(tc.stranger, tc.psn, tc.aeth)
		want[tc.counter]++
		waitCounter(t, p.a.dev, tc.counter, want[tc.counter])
		p.noCompletion()
	}
	if v := CounterValue(p.q.Counters(), "retransmits"); v != 0 {
		t.Errorf("retransmits = %d: a dropped response moved the requester", v)
	}
	p.respond(false, f.Add(2), wire.ACK(2))
	p.wantCompletions(ib.WCSuccess, ib.WCSuccess)
}

// A fatal NAK from the peer for an outstanding PSN fails the QP and says
// why; the same NAK for a PSN acknowledged already is stale.
func TestFatalNAK(t *testing.T) {
	tests := []struct {
		code uint8
		want ib.WCStatus
	}{
		{wire.NAKInvalidRequest, ib.WCRemoteInvalidRequest},
		{wire.NAKRemoteAccessError, ib.WCRemoteAccessError},
		{wire.NAKRemoteOperational, ib.WCRemoteOperationalError},
	}
	for i, tc := range tests {
		t.Run(tc.want.String(), func(t *testing.T) {
			p := newScriptedPeer(t, 14811+uint16(i), 7, 7)
			p.post(100, 100, 100)
			f := p.first
			p.readUntil(f.Add(2))
			p.respond(false, f, wire.ACK(1))
			p.wantCompletions(ib.WCSuccess)
			p.respond(false, f, wire.NAK(tc.code, 1)) // f is acknowledged: stale
			waitCounter(t, p.a.dev, "rx_stale_acks", 1)
			if st := p.q.State(); st != ib.StateRTS {
				t.Fatalf("stale NAK moved the QP to %v", st)
			}
			p.respond(false, f.Add(1), wire.NAK(tc.code, 1))
			wcs := poll(t, p.a.scq, 2, 5*time.Second)
			if wcs[0].ID != 1 || wcs[0].Status != tc.want || wcs[1].ID != 2 || wcs[1].Status != ib.WCFlushError {
				t.Fatalf("completions %+v, want 1 %v, 2 flushed", wcs, tc.want)
			}
			if st := p.q.State(); st != ib.StateError {
				t.Fatalf("QP %v, want Error", st)
			}
		})
	}
}

// RNR NAKs delay a QP and never wedge it: the longest timer (code 0,
// 655 ms), a storm of them, an RNR NAK during the wait. With a finite RNR
// retry count a storm ends in an error the QP reports.
func TestRNRNAKOnlyDelays(t *testing.T) {
	t.Run("longest timer", func(t *testing.T) {
		p := newScriptedPeer(t, 14820, 7, 7)
		p.post(100, 100)
		f := p.first
		p.readUntil(f.Add(1))
		p.respond(false, f.Add(1), wire.RNRNAK(0, 1)) // and it implies f arrived
		p.wantCompletions(ib.WCSuccess)
		p.readUntil(f.Add(1)) // sent again once the wait is over
		p.respond(false, f.Add(1), wire.ACK(2))
		if wc := poll(t, p.a.scq, 1, 5*time.Second)[0]; wc.Status != ib.WCSuccess || wc.ID != 1 {
			t.Fatalf("completion %+v", wc)
		}
	})
	t.Run("storm", func(t *testing.T) {
		p := newScriptedPeer(t, 14821, 7, 7)
		p.post(100)
		f := p.first
		p.readUntil(f)
		const storm = 300
		for i := range storm {
			p.respond(false, f, wire.RNRNAK(uint8(i%32), 0))
		}
		deadline := time.Now().Add(5 * time.Second)
		for CounterValue(p.q.Counters(), "rnr_naks_received") < storm {
			if time.Now().After(deadline) {
				t.Fatalf("rnr_naks_received = %d", CounterValue(p.q.Counters(), "rnr_naks_received"))
			}
			time.Sleep(time.Millisecond)
		}
		p.noCompletion()
		// The last timer (code 299%32 = 11, 480 µs) runs out and the
		// message goes again.
		p.readUntil(f)
		p.respond(false, f, wire.ACK(1))
		p.wantCompletions(ib.WCSuccess)
	})
	t.Run("storm with a finite RNR retry count", func(t *testing.T) {
		p := newScriptedPeer(t, 14822, 7, 3)
		p.post(100, 100)
		f := p.first
		p.readUntil(f.Add(1))
		for range 4 {
			p.respond(false, f, wire.RNRNAK(1, 0))
		}
		p.wantCompletions(ib.WCRNRRetryExceeded, ib.WCFlushError)
	})
}

// Sequence NAKs send packets again and never wedge the QP, also a NAK
// repeated for a PSN already sent again; once the PSN is acknowledged its
// NAK is stale.
func TestSequenceNAKOnlyDelays(t *testing.T) {
	p := newScriptedPeer(t, 14823, 7, 7)
	p.post(100, 100, 100)
	f := p.first
	p.readUntil(f.Add(2))
	p.respond(false, f.Add(1), wire.NAK(wire.NAKPSNSequenceError, 1))
	p.wantCompletions(ib.WCSuccess)
	p.readUntil(f.Add(2)) // f+1 and f+2 again
	p.respond(false, f.Add(1), wire.NAK(wire.NAKPSNSequenceError, 1))
	p.readUntil(f.Add(2)) // and again
	p.respond(false, f.Add(2), wire.ACK(3))
	wcs := poll(t, p.a.scq, 2, 5*time.Second)
	if wcs[0].ID != 1 || wcs[0].Status != ib.WCSuccess || wcs[1].ID != 2 || wcs[1].Status != ib.WCSuccess {
		t.Fatalf("completions %+v", wcs)
	}
	p.respond(false, f.Add(1), wire.NAK(wire.NAKPSNSequenceError, 3))
	waitCounter(t, p.a.dev, "rx_stale_acks", 1)
	if v := CounterValue(p.q.Counters(), "seq_naks_received"); v != 2 {
		t.Errorf("seq_naks_received = %d, want 2", v)
	}
}
