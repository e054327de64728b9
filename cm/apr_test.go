package cm

import "testing"

// goldenAPR follows IBA Table 116 (docs/ib-cm-messages.md); comments give
// payload offsets.
var goldenAPR = madHex(
	hdr("99aabbccddeeff00", "001a"),
	"0d0e0f10",        // 0 Local Communication ID
	"1d1e1f20",        // 4 Remote Communication ID
	"04",              // 8 Additional Information Length 4
	"05",              // 9 AP Status: is current
	"0000",            // 10 reserved
	"b1b2b3b4", z(68), // 12 Additional Information: 4 of 72 octets
	"07", z(146), "5a", // 84 Private Data
)

var wantAPR = APR{
	LocalCommID:          0x0d0e0f10,
	RemoteCommID:         0x1d1e1f20,
	AdditionalInfoLength: 4,
	Status:               APIsCurrent,
	AdditionalInfo:       [InfoLen]byte{0xb1, 0xb2, 0xb3, 0xb4},
	PrivateData:          [APRPrivateDataLen]byte{0: 0x07, 147: 0x5a},
}

var reservedAPR = rsv(10, 2)

func TestAPRErrors(t *testing.T) {
	m := wantAPR
	m.AdditionalInfoLength = InfoLen + 1
	testEncodeError(t, &m, "Additional Information Length")
	testDecodeErrors(t, "APR", []decodeErrorCase{
		{"Additional Information Length", map[int]byte{8: 73}},
	}, func(p []byte) error { _, err := DecodeAPR(p); return err })
	if APIsCurrent.String() != "IsCurrent" || APInvalidSL.String() != "InvalidSL" || APStatus(14).String() != "APStatus(14)" {
		t.Errorf("APStatus names: %v %v %v", APIsCurrent, APInvalidSL, APStatus(14))
	}
	if got := len(wantAPR.Info()); got != 4 {
		t.Errorf("Info() has %d octets", got)
	}
}
