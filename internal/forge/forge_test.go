package forge

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/ipoibd/ipoibd/softib"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// TestBuildChecksAsSoftibDoes: what Build makes parses and carries the
// ICRC softib computes for the same addresses, and not for others.
func TestBuildChecksAsSoftibDoes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst string
		p        *wire.Packet
	}{
		{"NAK v4", "10.1.0.3", "10.1.0.1", Ack(0x123456, 77, wire.NAK(wire.NAKRemoteAccessError, 5))},
		{"RNR NAK v6", "fd00::3", "fd00::1", Ack(0x42, 0xffffff, wire.RNRNAK(3, 0))},
		{"SEND with pad v4", "10.1.0.3", "10.1.0.2", RCSend(0x99, 1, []byte("odd"))},
		{"MAD v6", "fd00::3", "fd00::2", MAD(make([]byte, cm.MADLen))},
	} {
		src, dst := netip.MustParseAddr(tc.src), netip.MustParseAddr(tc.dst)
		b, err := Build([]byte("prefix"), src, dst, tc.p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if string(b[:6]) != "prefix" {
			t.Fatalf("%s: Build overwrote what was in the buffer", tc.name)
		}
		pkt := b[6:]
		var got wire.Packet
		if err := wire.ParsePacket(pkt, &got); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got.BTH.Opcode != tc.p.BTH.Opcode || got.BTH.DestQP != tc.p.BTH.DestQP || got.BTH.PSN != tc.p.BTH.PSN ||
			got.AETH != tc.p.AETH || got.DETH != tc.p.DETH || !bytes.Equal(got.Payload, tc.p.Payload) {
			t.Errorf("%s: parsed %+v, built %+v", tc.name, got, *tc.p)
		}
		for _, from := range []netip.Addr{src, dst} {
			var h [wire.IPv6HeaderLen + wire.UDPHeaderLen]byte
			hdr, _ := wire.AppendIPUDPHeaders(h[:0], from, dst, Port, Port, 1, len(pkt))
			ip := len(hdr) - wire.UDPHeaderLen
			crc, _ := wire.ICRC(hdr[:ip], hdr[ip:], pkt[:len(pkt)-wire.ICRCLen])
			if match := crc == wire.GetICRC(pkt[len(pkt)-wire.ICRCLen:]); match != (from == src) {
				t.Errorf("%s: ICRC as if from %v matches: %v", tc.name, from, match)
			}
		}
	}
}

// TestSendersReachSoftib: a softib device takes forged MADs from a host's
// own address and from a spoofed one as genuine, seeing the claimed source,
// and a sniffer on the victim's link sees them; forged ACKs reach the
// QP lookup (their ICRC passed). IPv4 and IPv6 underlays.
func TestSendersReachSoftib(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		n := testnet.New(t, testnet.Config{Hosts: 3, IPv6: v6})
		victim, attacker, claimed := n.Hosts[0].Addr, n.Hosts[1].Addr, n.Hosts[2].Addr
		var dev *softib.Device
		var mads ib.MADService
		var sn *Sniffer
		n.In(0, func() {
			var err error
			if dev, err = softib.Open(softib.Config{Addr: victim}); err != nil {
				t.Fatal(err)
			}
			if mads, err = dev.MADs(); err != nil {
				t.Fatal(err)
			}
			if sn, err = Sniff("eth0"); err != nil {
				t.Fatal(err)
			}
		})
		t.Cleanup(func() { sn.Close(); dev.Close() })
		var own, spoofed *Sender
		n.In(1, func() {
			var err error
			if own, err = Open(attacker); err != nil {
				t.Fatal(err)
			}
			if spoofed, err = OpenSpoofed(claimed); err != nil {
				t.Fatal(err)
			}
		})
		defer own.Close()
		defer spoofed.Close()

		for i, s := range []*Sender{own, spoofed} {
			from := Peer{GID: ib.GIDFromAddr(s.Src()), GUID: GUIDOf(ib.GIDFromAddr(s.Src())), UDQPN: 0x4242, QPN: 0x777, PSN: 9}
			mad, err := REQ(from, dev.Port().GID, 0x4848, uint32(100+i), uint64(i))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(victim, MAD(mad)); err != nil {
				t.Fatal(err)
			}
			select {
			case m := <-mads.Recv():
				if m.From.GID != from.GID {
					t.Errorf("MAD from %v arrived as from %v", s.Src(), m.From.GID)
				}
				_, msg, err := cm.DecodeMAD(m.Data[:])
				req, ok := msg.(*cm.REQ)
				if err != nil || !ok || req.LocalCAGUID != from.GUID || req.LocalCommID != uint32(100+i) {
					t.Errorf("MAD from %v: %v %+v", s.Src(), err, msg)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("v6=%v: the REQ from %v (spoofed: %v) did not reach the device; counters %v", v6, s.Src(), s.raw, dev.Counters())
			}
			seen, err := sn.Await(time.Now().Add(2*time.Second), func(p Seen) bool { return p.Dst == victim })
			if err != nil || seen.Src != s.Src() || seen.BTH.DestQP != ib.QP1 {
				t.Errorf("sniffer: %+v, %v; want a packet from %v to QP1", seen, err, s.Src())
			}
		}
		// An ACK for a QP that does not exist passes the ICRC check and
		// is dropped by the QP lookup.
		if err := spoofed.Send(victim, Ack(0xabcdef, 1, wire.ACK(0))); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for softib.CounterValue(dev.Counters(), "rx_drop_unknown_qp") != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("v6=%v: forged ACK not counted as for an unknown QP: %v", v6, dev.Counters())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if c := softib.CounterValue(dev.Counters(), "rx_drop_bad_icrc"); c != 0 {
			t.Errorf("v6=%v: %d forged packets failed the ICRC check", v6, c)
		}
	}
}

func TestIPoIBUDP(t *testing.T) {
	src, dst := netip.MustParseAddr("192.168.1.3"), netip.MustParseAddr("192.168.1.1")
	b, err := IPoIBUDP(src, dst, 4000, []byte("forged"))
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 0x08 || b[1] != 0 || len(b) != 4+20+8+6 || string(b[4+28:]) != "forged" {
		t.Fatalf("% x", b)
	}
	if sum := checksumOK(b[4:24]); !sum {
		t.Errorf("IPv4 header checksum wrong: % x", b[4:24])
	}
	if _, err := IPoIBUDP(netip.MustParseAddr("fd00::1"), dst, 1, nil); err == nil {
		t.Error("IPv6 source accepted")
	}
}

func checksumOK(h []byte) bool {
	var s uint32
	for i := 0; i < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return s == 0xffff
}

// FuzzParseSeen: the sniffer's parser takes whatever crosses a link; it
// never panics, and a packet Build made, behind its IP and UDP headers,
// reads back as built.
func FuzzParseSeen(f *testing.F) {
	src, dst := netip.MustParseAddr("10.1.0.3"), netip.MustParseAddr("10.1.0.1")
	for _, p := range []*wire.Packet{Ack(0x123, 5, wire.NAK(wire.NAKInvalidRequest, 1)), RCSend(7, 9, []byte("x")), MAD(make([]byte, cm.MADLen))} {
		b, _ := wire.AppendIPUDPHeaders(nil, src, dst, Port, Port, 64, wire.PacketLen(p.BTH.Opcode, len(p.Payload)))
		b, _ = Build(b, src, dst, p)
		f.Add(b)
	}
	f.Add([]byte{0x40, 0, 0, 0})
	f.Add(make([]byte, 48))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, ok := parseSeen(b)
		if !ok {
			return
		}
		if !s.Src.IsValid() || !s.Dst.IsValid() {
			t.Fatalf("parsed without addresses: %+v", s)
		}
		// What parsed re-encodes to the octets it came from.
		var h [wire.BTHLen]byte
		if err := s.BTH.Encode(h[:]); err != nil {
			t.Fatal(err)
		}
		again, err := wire.DecodeBTH(h[:])
		if err != nil || again != s.BTH {
			t.Fatalf("BTH %+v re-decodes as %+v, %v", s.BTH, again, err)
		}
	})
}

func TestParseSeenReadsBuild(t *testing.T) {
	src, dst := netip.MustParseAddr("fd00::3"), netip.MustParseAddr("fd00::1")
	p := Ack(0x123456, 0xabcdef, wire.RNRNAK(7, 3))
	b, _ := wire.AppendIPUDPHeaders(nil, src, dst, Port, Port, 64, wire.PacketLen(p.BTH.Opcode, 0))
	b, err := Build(b, src, dst, p)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := parseSeen(b)
	if !ok || s.Src != src || s.Dst != dst || s.BTH.DestQP != p.BTH.DestQP || s.BTH.PSN != p.BTH.PSN || s.AETH != p.AETH {
		t.Fatalf("parseSeen = %+v, %v; built %+v from %v to %v", s, ok, *p, src, dst)
	}
	b[wire.IPv6HeaderLen+2] = 0 // another UDP port: not RoCEv2
	if _, ok := parseSeen(b); ok {
		t.Error("a datagram to another port parsed as RoCEv2")
	}
}
