package cm

import (
	"bytes"
	"reflect"
	"sort"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/mad"
)

func goldenNames() []string {
	var names []string
	for n := range goldens {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func TestGoldenDecode(t *testing.T) {
	for _, name := range goldenNames() {
		g := goldens[name]
		h, m, err := DecodeMAD(g.wire)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		wantHdr := mad.Header{BaseVersion: 1, MgmtClass: 0x07, ClassVersion: 2, Method: 0x03,
			TransactionID: g.tid, AttributeID: uint16(g.msg.AttrID())}
		if h != wantHdr {
			t.Errorf("%s: header %+v, want %+v", name, h, wantHdr)
		}
		if !reflect.DeepEqual(m, g.msg) {
			t.Errorf("%s: decoded\n%+v\nwant\n%+v", name, m, g.msg)
		}
	}
}

func TestGoldenEncode(t *testing.T) {
	for _, name := range goldenNames() {
		g := goldens[name]
		// Stale contents must not leak into reserved or unused octets, and
		// octets past the MAD must stay untouched.
		b := bytes.Repeat([]byte{0xee}, MADLen+8)
		if err := g.msg.MarshalMAD(b, g.tid); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !bytes.Equal(b[:MADLen], g.wire) {
			t.Errorf("%s: encoded\n% x\nwant\n% x", name, b[:MADLen], g.wire)
		}
		if !bytes.Equal(b[MADLen:], bytes.Repeat([]byte{0xee}, 8)) {
			t.Errorf("%s: wrote past the MAD: % x", name, b[MADLen:])
		}
	}
}

// Every bit of a golden vector is either carried by the decoded message or
// reserved, exactly as the spec's tables say: flipping a carried bit changes
// the message (or makes it invalid), flipping a reserved bit does not, and
// re-encoding then clears it.
func TestEveryBitCarriedOrReserved(t *testing.T) {
	for _, name := range goldenNames() {
		g := goldens[name]
		reserved := notCarried(g)
		for i := mad.HeaderLen; i < MADLen; i++ {
			for bitMask := byte(0x80); bitMask != 0; bitMask >>= 1 {
				w := bytes.Clone(g.wire)
				w[i] ^= bitMask
				_, m, err := DecodeMAD(w)
				if reserved[i]&bitMask != 0 {
					if err != nil || !reflect.DeepEqual(m, g.msg) {
						t.Errorf("%s: reserved payload octet %d mask %#02x changed the message (err %v)", name, i-mad.HeaderLen, bitMask, err)
					}
					continue
				}
				if err == nil && reflect.DeepEqual(m, g.msg) {
					t.Errorf("%s: payload octet %d mask %#02x is not carried", name, i-mad.HeaderLen, bitMask)
				}
			}
		}
		// All reserved bits at once, header ones included.
		w := bytes.Clone(g.wire)
		w[18], w[19] = 0xff, 0xff
		for _, r := range g.reserved {
			w[mad.HeaderLen+r.off] |= r.bits
		}
		h, m, err := DecodeMAD(w)
		if err != nil || !reflect.DeepEqual(m, g.msg) {
			t.Errorf("%s: all reserved bits set: %+v, %v", name, m, err)
			continue
		}
		var b [MADLen]byte
		if err := m.MarshalMAD(b[:], h.TransactionID); err != nil || !bytes.Equal(b[:], g.wire) {
			t.Errorf("%s: reserved bits not cleared on encode (%v)", name, err)
		}
	}
}

func TestDecodeMADErrors(t *testing.T) {
	w := goldenRTU
	tests := []struct {
		name  string
		wire  []byte
		field string
	}{
		{"empty", nil, "length"},
		{"header only", w[:mad.HeaderLen], "length"},
		{"one short", w[:MADLen-1], "length"},
		{"one long", append(bytes.Clone(w), 0), "length"},
		{"base version 2", edit(w, map[int]byte{0: 2}), "BaseVersion"},
		{"subnet administration class", edit(w, map[int]byte{1: 0x03}), "MgmtClass"},
		{"class version 1", edit(w, map[int]byte{2: 1}), "ClassVersion"},
		{"method Get", edit(w, map[int]byte{3: 0x01}), "Method"},
		{"response bit", edit(w, map[int]byte{3: 0x83}), "Method"},
		{"ClassPortInfo", edit(w, map[int]byte{16: 0, 17: 0x01}), "AttributeID"},
		{"attribute 0", edit(w, map[int]byte{16: 0, 17: 0}), "AttributeID"},
		{"attribute 0x1b", edit(w, map[int]byte{16: 0, 17: 0x1b}), "AttributeID"},
		{"attribute 0x0110", edit(w, map[int]byte{16: 1, 17: 0x10}), "AttributeID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, m, err := DecodeMAD(tt.wire)
			if m != nil {
				t.Errorf("returned a message with the error")
			}
			testutil.WantField(t, err, "CM MAD", tt.field)
		})
	}
	// The header comes back with a message error, for logging by TID.
	h, _, err := DecodeMAD(edit(w, map[int]byte{17: 0x1b}))
	if err == nil || h.TransactionID != 0x33445566778899aa {
		t.Errorf("header with attribute error: %+v, %v", h, err)
	}
}

func edit(b []byte, at map[int]byte) []byte {
	b = bytes.Clone(b)
	for i, v := range at {
		b[i] = v
	}
	return b
}

func TestPayloadLength(t *testing.T) {
	decoders := map[string]func([]byte) error{
		"REQ":      func(p []byte) error { _, err := DecodeREQ(p); return err },
		"MRA":      func(p []byte) error { _, err := DecodeMRA(p); return err },
		"REJ":      func(p []byte) error { _, err := DecodeREJ(p); return err },
		"REP":      func(p []byte) error { _, err := DecodeREP(p); return err },
		"RTU":      func(p []byte) error { _, err := DecodeRTU(p); return err },
		"DREQ":     func(p []byte) error { _, err := DecodeDREQ(p); return err },
		"DREP":     func(p []byte) error { _, err := DecodeDREP(p); return err },
		"SIDR_REQ": func(p []byte) error { _, err := DecodeSIDRREQ(p); return err },
		"SIDR_REP": func(p []byte) error { _, err := DecodeSIDRREP(p); return err },
		"LAP":      func(p []byte) error { _, err := DecodeLAP(p); return err },
		"APR":      func(p []byte) error { _, err := DecodeAPR(p); return err },
	}
	for _, name := range goldenNames() {
		t.Run(name, func(t *testing.T) {
			dec := decoders[name]
			p := goldens[name].wire[mad.HeaderLen:]
			if err := dec(p); err != nil {
				t.Errorf("golden payload: %v", err)
			}
			for _, n := range []int{0, 1, 8, PayloadLen - 1} {
				testutil.WantField(t, dec(p[:n]), name, "payload")
			}
			testutil.WantField(t, dec(append(bytes.Clone(p), 0)), name, "payload")
		})
	}
}

func TestMarshalMADShortBuffer(t *testing.T) {
	for _, name := range goldenNames() {
		t.Run(name, func(t *testing.T) {
			b := make([]byte, MADLen-1)
			err := goldens[name].msg.MarshalMAD(b, 1)
			if !bytes.Equal(b, make([]byte, MADLen-1)) {
				t.Errorf("short buffer written to")
			}
			testutil.WantField(t, err, "CM MAD", "buffer")
		})
	}
}

// testEncodeError checks that m does not encode, that the error names field,
// and that the buffer is left untouched.
func testEncodeError(t *testing.T, m Message, field string) {
	t.Helper()
	b := bytes.Repeat([]byte{0xee}, MADLen)
	err := m.MarshalMAD(b, 1)
	if !bytes.Equal(b, bytes.Repeat([]byte{0xee}, MADLen)) {
		t.Errorf("%s encode with bad %s: buffer written", m.AttrID(), field)
	}
	testutil.WantField(t, err, m.AttrID().String(), field)
}

type decodeErrorCase struct {
	field string
	edits map[int]byte // payload offset -> new octet
}

// testDecodeErrors edits the golden vector of msg and checks that both the
// per-type decoder and DecodeMAD reject it naming the field.
func testDecodeErrors(t *testing.T, msg string, cases []decodeErrorCase, decode func([]byte) error) {
	t.Helper()
	for _, c := range cases {
		t.Run(msg+" "+c.field, func(t *testing.T) {
			w := bytes.Clone(goldens[msg].wire)
			for off, v := range c.edits {
				w[mad.HeaderLen+off] = v
			}
			testutil.WantField(t, decode(w[mad.HeaderLen:]), msg, c.field)
			_, _, err := DecodeMAD(w)
			testutil.WantField(t, err, msg, c.field)
		})
	}
}

func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{AttrREQ.String(), "REQ"},
		{AttrSIDRREP.String(), "SIDR_REP"},
		{AttrAPR.String(), "APR"},
		{AttrClassPortInfo.String(), "ClassPortInfo"},
		{AttrID(0x1b).String(), "AttrID(0x001b)"},
		{TransportUC.String(), "UC"},
		{TransportExt.String(), "Ext"},
		{TransportType(4).String(), "TransportType(4)"},
		{MsgREP.String(), "REP"},
		{MsgOther.String(), "other"},
		{MsgType(3).String(), "MsgType(3)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestNoAllocations(t *testing.T) {
	var b [MADLen]byte
	for _, name := range goldenNames() {
		g := goldens[name]
		if n := testing.AllocsPerRun(100, func() { _ = g.msg.MarshalMAD(b[:], g.tid) }); n != 0 {
			t.Errorf("%s MarshalMAD: %v allocations", name, n)
		}
	}
	req, rep, rej := wantREQ, wantREP, wantREJ
	p := goldenREQ[mad.HeaderLen:]
	allocs := testing.AllocsPerRun(100, func() {
		_ = req.MarshalMAD(b[:], 1)
		_ = rep.MarshalMAD(b[:], 2)
		_ = rej.MarshalMAD(b[:], 3)
		_, _ = DecodeREQ(p)
		_, _ = DecodeREP(goldenREP[mad.HeaderLen:])
		_, _ = DecodeREJ(goldenREJ[mad.HeaderLen:])
		_, _ = mad.DecodeHeader(goldenREQ)
		_ = (PrivateData{UDQPN: 0x48, ReceiveMTU: LinuxReceiveMTU}).Encode(req.PrivateData[:])
		_, _ = DecodePrivateData(p[140:])
	})
	if allocs != 0 {
		t.Errorf("concrete encoders and decoders: %v allocations", allocs)
	}
}

func BenchmarkMarshalREQ(b *testing.B) {
	m := wantREQ
	var buf [MADLen]byte
	b.ReportAllocs()
	for b.Loop() {
		if err := m.MarshalMAD(buf[:], 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeREQ(b *testing.B) {
	p := goldenREQ[mad.HeaderLen:]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeREQ(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeMAD(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeMAD(goldenREQ); err != nil {
			b.Fatal(err)
		}
	}
}
