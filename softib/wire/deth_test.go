package wire

import (
	"bytes"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

func TestDETHGolden(t *testing.T) {
	tests := []struct {
		wire string
		want DETH
	}{
		{`12 34 56 78 | 00 | 9a bc de`, DETH{QKey: 0x12345678, SrcQP: 0x9abcde}}, // Q_Key | reserved | SrcQP
		{`80 01 00 00 | 00 | 00 00 01`, DETH{QKey: ib.GSIQKey, SrcQP: ib.QP1}},   // a CM MAD (spec §10)
		{`00 00 0b 1b | 00 | ff ff fe`, DETH{QKey: ib.DefaultIPoIBQKey, SrcQP: 0xfffffe}},
	}
	for _, tt := range tests {
		wire := testutil.Unhex(t, tt.wire)
		got, err := DecodeDETH(wire)
		if err != nil || got != tt.want {
			t.Errorf("% x: decoded %+v, %v, want %+v", wire, got, err, tt.want)
		}
		b := bytes.Repeat([]byte{0xff}, DETHLen)
		if err := tt.want.Encode(b); err != nil || !bytes.Equal(b, wire) {
			t.Errorf("%+v: encoded % x, %v, want % x", tt.want, b, err, wire)
		}
		// The reserved octet is ignored on decode.
		wire[4] = 0xa5
		if got, _ := DecodeDETH(wire); got != tt.want {
			t.Errorf("reserved octet set: decoded %+v", got)
		}
	}
}

func TestDETHErrors(t *testing.T) {
	_, err := DecodeDETH(make([]byte, 7))
	testutil.WantField(t, err, "DETH", "header")
	testutil.WantField(t, DETH{SrcQP: 0x1000000}.Encode(make([]byte, 8)), "DETH", "SrcQP")
	testutil.WantField(t, DETH{}.Encode(make([]byte, 7)), "DETH", "buffer")
}

func FuzzDecodeDETH(f *testing.F) {
	f.Add(testutil.Unhex(f, `12 34 56 78 00 9a bc de`))
	f.Add(testutil.Unhex(f, `80 01 00 00 ff 00 00 01`))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := DecodeDETH(in)
		if err != nil {
			return
		}
		var b [DETHLen]byte
		if err := h.Encode(b[:]); err != nil {
			t.Fatal(err)
		}
		want := bytes.Clone(in[:DETHLen])
		want[4] = 0
		if !bytes.Equal(b[:], want) {
			t.Fatalf("re-encoded % x, want % x", b, want)
		}
	})
}
