package encap

import (
	"bytes"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

func TestHeaderGolden(t *testing.T) {
	tests := []struct {
		wire string // Type | Reserved
		typ  uint16
	}{
		{"08 00 | 00 00", EtherTypeIPv4},
		{"86 dd | 00 00", EtherTypeIPv6},
		{"08 06 | 00 00", EtherTypeARP},
		{"80 35 | 00 00", EtherTypeRARP},
		{"88 ca | 00 00", 0x88ca}, // TIPC: the codec does not filter
	}
	for _, tt := range tests {
		wire := testutil.Unhex(t, tt.wire)
		got, err := ParseHeader(wire)
		if err != nil || got != tt.typ {
			t.Errorf("ParseHeader(% x) = %#04x, %v, want %#04x", wire, got, err, tt.typ)
		}
		b := bytes.Repeat([]byte{0xff}, HeaderLen)
		if err := PutHeader(b, tt.typ); err != nil || !bytes.Equal(b, wire) {
			t.Errorf("PutHeader(%#04x) = % x, %v, want % x", tt.typ, b, err, wire)
		}
		// Reserved is ignored on receive, and the payload is not looked at.
		wire[2], wire[3] = 0xa5, 0x5a
		wire = append(wire, 0x45, 0x00)
		if got, err := ParseHeader(wire); err != nil || got != tt.typ {
			t.Errorf("reserved set: ParseHeader = %#04x, %v", got, err)
		}
	}
}

func TestHeaderErrors(t *testing.T) {
	tests := []struct {
		in    []byte
		field string
	}{
		{nil, "Type"},
		{[]byte{0x08}, "Type"},
		{[]byte{0x08, 0x00}, "Reserved"},
		{[]byte{0x08, 0x00, 0x00}, "Reserved"},
	}
	for _, tt := range tests {
		_, err := ParseHeader(tt.in)
		testutil.WantField(t, err, "IPoIB header", tt.field)
	}
	testutil.WantField(t, PutHeader(make([]byte, 3), EtherTypeIPv4), "IPoIB header", "buffer")
}

func FuzzParseHeader(f *testing.F) {
	for _, s := range []string{"08 00 00 00", "86 dd 00 00", "08 06 00 00", "80 35 ff ff", "08 06 00 00 00 20 08 00"} {
		w := testutil.Unhex(f, s)
		for n := 0; n <= len(w); n++ {
			f.Add(w[:n])
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		typ, err := ParseHeader(in)
		if err != nil {
			if len(in) >= HeaderLen {
				t.Fatalf("% x: %v", in, err)
			}
			return
		}
		var b [HeaderLen]byte
		if err := PutHeader(b[:], typ); err != nil {
			t.Fatal(err)
		}
		if b[0] != in[0] || b[1] != in[1] || b[2] != 0 || b[3] != 0 {
			t.Fatalf("re-encoded % x from % x", b, in[:HeaderLen])
		}
		if again, err := ParseHeader(b[:]); err != nil || again != typ {
			t.Fatalf("round trip: %#04x, %v, want %#04x", again, err, typ)
		}
	})
}

func TestHeaderAllocs(t *testing.T) {
	b := make([]byte, HeaderLen)
	if n := testing.AllocsPerRun(100, func() {
		_ = PutHeader(b, EtherTypeIPv6)
		_, _ = ParseHeader(b)
	}); n != 0 {
		t.Errorf("%v allocations per header round trip, want 0", n)
	}
}
