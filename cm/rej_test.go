package cm

import (
	"bytes"
	"fmt"
	"testing"
)

// goldenREJ follows IBA Table 108 (docs/ib-cm-messages.md); comments give
// payload offsets.
var goldenREJ = madHex(
	hdr("2233445566778899", "0012"),
	"21222324",                  // 0 Local Communication ID
	"31323334",                  // 4 Remote Communication ID
	"40",                        // 8 Message REJected REP (1)<<6
	"12",                        // 9 Reject Info Length 9<<1
	"001c",                      // 10 Reason 28 (Consumer Reject)
	"0002c90300abcdef77", z(63), // 12 ARI: 9 meaningful octets of 72
	"00000048", z(143), "5a", // 84 Private Data
)

var wantREJ = REJ{
	LocalCommID:      0x21222324,
	RemoteCommID:     0x31323334,
	MessageRejected:  MsgREP,
	RejectInfoLength: 9,
	Reason:           RejConsumerReject,
	ARI:              [InfoLen]byte{0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef, 0x77},
	PrivateData:      [REJPrivateDataLen]byte{3: 0x48, 147: 0x5a},
}

var reservedREJ = []mask{{8, 0x3f}, {9, 0x01}}

func TestREJErrors(t *testing.T) {
	m := wantREJ
	m.MessageRejected = 3
	testEncodeError(t, &m, "Message REJected")
	m = wantREJ
	m.RejectInfoLength = InfoLen + 1
	testEncodeError(t, &m, "Reject Info Length")
	m.RejectInfoLength = InfoLen // the whole ARI is allowed
	var b [MADLen]byte
	if err := m.MarshalMAD(b[:], 0); err != nil {
		t.Errorf("Reject Info Length 72: %v", err)
	}
	testDecodeErrors(t, "REJ", []decodeErrorCase{
		{"Message REJected", map[int]byte{8: 0xc0}},
		{"Reject Info Length", map[int]byte{9: 73 << 1}},
		{"Reject Info Length", map[int]byte{9: 0xfe}},
	}, func(p []byte) error { _, err := DecodeREJ(p); return err })
}

func TestREJInfo(t *testing.T) {
	if got := wantREJ.Info(); !bytes.Equal(got, []byte{0x00, 0x02, 0xc9, 0x03, 0x00, 0xab, 0xcd, 0xef, 0x77}) {
		t.Errorf("Info() = % x", got)
	}
	m := REJ{RejectInfoLength: 100} // never decoded, but Info must not panic
	if len(m.Info()) != InfoLen {
		t.Errorf("Info() with length 100 has %d octets", len(m.Info()))
	}
}

func TestRejectReasonString(t *testing.T) {
	tests := []struct {
		r    RejectReason
		want string
	}{
		{RejNoQP, "NoQP"},
		{1, "NoQP"},
		{RejTimeout, "Timeout"},
		{RejInvalidServiceID, "InvalidServiceID"},
		{RejStaleConnection, "StaleConnection"},
		{10, "StaleConnection"},
		{RejConsumerReject, "ConsumerReject"},
		{28, "ConsumerReject"},
		{RejInvalidAltFlowLabel, "InvalidAltFlowLabel"},
		{35, "VendorOptionNotSupported"},
		{0, "RejectReason(0)"},
		{34, "RejectReason(34)"},
		{36, "RejectReason(36)"},
		{0xffff, "RejectReason(65535)"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("RejectReason(%d).String() = %q, want %q", uint16(tt.r), got, tt.want)
		}
	}
	// Every code from 1 to 35 except 34 has a name.
	for r := RejectReason(1); r <= 35; r++ {
		if named := r.String() != fmt.Sprintf("RejectReason(%d)", r); named != (r != 34) {
			t.Errorf("code %d: String %q", r, r)
		}
	}
}
