package wire

import (
	"bytes"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

func TestAETHGolden(t *testing.T) {
	tests := []struct {
		name string
		wire string // syndrome | MSN
		a    AETH   // built with the constructor under test
		kind AckKind
		code uint8 // credits, RNR timer code or NAK code
	}{
		{"ACK, no credit information", `1f | 12 34 56`, ACK(0x123456), AckKindACK, 0x1f},
		{"ACK, 5 credits", `05 | 00 00 00`, AETH{Syndrome: 5}, AckKindACK, 5},
		{"RNR NAK 1.28 ms", `2e | 00 00 07`, RNRNAK(14, 7), AckKindRNRNAK, 14},
		{"RNR NAK 655.36 ms", `20 | ff ff ff`, RNRNAK(0, 0xffffff), AckKindRNRNAK, 0},
		{"NAK PSN sequence error", `60 | 00 00 01`, NAK(NAKPSNSequenceError, 1), AckKindNAK, 0},
		{"NAK invalid request", `61 | 00 01 00`, NAK(NAKInvalidRequest, 0x100), AckKindNAK, 1},
		{"NAK remote access error", `62 | 01 00 00`, NAK(NAKRemoteAccessError, 0x10000), AckKindNAK, 2},
		{"NAK remote operational error", `63 | ab cd ef`, NAK(NAKRemoteOperational, 0xabcdef), AckKindNAK, 3},
	}
	for _, tt := range tests {
		wire := testutil.Unhex(t, tt.wire)
		got, err := DecodeAETH(wire)
		if err != nil || got != tt.a {
			t.Errorf("%s: decoded %+v, %v, want %+v", tt.name, got, err, tt.a)
		}
		var b [AETHLen]byte
		if err := tt.a.Encode(b[:]); err != nil || !bytes.Equal(b[:], wire) {
			t.Errorf("%s: encoded % x, %v, want % x", tt.name, b, err, wire)
		}
		if got.Kind() != tt.kind {
			t.Errorf("%s: kind %v, want %v", tt.name, got.Kind(), tt.kind)
		}
		var code uint8
		switch tt.kind {
		case AckKindACK:
			code = got.Credits()
		case AckKindRNRNAK:
			code = got.RNRTimerCode()
		case AckKindNAK:
			code = got.NAKCode()
		}
		if code != tt.code {
			t.Errorf("%s: code %d, want %d", tt.name, code, tt.code)
		}
	}
	if d := RNRNAK(14, 0).RNRTimer(); d != 1280*time.Microsecond {
		t.Errorf("RNR timer of code 14: %v", d)
	}
	// Constructors keep MSNs and codes in their fields.
	if a := NAK(0x23, 0x1234567); a.Syndrome != 0x63 || a.MSN != 0x234567 {
		t.Errorf("NAK(0x23, 0x1234567) = %+v", a)
	}
}

// The RNR timer table of spec §6, transcribed as the spec writes it.
func TestRNRTimerTable(t *testing.T) {
	ms := [32]string{
		"655.36", "0.01", "0.02", "0.03", "0.04", "0.06", "0.08", "0.12",
		"0.16", "0.24", "0.32", "0.48", "0.64", "0.96", "1.28", "1.92",
		"2.56", "3.84", "5.12", "7.68", "10.24", "15.36", "20.48", "30.72",
		"40.96", "61.44", "81.92", "122.88", "163.84", "245.76", "327.68", "491.52",
	}
	for code, s := range ms {
		want, err := time.ParseDuration(s + "ms")
		if err != nil {
			t.Fatal(err)
		}
		if got := RNRTimer(uint8(code)); got != want {
			t.Errorf("code %d: %v, want %v", code, got, want)
		}
		if got := RNRTimer(uint8(code) | 0xe0); got != want {
			t.Errorf("code %d with high bits: %v, want %v", code, got, want)
		}
	}
}

func TestAETHErrors(t *testing.T) {
	for _, syn := range []byte{0x40, 0x5f} {
		_, err := DecodeAETH([]byte{syn, 0, 0, 0})
		testutil.WantField(t, err, "AETH", "Syndrome")
	}
	_, err := DecodeAETH([]byte{0x1f, 0, 0})
	testutil.WantField(t, err, "AETH", "header")
	testutil.WantField(t, AETH{MSN: 0x1000000}.Encode(make([]byte, 4)), "AETH", "MSN")
	testutil.WantField(t, ACK(0).Encode(make([]byte, 3)), "AETH", "buffer")
}

func FuzzDecodeAETH(f *testing.F) {
	for _, s := range []string{"1f 12 34 56", "2e 00 00 07", "60 00 00 01", "63 ab cd ef", "40 00 00 00", "1f 00"} {
		f.Add(testutil.Unhex(f, s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := DecodeAETH(in)
		if err != nil {
			return
		}
		var b [AETHLen]byte
		if err := a.Encode(b[:]); err != nil || !bytes.Equal(b[:], in[:AETHLen]) {
			t.Fatalf("re-encoded % x (%v) from % x", b, err, in)
		}
		if a.Kind() == AckKindReserved {
			t.Fatalf("reserved syndrome 0x%02x accepted", a.Syndrome)
		}
	})
}
