package softib

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// noiseRecord is one forged response, decoded from four fuzz octets:
//
//	octet 0: bits 0-1 kind (ACK, RNR NAK, NAK, NAK), bits 2-4 NAK code
//	         (0-3, or reserved 4-7), bit 5 from the peer's address (else a
//	         stranger's), bit 6 PSN near the requester's window (else half
//	         the PSN space away)
//	octet 1: RNR timer (codes 1-23: up to 30 ms, so a run stays short;
//	         the longest timer has its own test)
//	octets 2-3: PSN offset
type noiseRecord struct {
	aeth     wire.AETH
	fromPeer bool
	near     bool
	offset   uint16
}

func decodeNoise(b []byte) []noiseRecord {
	var out []noiseRecord
	for len(b) >= 4 && len(out) < 32 {
		r := noiseRecord{fromPeer: b[0]&0x20 != 0, near: b[0]&0x40 != 0, offset: binary.BigEndian.Uint16(b[2:4])}
		switch b[0] & 3 {
		case 0:
			r.aeth = wire.ACK(uint32(r.offset))
		case 1:
			r.aeth = wire.RNRNAK(1+b[1]%23, 0)
		default:
			r.aeth = wire.NAK(b[0]>>2&7, 0)
		}
		out = append(out, r)
		b = b[4:]
	}
	return out
}

// waitCounters waits until the device counters add up to at least want.
func waitCounters(t *testing.T, d *Device, want uint64, names ...string) {
	t.Helper()
	sum := func() (n uint64) {
		for _, name := range names {
			n += CounterValue(d.Counters(), name)
		}
		return n
	}
	deadline := time.Now().Add(5 * time.Second)
	for sum() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%v add up to %d, want %d", names, sum(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// harmful reports whether a record may legitimately change the
// connection: only a response from the peer's address for a PSN the
// requester has outstanding can (an ACK for data the responder never got
// loses it; a fatal NAK fails the QP).
func (r noiseRecord) harmful() bool { return r.fromPeer && r.near }

// noiseSize and noiseStamp shape message i of a noisy transfer: 8 to
// 9007 octets (one to three packets at MTU 4096), its number first.
func noiseSize(i int) int { return 8 + i*1237%9000 }

// noisePort is the fabric port of the fuzz target's devices, one per
// process: fuzzing runs workers in parallel processes, and devices of two
// workers on one port would take each other's packets.
var noisePort = uint16(20000 + os.Getpid()%20000)

func noiseStamp(b []byte, i int) {
	testutil.Fill(b, i)
	binary.LittleEndian.PutUint32(b, uint32(i))
}

// FuzzRCResponseNoise feeds random ACKs, NAKs and RNR NAKs (PSNs, codes,
// timers, sources) to the requester of a live RC connection while it
// carries messages. Noise that a real requester must ignore (a stranger's,
// or for a PSN not outstanding) changes nothing: every message arrives, in
// order, and every forged packet is counted. Noise from the peer's address
// for an outstanding PSN may break the connection, but never silently:
// every send completes, what arrives is in order, and unless everything
// arrived the requester reports an error.
func FuzzRCResponseNoise(f *testing.F) {
	rec := func(kind, code uint8, peer, near bool, timer uint8, off uint16) []byte {
		b0 := kind | code<<2
		if peer {
			b0 |= 0x20
		}
		if near {
			b0 |= 0x40
		}
		return []byte{b0, timer, byte(off >> 8), byte(off)}
	}
	cat := func(rs ...[]byte) []byte {
		var out []byte
		for _, r := range rs {
			out = append(out, r...)
		}
		return out
	}
	f.Add([]byte{})
	// Strangers, every kind, PSNs right in the window.
	f.Add(cat(rec(0, 0, false, true, 0, 1), rec(1, 0, false, true, 22, 0), rec(2, 0, false, true, 0, 2),
		rec(2, 1, false, true, 0, 0), rec(2, 2, false, true, 0, 1), rec(2, 3, false, true, 0, 3)))
	// The peer's address, PSNs far away: stale.
	f.Add(cat(rec(0, 0, true, false, 0, 7), rec(1, 0, true, false, 5, 9), rec(2, 1, true, false, 0, 0),
		rec(2, 2, true, false, 0, 500), rec(2, 3, true, false, 0, 0xffff), rec(2, 0, true, false, 0, 3)))
	// The peer's address and outstanding PSNs: sequence NAKs, RNR NAKs,
	// ACKs, a reserved code, then a fatal NAK.
	f.Add(cat(rec(2, 0, true, true, 0, 1), rec(1, 0, true, true, 10, 0), rec(1, 0, true, true, 3, 2), rec(2, 5, true, true, 0, 0)))
	f.Add(cat(rec(0, 0, true, true, 0, 0), rec(0, 0, true, true, 0, 5)))
	f.Add(cat(rec(2, 0, true, true, 0, 0), rec(2, 1, true, true, 0, 1)))
	f.Add(cat(rec(3, 2, true, true, 0, 0)))
	f.Fuzz(func(t *testing.T, noise []byte) {
		records := decodeNoise(noise)
		a := newHost(t, "127.0.0.1", noisePort)
		b := newHost(t, "127.0.0.2", noisePort)
		qa, qb := connect(t, ib.RC, a, b, 7, 7)
		q := qa.(*qp)
		stranger, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 9)})
		if err != nil {
			t.Fatal(err)
		}
		defer stranger.Close()
		spoofer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)}) // the peer's address, another port
		if err != nil {
			t.Fatal(err)
		}
		defer spoofer.Close()
		const msgs, probes = 40, 4
		for i := range msgs + probes {
			if _, err := qb.PostRecv([]ib.RecvWR{{ID: uint64(i), SGE: b.slot(i, 65536)}}); err != nil {
				t.Fatal(err)
			}
		}
		inject := func(r noiseRecord) {
			q.mu.Lock()
			psn := q.req.acked.Add(uint32(r.offset) % (wire.Distance(q.req.acked, q.req.hi) + 2)).Prev()
			if !r.near {
				psn = q.req.acked.Add(1<<22 + uint32(r.offset))
			}
			q.mu.Unlock()
			pkt := make([]byte, wire.BTHLen+wire.AETHLen+wire.ICRCLen)
			(&wire.BTH{Opcode: wire.OpRCAck, PKey: ib.DefaultPKey, DestQP: q.num, PSN: psn}).Encode(pkt)
			r.aeth.Encode(pkt[wire.BTHLen:])
			c := stranger
			if r.fromPeer {
				c = spoofer
			}
			src := c.LocalAddr().(*net.UDPAddr).AddrPort()
			src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
			wire.PutICRC(pkt[len(pkt)-wire.ICRCLen:], wire.DatagramICRC(pkt, src, netip.MustParseAddr("127.0.0.1"), noisePort))
			if _, err := c.WriteToUDP(pkt, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(noisePort)}); err != nil {
				t.Fatal(err)
			}
		}
		send := func(i int) {
			s := a.slot(i, noiseSize(i))
			noiseStamp(a.bytes(s), i)
			if _, err := qa.PostSend([]ib.SendWR{{ID: uint64(i), SGE: s}}); err != nil && err != ib.ErrBadState {
				t.Fatal(err)
			}
		}
		harmful, strangers := false, 0
		for i := range msgs {
			send(i)
			if i < len(records) {
				inject(records[i])
				harmful = harmful || records[i].harmful()
				if !records[i].fromPeer {
					strangers++
				}
			}
		}
		for i := msgs; i < len(records); i++ {
			inject(records[i])
			harmful = harmful || records[i].harmful()
			if !records[i].fromPeer {
				strangers++
			}
		}
		// Every stranger's packet is dealt with (counted) before the probes:
		// as from a wrong source, or, once harmful noise failed the QP, as
		// for a QP that does not receive.
		if harmful {
			waitCounters(t, a.dev, uint64(strangers), "rx_drop_wrong_source", "rx_drop_qp_state")
		} else {
			waitCounter(t, a.dev, "rx_drop_wrong_source", uint64(strangers))
		}
		for i := msgs; i < msgs+probes; i++ {
			send(i)
		}
		// Every send completes: the requester never stalls.
		failed := false
		sent := 0
		deadline := time.After(30 * time.Second)
		wcs := make([]ib.Completion, 64)
		for sent < msgs+probes {
			k := a.scq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != ib.WCSuccess {
					failed = true
				}
			}
			sent += k
			if k > 0 {
				continue
			}
			if failed && q.State() == ib.StateError {
				break // posts after the failure were refused, the rest flushed
			}
			select {
			case <-a.scq.Ready():
			case <-deadline:
				t.Fatalf("%d of %d sends completed; the requester stalled (QP %v)", sent, msgs+probes, q.State())
			}
		}
		if failed && !harmful {
			t.Fatal("noise that must be ignored broke the connection")
		}
		// What arrived is in order and intact; without a reported failure,
		// it is everything.
		want := msgs + probes
		if failed {
			want = 0
		}
		got := 0
		last := -1
		check := func(wc ib.Completion) {
			if wc.Status != ib.WCSuccess {
				t.Fatalf("receive %+v", wc)
			}
			buf := b.bytes(b.slot(int(wc.ID), int(wc.ByteLen)))
			seq := int(binary.LittleEndian.Uint32(buf))
			wantBuf := make([]byte, noiseSize(max(seq, 0)))
			noiseStamp(wantBuf, seq)
			if seq <= last || seq >= msgs+probes || string(buf) != string(wantBuf) {
				t.Fatalf("receive %d: message %d (%d octets) after %d", got, seq, wc.ByteLen, last)
			}
			last = seq
			got++
		}
		if want > 0 {
			for _, wc := range poll(t, b.rcq, want, 30*time.Second) {
				check(wc)
			}
		} else {
			for k := b.rcq.Poll(wcs); k > 0; k = b.rcq.Poll(wcs) {
				for _, wc := range wcs[:k] {
					check(wc)
				}
			}
		}
		if !harmful {
			if v := CounterValue(a.dev.Counters(), "rx_stale_acks"); v < uint64(len(records)-strangers) {
				t.Errorf("rx_stale_acks = %d, want at least the %d stale responses", v, len(records)-strangers)
			}
		}
	})
}
