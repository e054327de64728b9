package cm

import "testing"

// goldenREP follows IBA Table 110 (docs/ib-cm-messages.md); comments give
// payload offsets.
var goldenREP = madHex(
	hdr("0123456789abcdef", "0013"),
	"41424344",     // 0 Local Communication ID
	"11223344",     // 4 Remote Communication ID
	"51525354",     // 8 Local Q_Key
	"61a2b3", "00", // 12 Local QPN; 15 reserved
	"71c2d3", "00", // 16 Local EE Context Number; 19 reserved
	"8fe4d5", "00", // 20 Starting PSN; 23 reserved
	"03",                              // 24 Responder Resources
	"02",                              // 25 Initiator Depth
	"7b",                              // 26 Target ACK Delay 0x0f<<3 | Failover Accepted 1<<1 | End-to-End Flow Control 1
	"d0",                              // 27 RNR Retry Count 6<<5 | SRQ 1<<4
	"0002c90300fedcba",                // 28 Local CA GUID
	"00000049 0000fff4", z(187), "5a", // 36 Private Data: IPoIB {UD QPN 0x49, receive MTU 65524}
)

var wantREP = REP{
	LocalCommID:         0x41424344,
	RemoteCommID:        0x11223344,
	LocalQKey:           0x51525354,
	LocalQPN:            0x61a2b3,
	LocalEECN:           0x71c2d3,
	StartingPSN:         0x8fe4d5,
	ResponderResources:  3,
	InitiatorDepth:      2,
	TargetACKDelay:      0x0f,
	FailoverAccepted:    1,
	EndToEndFlowControl: true,
	RNRRetryCount:       6,
	SRQ:                 true,
	LocalCAGUID:         0x0002c90300fedcba,
	PrivateData:         [REPPrivateDataLen]byte{3: 0x49, 6: 0xff, 7: 0xf4, 195: 0x5a},
}

var reservedREP = []mask{{15, 0xff}, {19, 0xff}, {23, 0xff}, {27, 0x0f}}

func TestREPEncodeErrors(t *testing.T) {
	tests := []struct {
		field string
		edit  func(*REP)
	}{
		{"Local QPN", func(m *REP) { m.LocalQPN = 1 << 24 }},
		{"Local EE Context Number", func(m *REP) { m.LocalEECN = 1 << 24 }},
		{"Starting PSN", func(m *REP) { m.StartingPSN = 1 << 24 }},
		{"Target ACK Delay", func(m *REP) { m.TargetACKDelay = 32 }},
		{"Failover Accepted", func(m *REP) { m.FailoverAccepted = 4 }},
		{"RNR Retry Count", func(m *REP) { m.RNRRetryCount = 8 }},
	}
	for _, tt := range tests {
		m := wantREP
		tt.edit(&m)
		testEncodeError(t, &m, tt.field)
	}
}
