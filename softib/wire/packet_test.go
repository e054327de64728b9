package wire

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// Whole packets as they travel in a UDP payload (BTH to ICRC), hand-built
// from the spec §3-§6 tables. ICRC slots are zero unless the ICRC is the
// point (see icrc_test.go).
const (
	pktUDSendOnly = `
		64 | b0 | ff ff | 00 | 00 00 48 | 00 | 00 00 07  # BTH: UD SEND Only, SE, PadCnt 3, P_Key 0xFFFF, DestQP 0x48, PSN 7
		00 00 0b 1b | 00 | 00 00 49                      # DETH: Q_Key 0x0B1B, SrcQP 0x49
		68 65 6c 6c 6f                                   # payload "hello"
		00 00 00                                         # pad
		ba 1b 1c 1b                                      # ICRC for 192.0.2.1 -> 192.0.2.2 (icrc_test.go)`
	pktRCSendFirst = `
		00 | 00 | 80 01 | 00 | 00 01 23 | 00 | ff ff fe  # BTH: RC SEND First, P_Key 0x8001, DestQP 0x123, PSN 0xFFFFFE
		00 01 02 03 04 05 06 07                          # payload
		00 00 00 00                                      # ICRC slot`
	pktRCSendMiddle = `
		01 | 00 | 80 01 | 00 | 00 01 23 | 00 | ff ff ff  # BTH: RC SEND Middle, PSN 0xFFFFFF
		08 09 0a 0b 0c 0d 0e 0f                          # payload
		00 00 00 00                                      # ICRC slot`
	pktRCSendLast = `
		02 | b0 | 80 01 | 00 | 00 01 23 | 80 | 00 00 00  # BTH: RC SEND Last, SE, PadCnt 3, AckReq, PSN 0 (wrapped)
		10 11 12 13 14                                   # payload
		00 00 00                                         # pad
		00 00 00 00                                      # ICRC slot`
	pktRCAck = `
		11 | 00 | 80 01 | 00 | 00 01 23 | 00 | 00 00 00  # BTH: RC Acknowledge, PSN 0
		1f | 00 00 01                                    # AETH: ACK, no credit information, MSN 1
		00 00 00 00                                      # ICRC slot`
	pktRCSendOnlyImmEmpty = `
		05 | 80 | ff ff | 00 | 00 00 10 | 80 | 00 00 2a  # BTH: RC SEND Only with Immediate, SE, AckReq, PSN 42
		de ad be ef                                      # ImmDt
		00 00 00 00                                      # ICRC slot (no payload)`
	pktUDSendOnlyImm = `
		65 | 00 | ff ff | 00 | ff ff ff | 00 | 00 00 00  # BTH: UD SEND Only with Immediate, multicast QPN
		00 00 0b 1b | 00 | 00 00 49                      # DETH
		01 02 03 04                                      # ImmDt
		aa bb cc dd                                      # payload
		00 00 00 00                                      # ICRC slot`
)

var goldenPackets = []struct {
	name string
	wire string
	want Packet // Payload given as its octets
	hdr  int    // header length: where the payload starts
}{
	{"UD SEND Only", pktUDSendOnly, Packet{
		BTH:     BTH{Opcode: OpUDSendOnly, SE: true, PadCnt: 3, PKey: 0xffff, DestQP: 0x48, PSN: 7},
		DETH:    DETH{QKey: 0x0b1b, SrcQP: 0x49},
		Payload: []byte("hello"),
	}, 20},
	{"RC SEND First", pktRCSendFirst, Packet{
		BTH:     BTH{Opcode: OpRCSendFirst, PKey: 0x8001, DestQP: 0x123, PSN: 0xfffffe},
		Payload: []byte{0, 1, 2, 3, 4, 5, 6, 7},
	}, 12},
	{"RC SEND Middle", pktRCSendMiddle, Packet{
		BTH:     BTH{Opcode: OpRCSendMiddle, PKey: 0x8001, DestQP: 0x123, PSN: 0xffffff},
		Payload: []byte{8, 9, 10, 11, 12, 13, 14, 15},
	}, 12},
	{"RC SEND Last", pktRCSendLast, Packet{
		BTH:     BTH{Opcode: OpRCSendLast, SE: true, PadCnt: 3, PKey: 0x8001, DestQP: 0x123, AckReq: true, PSN: 0},
		Payload: []byte{0x10, 0x11, 0x12, 0x13, 0x14},
	}, 12},
	{"RC ACK", pktRCAck, Packet{
		BTH:     BTH{Opcode: OpRCAck, PKey: 0x8001, DestQP: 0x123},
		AETH:    ACK(1),
		Payload: []byte{},
	}, 16},
	{"RC SEND Only with Immediate, empty", pktRCSendOnlyImmEmpty, Packet{
		BTH:     BTH{Opcode: OpRCSendOnlyImm, SE: true, PKey: 0xffff, DestQP: 0x10, AckReq: true, PSN: 42},
		Imm:     0xdeadbeef,
		Payload: []byte{},
	}, 16},
	{"UD SEND Only with Immediate", pktUDSendOnlyImm, Packet{
		BTH:     BTH{Opcode: OpUDSendOnlyImm, PKey: 0xffff, DestQP: ib.MulticastQPN},
		DETH:    DETH{QKey: 0x0b1b, SrcQP: 0x49},
		Imm:     0x01020304,
		Payload: []byte{0xaa, 0xbb, 0xcc, 0xdd},
	}, 24},
}

// samePacket compares packets by value, payloads by content.
func samePacket(a, b *Packet) bool {
	return a.BTH == b.BTH && a.DETH == b.DETH && a.AETH == b.AETH && a.Imm == b.Imm && bytes.Equal(a.Payload, b.Payload)
}

func TestParsePacketGolden(t *testing.T) {
	for _, tt := range goldenPackets {
		wire := testutil.Unhex(t, tt.wire)
		// Stale fields of a reused Packet must not survive.
		p := Packet{DETH: DETH{QKey: 1}, AETH: AETH{MSN: 1}, Imm: 1}
		if err := ParsePacket(wire, &p); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !samePacket(&p, &tt.want) {
			t.Errorf("%s: parsed %+v, want %+v", tt.name, p, tt.want)
		}
		// The payload aliases the input and cannot be appended into the pad.
		if len(p.Payload) > 0 && (unsafe.SliceData(p.Payload) != &wire[tt.hdr] || cap(p.Payload) != len(p.Payload)) {
			t.Errorf("%s: payload is not wire[%d:] with its length as capacity", tt.name, tt.hdr)
		}
		if n := tt.want.BTH.Opcode.HeaderLen(); n != tt.hdr {
			t.Errorf("%s: HeaderLen %d, want %d", tt.name, n, tt.hdr)
		}

		// Encoding: headers, payload, zero pad, zero ICRC slot.
		want := bytes.Clone(wire)
		clear(want[len(want)-ICRCLen:])
		got, err := AppendPacket([]byte{0xee}, &tt.want)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got[0] != 0xee || !bytes.Equal(got[1:], want) {
			t.Errorf("%s: AppendPacket\n% x\nwant\n% x", tt.name, got[1:], want)
		}
		if n := PacketLen(tt.want.BTH.Opcode, len(tt.want.Payload)); n != len(wire) {
			t.Errorf("%s: PacketLen %d, want %d", tt.name, n, len(wire))
		}
		hdr := bytes.Repeat([]byte{0xff}, 64)
		n, err := PutHeaders(hdr, &tt.want, len(tt.want.Payload))
		if err != nil || n != tt.hdr || !bytes.Equal(hdr[:n], wire[:n]) {
			t.Errorf("%s: PutHeaders % x (%d, %v), want % x", tt.name, hdr[:n], n, err, wire[:tt.hdr])
		}
	}
}

// PutHeaders computes PadCnt from the payload length, whatever p says.
func TestPutHeadersPadCount(t *testing.T) {
	p := Packet{BTH: BTH{Opcode: OpRCSendOnly, PadCnt: 2}}
	var b [BTHLen]byte
	for n, want := range []uint8{0, 3, 2, 1, 0, 3} {
		if _, err := PutHeaders(b[:], &p, n); err != nil {
			t.Fatal(err)
		}
		if got := (b[1] >> 4) & 3; got != want || PadCount(n) != want {
			t.Errorf("payload %d: PadCnt %d, PadCount %d, want %d", n, got, PadCount(n), want)
		}
	}
	if p.BTH.PadCnt != 2 {
		t.Error("PutHeaders changed its input")
	}
}

func TestParsePacketErrors(t *testing.T) {
	ud := testutil.Unhex(t, pktUDSendOnly)
	ack := testutil.Unhex(t, pktRCAck)
	last := testutil.Unhex(t, pktRCSendLast)
	immEmpty := testutil.Unhex(t, pktRCSendOnlyImmEmpty)
	with := func(b []byte, edit func([]byte)) []byte {
		b = bytes.Clone(b)
		edit(b)
		return b
	}
	big := make([]byte, BTHLen+MaxPayload+4+ICRCLen)
	copy(big, testutil.Unhex(t, "04 00 ff ff 00 00 00 01 00 00 00 00"))
	tests := []struct {
		name          string
		in            []byte
		format, field string
	}{
		{"empty", nil, "BTH", "header"},
		{"half a BTH", ud[:6], "BTH", "header"},
		{"RDMA WRITE", with(ud, func(b []byte) { b[0] = 0x0a }), "BTH", "OpCode"},
		{"TVer 1", with(ud, func(b []byte) { b[1] |= 1 }), "BTH", "TVer"},
		{"UD without DETH", ud[:BTHLen], "packet", "DETH"},
		{"UD with half a DETH", ud[:BTHLen+4], "packet", "DETH"},
		{"no ICRC", ud[:BTHLen+DETHLen], "packet", "ICRC"},
		{"3 octets after the DETH", ud[:BTHLen+DETHLen+3], "packet", "ICRC"},
		{"payload and pad not a word", append(bytes.Clone(ud[:len(ud)-ICRCLen-1]), 0, 0, 0, 0), "packet", "payload"},
		{"pad longer than payload and pad", with(immEmpty, func(b []byte) { b[1] |= 0x10 }), "BTH", "PadCnt"},
		{"ACK without AETH", ack[:BTHLen+2], "packet", "AETH"},
		{"ACK with reserved syndrome", with(ack, func(b []byte) { b[BTHLen] = 0x41 }), "AETH", "Syndrome"},
		{"ACK with payload", append(bytes.Clone(ack), 0, 0, 0, 0), "packet", "payload"},
		{"ACK with pad", with(ack, func(b []byte) { b[1] |= 0x30 }), "BTH", "PadCnt"},
		{"Immediate without ImmDt", immEmpty[:BTHLen+2], "packet", "ImmDt"},
		{"Immediate without ICRC", immEmpty[:BTHLen+ImmDtLen], "packet", "ICRC"},
		{"payload over 4096", big, "packet", "payload"},
		{"Last without ICRC", last[:BTHLen+3], "packet", "ICRC"},
	}
	for _, tt := range tests {
		p := Packet{Imm: 7}
		err := ParsePacket(tt.in, &p)
		t.Run(tt.name, func(t *testing.T) { testutil.WantField(t, err, tt.format, tt.field) })
		if p.Imm != 7 || p.Payload != nil {
			t.Errorf("%s: a failed parse changed the packet", tt.name)
		}
	}
	// The largest payload is fine.
	if err := ParsePacket(big[:len(big)-4], new(Packet)); err != nil {
		t.Errorf("4096-octet payload: %v", err)
	}
}

// The spec's ICRC vector 2 carries four vendor octets after the AETH; an
// ACK has no payload, so it is not a valid packet for softib.
func TestParsePacketSpecVector2(t *testing.T) {
	err := ParsePacket(testutil.Unhex(t, specVector2)[IPv4HeaderLen+UDPHeaderLen:], new(Packet))
	testutil.WantField(t, err, "packet", "payload")
}

func TestPutHeadersErrors(t *testing.T) {
	b := make([]byte, 64)
	tests := []struct {
		name          string
		p             Packet
		payload       int
		buf           []byte
		format, field string
	}{
		{"RDMA WRITE", Packet{BTH: BTH{Opcode: OpRCRDMAWriteOnly}}, 0, b, "BTH", "OpCode"},
		{"unknown opcode", Packet{BTH: BTH{Opcode: 0x80}}, 0, b, "BTH", "OpCode"},
		{"ACK with payload", Packet{BTH: BTH{Opcode: OpRCAck}}, 4, b, "packet", "payload"},
		{"negative payload", Packet{BTH: BTH{Opcode: OpRCSendOnly}}, -1, b, "packet", "payload"},
		{"payload over 4096", Packet{BTH: BTH{Opcode: OpRCSendOnly}}, MaxPayload + 1, b, "packet", "payload"},
		{"short buffer", Packet{BTH: BTH{Opcode: OpUDSendOnly}}, 0, b[:BTHLen+DETHLen-1], "packet", "buffer"},
		{"big PSN", Packet{BTH: BTH{Opcode: OpRCSendOnly, PSN: 1 << 24}}, 0, b, "BTH", "PSN"},
		{"big SrcQP", Packet{BTH: BTH{Opcode: OpUDSendOnly}, DETH: DETH{SrcQP: 1 << 24}}, 0, b, "DETH", "SrcQP"},
		{"big MSN", Packet{BTH: BTH{Opcode: OpRCAck}, AETH: AETH{MSN: 1 << 24}}, 0, b, "AETH", "MSN"},
	}
	for _, tt := range tests {
		_, err := PutHeaders(tt.buf, &tt.p, tt.payload)
		t.Run(tt.name, func(t *testing.T) { testutil.WantField(t, err, tt.format, tt.field) })
	}
	out, err := AppendPacket([]byte{1, 2}, &Packet{BTH: BTH{Opcode: OpRCAck}, Payload: []byte{1}})
	testutil.WantField(t, err, "packet", "payload")
	if !bytes.Equal(out, []byte{1, 2}) {
		t.Errorf("failed AppendPacket left % x", out)
	}
}

func TestParsePacketAllocs(t *testing.T) {
	wire := testutil.Unhex(t, pktUDSendOnly)
	var p Packet
	if n := testing.AllocsPerRun(100, func() { _ = ParsePacket(wire, &p) }); n != 0 {
		t.Errorf("ParsePacket: %v allocs", n)
	}
	hdr := make([]byte, 64)
	src := Packet{BTH: BTH{Opcode: OpUDSendOnly, PKey: 0xffff}, DETH: DETH{QKey: 1}}
	if n := testing.AllocsPerRun(100, func() { _, _ = PutHeaders(hdr, &src, 1000) }); n != 0 {
		t.Errorf("PutHeaders: %v allocs", n)
	}
}

// canonicalPacket is the wire form a parsed packet re-encodes to with
// AppendPacket: reserved bits, pad and ICRC slot zero.
func canonicalPacket(in []byte, p *Packet) []byte {
	c := bytes.Clone(in)
	c[4] &= 0xc0
	c[8] &= 0x80
	if p.BTH.Opcode.Headers()&HasDETH != 0 {
		c[BTHLen+4] = 0
	}
	clear(c[len(c)-ICRCLen-int(p.BTH.PadCnt):])
	return c
}

func FuzzParsePacket(f *testing.F) {
	for _, g := range goldenPackets {
		w := testutil.Unhex(f, g.wire)
		for n := range len(w) + 1 {
			f.Add(w[:n])
		}
		f.Add(append(bytes.Clone(w), 0, 0, 0, 0))
		c := bytes.Clone(w)
		c[4], c[8] = 0xff, c[8]|0x7f // reserved bits set
		f.Add(c)
	}
	for _, v := range []string{specVector1, specVector2} {
		f.Add(testutil.Unhex(f, v)[IPv4HeaderLen+UDPHeaderLen:])
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var p Packet
		if err := ParsePacket(in, &p); err != nil {
			return
		}
		if !p.BTH.Opcode.Valid() || len(p.Payload) > MaxPayload {
			t.Fatalf("accepted %v with %d octets", p.BTH.Opcode, len(p.Payload))
		}
		hdr := p.BTH.Opcode.HeaderLen()
		if len(p.Payload) > 0 && unsafe.SliceData(p.Payload) != &in[hdr] {
			t.Fatal("payload does not start after the headers")
		}
		if hdr+len(p.Payload)+int(p.BTH.PadCnt)+ICRCLen != len(in) {
			t.Fatalf("headers %d + payload %d + pad %d + ICRC != %d", hdr, len(p.Payload), p.BTH.PadCnt, len(in))
		}
		out, err := AppendPacket(nil, &p)
		if err != nil {
			t.Fatalf("parsed packet does not encode: %v", err)
		}
		if want := canonicalPacket(in, &p); !bytes.Equal(out, want) {
			t.Fatalf("re-encoded\n% x\nwant\n% x", out, want)
		}
	})
}

func BenchmarkParsePacket(b *testing.B) {
	// A full-MTU RC SEND Middle, the common packet of a 64 KiB message.
	wire, _ := AppendPacket(nil, &Packet{
		BTH:     BTH{Opcode: OpRCSendMiddle, PKey: 0xffff, DestQP: 0x123, PSN: 77},
		Payload: make([]byte, 4096),
	})
	var p Packet
	b.ReportAllocs()
	for b.Loop() {
		if err := ParsePacket(wire, &p); err != nil {
			b.Fatal(err)
		}
	}
}
