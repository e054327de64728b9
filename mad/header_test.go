package mad

import (
	"bytes"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

// goldens are common headers written by hand from the layout of IBA
// 13.4.2: a CM REQ as ipoibd sends it, and an SA answer with every field
// non-zero.
var goldens = []struct {
	name string
	wire string
	hdr  Header
}{
	{
		"CM REQ",
		`01 07 02 03          # base version 1, class CM, class version 2, method Send
		 0000 0000           # Status, ClassSpecific
		 0123456789abcdef    # TransactionID
		 0010 0000           # AttributeID REQ, reserved
		 00000000            # AttributeModifier`,
		Header{BaseVersion: 1, MgmtClass: ClassCM, ClassVersion: 2, Method: 0x03,
			TransactionID: 0x0123456789abcdef, AttributeID: 0x0010},
	},
	{
		"SA GetTableResp",
		`01 03 02 92          # base version 1, class SA, class version 2, R | method 0x12
		 001c abcd           # Status, ClassSpecific
		 0123456789abcdef    # TransactionID
		 0035 0000           # AttributeID PathRecord, reserved
		 89abcdef            # AttributeModifier`,
		Header{BaseVersion: 1, MgmtClass: ClassSA, ClassVersion: 2, Method: 0x92,
			Status: 0x1c, ClassSpecific: 0xabcd, TransactionID: 0x0123456789abcdef,
			AttributeID: 0x35, AttributeModifier: 0x89abcdef},
	},
}

func TestGoldenHeaders(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			wire := testutil.Unhex(t, g.wire)
			h, err := DecodeHeader(wire)
			if err != nil || h != g.hdr {
				t.Fatalf("DecodeHeader = %+v, %v; want %+v", h, err, g.hdr)
			}
			// Stale octets must not leak into the reserved ones, and octets
			// past the header stay untouched.
			b := bytes.Repeat([]byte{0xee}, HeaderLen+4)
			if err := g.hdr.Encode(b); err != nil || !bytes.Equal(b[:HeaderLen], wire) {
				t.Fatalf("Encode = % x, %v; want % x", b[:HeaderLen], err, wire)
			}
			if !bytes.Equal(b[HeaderLen:], []byte{0xee, 0xee, 0xee, 0xee}) {
				t.Errorf("Encode wrote past the header: % x", b[HeaderLen:])
			}
			if h.IsResponse() != (wire[3]&0x80 != 0) {
				t.Errorf("IsResponse = %v for method %#02x", h.IsResponse(), wire[3])
			}
		})
	}
}

func TestHeaderShort(t *testing.T) {
	b := make([]byte, HeaderLen-1)
	testutil.WantField(t, Header{}.Encode(b), "MAD header", "buffer")
	_, err := DecodeHeader(b)
	testutil.WantField(t, err, "MAD header", "header")
}

// The reserved octets 18-19 are ignored on decode.
func TestHeaderReserved(t *testing.T) {
	wire := testutil.Unhex(t, goldens[0].wire)
	wire[18], wire[19] = 0xff, 0xff
	if h, err := DecodeHeader(wire); err != nil || h != goldens[0].hdr {
		t.Errorf("reserved octets changed the header: %+v, %v", h, err)
	}
}

var testClass = Class{Name: "CM", Title: "Communication Management", ID: ClassCM, Version: 2}

func TestClassDecode(t *testing.T) {
	w := make([]byte, Len)
	copy(w, testutil.Unhex(t, goldens[0].wire))
	edit := func(i int, v byte) []byte {
		b := bytes.Clone(w)
		b[i] = v
		return b
	}
	if h, err := testClass.Decode(w); err != nil || h != goldens[0].hdr {
		t.Fatalf("Decode = %+v, %v", h, err)
	}
	for _, tc := range []struct {
		name  string
		wire  []byte
		field string
	}{
		{"empty", nil, "length"},
		{"header only", w[:HeaderLen], "length"},
		{"one short", w[:Len-1], "length"},
		{"one long", append(bytes.Clone(w), 0), "length"},
		{"base version 2", edit(0, 2), "BaseVersion"},
		{"SA class", edit(1, ClassSA), "MgmtClass"},
		{"class version 1", edit(2, 1), "ClassVersion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := testClass.Decode(tc.wire)
			testutil.WantField(t, err, "CM MAD", tc.field)
			// A readable header comes back with the error, for its TID.
			if readable := len(tc.wire) == Len; readable != (h.TransactionID == goldens[0].hdr.TransactionID) {
				t.Errorf("header %+v returned with %v", h, err)
			}
		})
	}
}

func TestNoAllocations(t *testing.T) {
	w := make([]byte, Len)
	copy(w, testutil.Unhex(t, goldens[1].wire))
	h := goldens[1].hdr
	n := testing.AllocsPerRun(100, func() {
		_ = h.Encode(w)
		_, _ = DecodeHeader(w)
		_, _ = Class{Name: "SA", ID: ClassSA, Version: 2}.Decode(w)
	})
	if n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// FuzzHeader: the header codec round-trips every 24 octets except the
// reserved octets 18-19, and Class.Decode never panics.
func FuzzHeader(f *testing.F) {
	for _, g := range goldens {
		f.Add(testutil.Unhex(f, g.wire))
	}
	f.Add([]byte{1, 7, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = testClass.Decode(b)
		h, err := DecodeHeader(b)
		if err != nil {
			if len(b) >= HeaderLen {
				t.Fatalf("%d octets refused: %v", len(b), err)
			}
			return
		}
		var out [HeaderLen]byte
		if err := h.Encode(out[:]); err != nil {
			t.Fatalf("%+v does not encode: %v", h, err)
		}
		want := bytes.Clone(b[:HeaderLen])
		want[18], want[19] = 0, 0
		if !bytes.Equal(out[:], want) {
			t.Fatalf("re-encoded % x from % x", out, want)
		}
	})
}
