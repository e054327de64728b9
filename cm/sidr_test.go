package cm

import "testing"

// goldenSIDRREQ follows IBA Table 119 (docs/ib-cm-messages.md); comments give payload
// offsets.
var goldenSIDRREQ = madHex(
	hdr("66778899aabbccdd", "0017"),
	"cafef00d",         // 0 Request ID
	"8abc",             // 4 Partition Key
	"0000",             // 6 reserved
	"0123456789abcdef", // 8 Service ID
	"04", z(214), "5a", // 16 Private Data
)

var wantSIDRREQ = SIDRREQ{
	RequestID:   0xcafef00d,
	PKey:        0x8abc,
	ServiceID:   0x0123456789abcdef,
	PrivateData: [SIDRREQPrivateDataLen]byte{0: 0x04, 215: 0x5a},
}

var reservedSIDRREQ = rsv(6, 2)

// goldenSIDRREP follows IBA Table 120 (docs/ib-cm-messages.md); comments give payload
// offsets.
var goldenSIDRREP = madHex(
	hdr("778899aabbccddee", "0018"),
	"cafef00d",     // 0 Request ID
	"04",           // 4 Status: redirect
	"10",           // 5 Additional Information Length 16
	"0000",         // 6 reserved
	"0f1e2d", "00", // 8 QPN; 11 reserved
	"0123456789abcdef",                         // 12 Service ID
	"11110b1b",                                 // 20 Q_Key
	"a0a1a2a3a4a5a6a7 a8a9aaabacadaeaf", z(56), // 24 Additional Information: 16 of 72 octets
	"05", z(134), "5a", // 96 Private Data
)

var wantSIDRREP = SIDRREP{
	RequestID:            0xcafef00d,
	Status:               SIDRRedirect,
	AdditionalInfoLength: 16,
	QPN:                  0x0f1e2d,
	ServiceID:            0x0123456789abcdef,
	QKey:                 0x11110b1b,
	AdditionalInfo: [InfoLen]byte{0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
		0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf},
	PrivateData: [SIDRREPPrivateDataLen]byte{0: 0x05, 135: 0x5a},
}

var reservedSIDRREP = concat(rsv(6, 2), rsv(11, 1))

func TestSIDRREPErrors(t *testing.T) {
	m := wantSIDRREP
	m.AdditionalInfoLength = InfoLen + 1
	testEncodeError(t, &m, "Additional Information Length")
	m = wantSIDRREP
	m.QPN = 1 << 24
	testEncodeError(t, &m, "QPN")
	testDecodeErrors(t, "SIDR_REP", []decodeErrorCase{
		{"Additional Information Length", map[int]byte{5: 73}},
		{"Additional Information Length", map[int]byte{5: 0xff}},
	}, func(p []byte) error { _, err := DecodeSIDRREP(p); return err })
	if got := len(wantSIDRREP.Info()); got != 16 {
		t.Errorf("Info() has %d octets", got)
	}
}

func TestSIDRStatusString(t *testing.T) {
	if SIDRRedirect.String() != "Redirect" || SIDRStatus(5).String() != "UnsupportedVersion" || SIDRStatus(6).String() != "SIDRStatus(6)" {
		t.Errorf("SIDRStatus names: %v %v %v", SIDRRedirect, SIDRStatus(5), SIDRStatus(6))
	}
}
