package wire

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

func TestLRHGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    LRH
		hex  string
	}{
		{"local UD", LRH{VL: 3, SL: 5, LNH: LNHLocal, DLID: 0x1234, PktLen: 0x1a, SLID: 0x0042}, "30 52 1234 001a 0042"},
		{"global, all bits", LRH{VL: 15, SL: 15, LNH: LNHGlobal, DLID: 0xc001, PktLen: 0x7ff, SLID: 0xbfff}, "f0 f3 c001 07ff bfff"},
		{"permissive", LRH{LNH: LNHLocal, DLID: PermissiveLID, PktLen: 7, SLID: 1}, "00 02 ffff 0007 0001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := testutil.Unhex(t, tc.hex)
			var b [LRHLen]byte
			if err := tc.h.Encode(b[:]); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b[:], want) {
				t.Fatalf("encoded % x, want % x", b, want)
			}
			got, err := DecodeLRH(want)
			if err != nil || got != tc.h {
				t.Fatalf("decoded %+v, %v; want %+v", got, err, tc.h)
			}
		})
	}
}

func TestLRHErrors(t *testing.T) {
	var b [LRHLen]byte
	for _, tc := range []struct {
		h     LRH
		field string
	}{
		{LRH{VL: 16}, "VL"},
		{LRH{LVer: 16}, "LVer"},
		{LRH{SL: 16}, "SL"},
		{LRH{LNH: 4}, "LNH"},
		{LRH{PktLen: 0x800}, "PktLen"},
	} {
		testutil.WantField(t, tc.h.Encode(b[:]), "LRH", tc.field)
	}
	testutil.WantField(t, LRH{}.Encode(b[:7]), "LRH", "buffer")
	_, err := DecodeLRH(b[:7])
	testutil.WantField(t, err, "LRH", "header")
	_, err = DecodeLRH(testutil.Unhex(t, "01 02 0001 0005 0002"))
	testutil.WantField(t, err, "LRH", "LVer")
	// Reserved bits are ignored on receive.
	h, err := DecodeLRH(testutil.Unhex(t, "00 0e 0001 f805 0002"))
	if err != nil || h.LNH != LNHLocal || h.PktLen != 5 {
		t.Fatalf("reserved bits set: %+v, %v", h, err)
	}
}

func TestGRHRoundTrip(t *testing.T) {
	g := GRH{TClass: 0xa5, FlowLabel: 0xfedcb, PayLen: 300, NxtHdr: grhNextIBA, HopLmt: 7,
		SGID: testutil.MustGID("fe80::1:2"), DGID: testutil.MustGID("ff12:401b:ffff::1")}
	var b [ib.GRHLen]byte
	if err := g.Encode(b[:]); err != nil {
		t.Fatal(err)
	}
	if want := testutil.Unhex(t, "6a 5f edcb 012c 1b 07"); !bytes.Equal(b[:8], want) {
		t.Fatalf("GRH word 0-1 % x, want % x", b[:8], want)
	}
	var got GRH
	if err := DecodeGRH(b[:], &got); err != nil || got != g {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	testutil.WantField(t, (&GRH{FlowLabel: 1 << 20}).Encode(b[:]), "GRH", "FlowLabel")
	b[0] = 0x40
	testutil.WantField(t, DecodeGRH(b[:], &got), "GRH", "IPVer")
}

// vcrcReference is the VCRC computed bit by bit from its definition, in
// the order an IB link sends bits (each octet least significant bit
// first): polynomial x^16+x^12+x^3+x+1, register preset to ones,
// complemented at the end.
func vcrcReference(b []byte) uint16 {
	reg := uint16(0xffff)
	for _, v := range b {
		for i := range 8 {
			bit := uint16(v>>i) & 1
			top := reg >> 15
			reg <<= 1
			if top^bit != 0 {
				reg ^= 0x100b
			}
		}
	}
	// The register's bits leave highest power first; as an octet-wise
	// little-endian value that is the register bit-reversed.
	var out uint16
	for i := range 16 {
		out |= (reg >> i & 1) << (15 - i)
	}
	return ^out
}

// vcrcCheck is the VCRC of the ASCII octets "123456789", the customary
// check value of a CRC's parameters.
const vcrcCheck = 0x0a3d

func TestVCRC(t *testing.T) {
	if got, want := VCRC([]byte("123456789")), vcrcReference([]byte("123456789")); got != want {
		t.Fatalf("VCRC(123456789) %#04x, reference %#04x", got, want)
	}
	// Golden: the value pinned once from the reference above.
	if got := VCRC([]byte("123456789")); got != vcrcCheck {
		t.Fatalf("VCRC(123456789) %#04x, want %#04x", got, vcrcCheck)
	}
	b := make([]byte, 300)
	for n := range len(b) {
		testutil.Fill(b[:n], n)
		d := StartVCRC()
		d.Update(b[:n/3])
		d.Update(b[n/3 : n])
		if got, want := d.Sum16(), vcrcReference(b[:n]); got != want || VCRC(b[:n]) != want {
			t.Fatalf("%d octets: VCRC %#04x in pieces, %#04x whole, reference %#04x", n, got, VCRC(b[:n]), want)
		}
	}
}

// ibICRCReference is the native ICRC from its definition: the masked
// copy of the packet hashed whole with hash/crc32.
func ibICRCReference(frame []byte, global bool) uint32 {
	n := len(frame) - VCRCLen - ICRCLen
	m := bytes.Clone(frame[:n])
	bth := LRHLen
	if global {
		for i := range LRHLen {
			m[i] = 0xff
		}
		g := m[LRHLen:]
		g[0] |= 0x0f
		g[1], g[2], g[3], g[7] = 0xff, 0xff, 0xff, 0xff
		bth += ib.GRHLen
	} else {
		m[0] |= 0xf0
	}
	m[bth+4] = 0xff
	return crc32.ChecksumIEEE(m)
}

func sampleIBFrames(t testing.TB) map[string]*IBFrame {
	payload := make([]byte, 1021)
	testutil.Fill(payload, 3)
	return map[string]*IBFrame{
		"UD local": {LRH: LRH{VL: 0, SL: 4, DLID: 0x0011, SLID: 0x0022}, Packet: Packet{
			BTH: BTH{Opcode: OpUDSendOnly, PKey: 0xffff, DestQP: 0x123456, PSN: 9, SE: true}, DETH: DETH{QKey: 0x0b1b, SrcQP: 0x654321}, Payload: payload}},
		"UD global multicast": {LRH: LRH{SL: 0, DLID: 0xc001, SLID: 0x0022}, HasGRH: true,
			GRH: GRH{TClass: 3, FlowLabel: 0x12345, HopLmt: 1, SGID: testutil.MustGID("fe80::2"), DGID: testutil.MustGID("ff12:401b:ffff::1")}, Packet: Packet{
				BTH: BTH{Opcode: OpUDSendOnly, PKey: 0xffff, DestQP: ib.MulticastQPN, PSN: 1}, DETH: DETH{QKey: 0x0b1b, SrcQP: 2}, Payload: payload[:64]}},
		"RC ACK": {LRH: LRH{SL: 1, DLID: 0x0022, SLID: 0x0011}, Packet: Packet{
			BTH: BTH{Opcode: OpRCAck, PKey: 0x8001, DestQP: 0x42, PSN: 0xfffffe}, AETH: ACK(5)}},
		"RC SEND middle": {LRH: LRH{DLID: 0x0023, SLID: 0x0011}, Packet: Packet{
			BTH: BTH{Opcode: OpRCSendMiddle, PKey: 0xffff, DestQP: 0x42, PSN: 77}, Payload: payload[:256]}},
	}
}

func TestIBFrameRoundTrip(t *testing.T) {
	for name, f := range sampleIBFrames(t) {
		t.Run(name, func(t *testing.T) {
			b, err := AppendIBFrame(nil, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != IBFrameLen(f.Packet.BTH.Opcode, f.HasGRH, len(f.Packet.Payload)) {
				t.Fatalf("frame of %d octets, IBFrameLen %d", len(b), IBFrameLen(f.Packet.BTH.Opcode, f.HasGRH, len(f.Packet.Payload)))
			}
			var got IBFrame
			if err := ParseIBFrame(b, &got); err != nil {
				t.Fatal(err)
			}
			want := *f
			want.LRH.LNH, want.LRH.PktLen = LNHLocal, uint16((len(b)-VCRCLen)/4)
			want.Packet.BTH.PadCnt = PadCount(len(f.Packet.Payload))
			if f.HasGRH {
				want.LRH.LNH = LNHGlobal
				want.GRH.NxtHdr, want.GRH.PayLen = grhNextIBA, uint16(len(b)-VCRCLen-LRHLen-ib.GRHLen)
			}
			if got.LRH != want.LRH || got.HasGRH != want.HasGRH || got.GRH != want.GRH || got.Packet.BTH != want.Packet.BTH ||
				got.Packet.DETH != want.Packet.DETH || got.Packet.AETH != want.Packet.AETH || !bytes.Equal(got.Packet.Payload, f.Packet.Payload) {
				t.Fatalf("parsed %+v\nwant   %+v", got, want)
			}
			n := len(b) - VCRCLen
			if icrc := GetICRC(b[n-ICRCLen : n]); icrc != ibICRCReference(b, f.HasGRH) {
				t.Fatalf("ICRC %#08x, reference %#08x", icrc, ibICRCReference(b, f.HasGRH))
			}
			if v := GetVCRC(b[n:]); v != vcrcReference(b[:n]) {
				t.Fatalf("VCRC %#04x, reference %#04x", v, vcrcReference(b[:n]))
			}
			if v, i := CheckIBCRCs(b, f.HasGRH); !v || !i {
				t.Fatalf("CheckIBCRCs: VCRC %v, ICRC %v", v, i)
			}
		})
	}
}

// TestIBCRCCoverage checks which fields each CRC covers: the VCRC all of
// them; the ICRC neither the VL nor BTH octet 4, on a global packet also
// neither the LRH nor the GRH's TClass, FlowLabel and HopLmt.
func TestIBCRCCoverage(t *testing.T) {
	frames := sampleIBFrames(t)
	for _, tc := range []struct {
		frame     string
		at        int
		xor       byte
		icrcValid bool
	}{
		{"UD local", 0, 0x50, true},               // VL
		{"UD local", 1, 0x10, false},              // SL
		{"UD local", 3, 0x01, false},              // DLID
		{"UD local", LRHLen + 4, 0x80, true},      // BTH FECN
		{"UD local", LRHLen + 20, 0x01, false},    // DETH
		{"UD local", LRHLen + 30, 0x01, false},    // payload
		{"UD global multicast", 1, 0x10, true},    // SL: the LRH is not covered
		{"UD global multicast", 7, 0x01, true},    // SLID
		{"UD global multicast", 8, 0x0f, true},    // TClass
		{"UD global multicast", 10, 0xff, true},   // FlowLabel
		{"UD global multicast", 15, 0xff, true},   // HopLmt
		{"UD global multicast", 16, 0x01, false},  // SGID
		{"UD global multicast", 47, 0x01, false},  // DGID
		{"UD global multicast", 48 + 4, 1, true},  // BTH octet 4
		{"UD global multicast", 48 + 5, 1, false}, // DestQP
	} {
		b, err := AppendIBFrame(nil, frames[tc.frame])
		if err != nil {
			t.Fatal(err)
		}
		global := frames[tc.frame].HasGRH
		b[tc.at] ^= tc.xor
		if v, _ := CheckIBCRCs(b, global); v {
			t.Errorf("%s: octet %d changed, VCRC still good", tc.frame, tc.at)
		}
		n := len(b) - VCRCLen
		PutVCRC(b[n:], VCRC(b[:n])) // as the next hop does
		if v, i := CheckIBCRCs(b, global); !v || i != tc.icrcValid {
			t.Errorf("%s: octet %d changed and VCRC redone: VCRC %v, ICRC %v, want ICRC %v", tc.frame, tc.at, v, i, tc.icrcValid)
		}
	}
}

func TestParseIBFrameErrors(t *testing.T) {
	good, err := AppendIBFrame(nil, sampleIBFrames(t)["UD global multicast"])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		mod           func(b []byte) []byte
		format, field string
	}{
		{"short", func(b []byte) []byte { return b[:5] }, "LRH", "header"},
		{"raw LNH", func(b []byte) []byte { b[1] &^= 3; return b }, "LRH", "LNH"},
		{"PktLen long", func(b []byte) []byte { b[5]++; return b }, "LRH", "PktLen"},
		{"cut", func(b []byte) []byte { return b[:len(b)-4] }, "LRH", "PktLen"},
		{"GRH IPVer", func(b []byte) []byte { b[8] = 0x40; return b }, "GRH", "IPVer"},
		{"GRH NxtHdr", func(b []byte) []byte { b[8+6] = 0x11; return b }, "GRH", "NxtHdr"},
		{"GRH PayLen", func(b []byte) []byte { b[8+5]--; return b }, "GRH", "PayLen"},
		{"BTH opcode", func(b []byte) []byte { b[48] = 0x1f; return b }, "BTH", "OpCode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f IBFrame
			err := ParseIBFrame(tc.mod(bytes.Clone(good)), &f)
			testutil.WantField(t, err, tc.format, tc.field)
			if f.LRH != (LRH{}) || f.HasGRH || f.GRH != (GRH{}) || f.Packet.BTH != (BTH{}) || f.Packet.Payload != nil {
				t.Fatalf("frame changed on error: %+v", f)
			}
		})
	}
}

func TestIBCodecsDoNotAllocate(t *testing.T) {
	f := sampleIBFrames(t)["UD global multicast"]
	b, _ := AppendIBFrame(nil, f)
	hdr := make([]byte, LRHLen+ib.GRHLen+BTHLen+DETHLen) // the largest header set softib sends
	var got IBFrame
	n := testing.AllocsPerRun(100, func() {
		if ParseIBFrame(b, &got) != nil {
			t.Fatal("parse")
		}
		if v, i := CheckIBCRCs(b, true); !v || !i {
			t.Fatal("CRCs")
		}
		if _, err := PutIBHeaders(hdr, f, len(f.Packet.Payload)); err != nil {
			t.Fatal(err)
		}
		SealIBFrame(b, true)
	})
	if n != 0 {
		t.Fatalf("%v allocations per frame", n)
	}
}

func FuzzParseIBFrame(f *testing.F) {
	for _, fr := range sampleIBFrames(f) {
		b, _ := AppendIBFrame(nil, fr)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr IBFrame
		if err := ParseIBFrame(b, &fr); err != nil {
			return
		}
		CheckIBCRCs(b, fr.HasGRH)
		// What parses re-encodes to the same frame, reserved bits and CRCs
		// aside.
		out, err := AppendIBFrame(nil, &fr)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", fr, err)
		}
		if len(out) != len(b) {
			t.Fatalf("re-encoded %d octets from %d", len(out), len(b))
		}
		var again IBFrame
		if err := ParseIBFrame(out, &again); err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if again.LRH != fr.LRH || again.GRH != fr.GRH || again.Packet.BTH != fr.Packet.BTH || !bytes.Equal(again.Packet.Payload, fr.Packet.Payload) {
			t.Fatalf("re-parsed %+v, want %+v", again, fr)
		}
		if v, i := CheckIBCRCs(out, again.HasGRH); !v || !i {
			t.Fatal("re-encoded frame fails its CRCs")
		}
	})
}

func FuzzLRH(f *testing.F) {
	f.Add(binary.BigEndian.AppendUint64(nil, 0x3052_1234_001a_0042))
	f.Add(binary.BigEndian.AppendUint64(nil, 0xf0f3_c001_07ff_bfff))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeLRH(b)
		if err != nil {
			return
		}
		var out [LRHLen]byte
		if err := h.Encode(out[:]); err != nil {
			t.Fatalf("encode %+v: %v", h, err)
		}
		want := bytes.Clone(b[:LRHLen])
		want[1] &^= 0x0c // reserved
		want[4] &= 0x07  // reserved
		if !bytes.Equal(out[:], want) {
			t.Fatalf("re-encoded % x from % x", out, b[:LRHLen])
		}
	})
}
