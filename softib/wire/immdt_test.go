package wire

import (
	"bytes"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

func TestImmDt(t *testing.T) {
	wire := testutil.Unhex(t, `de ad be ef`) // big-endian, as written by the sender
	got, err := DecodeImmDt(wire)
	if err != nil || got != 0xdeadbeef {
		t.Fatalf("decoded %#x, %v", got, err)
	}
	var b [ImmDtLen]byte
	if err := PutImmDt(b[:], 0xdeadbeef); err != nil || !bytes.Equal(b[:], wire) {
		t.Fatalf("encoded % x, %v", b, err)
	}
	_, err = DecodeImmDt(wire[:3])
	testutil.WantField(t, err, "ImmDt", "header")
	testutil.WantField(t, PutImmDt(b[:3], 1), "ImmDt", "buffer")
}

func FuzzDecodeImmDt(f *testing.F) {
	f.Add([]byte{0xde, 0xad, 0xbe, 0xef})
	f.Add([]byte{0xde})
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := DecodeImmDt(in)
		if err != nil {
			return
		}
		var b [ImmDtLen]byte
		if PutImmDt(b[:], v) != nil || !bytes.Equal(b[:], in[:ImmDtLen]) {
			t.Fatalf("re-encoded % x from % x", b, in)
		}
	})
}
