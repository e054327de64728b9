package cm

import "testing"

// goldenMRA follows IBA Table 107 (docs/ib-cm-messages.md); comments give
// payload offsets.
var goldenMRA = madHex(
	hdr("1122334455667788", "0011"),
	"0a0b0c0d",         // 0 Local Communication ID
	"1a1b1c1d",         // 4 Remote Communication ID
	"40",               // 8 Message MRAed REP (1)<<6
	"b8",               // 9 Service Timeout 0x17<<3
	"c1", z(220), "5a", // 10 Private Data
)

var wantMRA = MRA{
	LocalCommID:    0x0a0b0c0d,
	RemoteCommID:   0x1a1b1c1d,
	MessageMRAed:   MsgREP,
	ServiceTimeout: 0x17,
	PrivateData:    [MRAPrivateDataLen]byte{0: 0xc1, 221: 0x5a},
}

var reservedMRA = []mask{{8, 0x3f}, {9, 0x07}}

func TestMRAErrors(t *testing.T) {
	m := wantMRA
	m.MessageMRAed = 3
	testEncodeError(t, &m, "Message MRAed")
	m = wantMRA
	m.ServiceTimeout = 32
	testEncodeError(t, &m, "Service Timeout")
	testDecodeErrors(t, "MRA", []decodeErrorCase{
		{"Message MRAed", map[int]byte{8: 0xc0}},
	}, func(p []byte) error { _, err := DecodeMRA(p); return err })
}
