package wire

import (
	"bytes"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// A BTH with every field distinct and non-zero (TVer must be 0; FECN and
// BECN are zero on RoCEv2), written from the spec §3 table.
const bthAllFields = `
	04          # OpCode 0x04 RC SEND Only
	f0          # SE 0x80, M 0x40, PadCnt 3 (0x30), TVer 0
	81 23       # P_Key 0x8123
	00          # FECN 0, BECN 0, Resv6a 0
	ab cd ef    # DestQP 0xABCDEF
	80          # AckReq 0x80, Resv7 0
	12 34 56    # PSN 0x123456`

var bthAllFieldsWant = BTH{
	Opcode: OpRCSendOnly, SE: true, MigReq: true, PadCnt: 3, PKey: 0x8123,
	DestQP: 0xabcdef, AckReq: true, PSN: 0x123456,
}

func TestBTHGolden(t *testing.T) {
	tests := []struct {
		name string
		wire string
		want BTH
	}{
		{"every field", bthAllFields, bthAllFieldsWant},
		{"UD SEND Only to QP1", `
			64 | 00 | ff ff | 00 | 00 00 01 | 00 | 00 00 00`,
			BTH{Opcode: OpUDSendOnly, PKey: 0xffff, DestQP: ib.QP1}},
		{"RC ACK, PSN 0xFFFFFF", `
			11 | 00 | 7f ff | 00 | 00 00 02 | 00 | ff ff ff`,
			BTH{Opcode: OpRCAck, PKey: 0x7fff, DestQP: 2, PSN: 0xffffff}},
		{"FECN and BECN", `
			24 | 10 | 80 01 | c0 | ff ff ff | 00 | 00 00 01`,
			BTH{Opcode: OpUCSendOnly, PadCnt: 1, PKey: 0x8001, FECN: true, BECN: true, DestQP: ib.MulticastQPN, PSN: 1}},
	}
	for _, tt := range tests {
		wire := testutil.Unhex(t, tt.wire)
		got, err := DecodeBTH(wire)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got != tt.want {
			t.Errorf("%s: decoded %+v, want %+v", tt.name, got, tt.want)
		}
		var b [BTHLen]byte
		if err := tt.want.Encode(b[:]); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !bytes.Equal(b[:], wire) {
			t.Errorf("%s: encoded % x, want % x", tt.name, b, wire)
		}
	}
}

// Reserved bits (Resv6a, Resv7) are ignored on decode and zero on encode.
func TestBTHReservedBits(t *testing.T) {
	wire := testutil.Unhex(t, bthAllFields)
	wire[4] |= 0x3f
	wire[8] |= 0x7f
	got, err := DecodeBTH(wire)
	if err != nil || got != bthAllFieldsWant {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	// Encode overwrites every octet, whatever the buffer held.
	b := bytes.Repeat([]byte{0xff}, BTHLen)
	got.Encode(b)
	if want := testutil.Unhex(t, bthAllFields); !bytes.Equal(b, want) {
		t.Fatalf("encoded % x, want % x", b, want)
	}
}

func TestBTHErrors(t *testing.T) {
	wire := testutil.Unhex(t, bthAllFields)
	_, err := DecodeBTH(wire[:11])
	testutil.WantField(t, err, "BTH", "header")

	tver := bytes.Clone(wire)
	tver[1] |= 0x01
	_, err = DecodeBTH(tver)
	testutil.WantField(t, err, "BTH", "TVer")

	for _, op := range []byte{0x0a, 0x11 + 1, 0x16, 0x40, 0x66, 0xff} {
		bad := bytes.Clone(wire)
		bad[0] = op
		_, err = DecodeBTH(bad)
		testutil.WantField(t, err, "BTH", "OpCode")
	}

	var b [BTHLen]byte
	enc := []struct {
		field string
		h     BTH
	}{
		{"PadCnt", BTH{PadCnt: 4}},
		{"TVer", BTH{TVer: 16}},
		{"DestQP", BTH{DestQP: 0x1000000}},
		{"PSN", BTH{PSN: 0x1000000}},
	}
	for _, e := range enc {
		testutil.WantField(t, e.h.Encode(b[:]), "BTH", e.field)
	}
	testutil.WantField(t, bthAllFieldsWant.Encode(b[:11]), "BTH", "buffer")
}

// canonicalBTH is the wire form a decoded BTH re-encodes to: reserved bits
// cleared.
func canonicalBTH(b []byte) []byte {
	c := bytes.Clone(b[:BTHLen])
	c[4] &= 0xc0
	c[8] &= 0x80
	return c
}

func FuzzDecodeBTH(f *testing.F) {
	for _, s := range []string{bthAllFields, "64 00 ff ff 00 00 00 01 00 00 00 00", "11 00 00 00 ff 00 00 02 ff 00 00 00"} {
		w := testutil.Unhex(f, s)
		for n := 0; n <= len(w); n += 3 {
			f.Add(w[:n])
		}
		f.Add(w)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := DecodeBTH(in)
		if err != nil {
			return
		}
		var b [BTHLen]byte
		if err := h.Encode(b[:]); err != nil {
			t.Fatalf("decoded %+v does not encode: %v", h, err)
		}
		if want := canonicalBTH(in); !bytes.Equal(b[:], want) {
			t.Fatalf("re-encoded % x, want % x", b, want)
		}
	})
}
