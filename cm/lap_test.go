package cm

import (
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

// goldenLAP follows IBA Table 115 (docs/ib-cm-messages.md); comments give
// payload offsets.
var goldenLAP = madHex(
	hdr("8899aabbccddeeff", "0019"),
	"0c0d0e0f",     // 0 Local Communication ID
	"1c1d1e1f",     // 4 Remote Communication ID
	"00000000",     // 8 reserved
	"3a4b5c",       // 12 Remote QPN/EECN
	"b0",           // 15 Remote CM Response Timeout 0x16<<3
	"00000000",     // 16 reserved
	"2a3b", "4c5d", // 20 Alternate Local LID; 22 Alternate Remote LID
	"fe80000000000000 0002c90300000001", // 24 Alternate Local GID
	"fe80000000000000 0002c90300000002", // 40 Alternate Remote GID
	"9abcd0",                            // 56 Alternate Flow Label 0x9abcd<<4 | 4 reserved bits
	"e4",                                // 59 Alternate Traffic Class
	"7f",                                // 60 Alternate Hop Limit
	"0c",                                // 61 Alternate Packet Rate 0x0c
	"a8",                                // 62 Alternate SL 10<<4 | Subnet Local 1<<3
	"98",                                // 63 Alternate Local ACK Timeout 0x13<<3
	"06", z(166), "5a",                  // 64 Private Data
)

var wantLAP = LAP{
	LocalCommID:             0x0c0d0e0f,
	RemoteCommID:            0x1c1d1e1f,
	RemoteQPN:               0x3a4b5c,
	RemoteCMResponseTimeout: 0x16,
	Alternate: Path{
		LocalLID: 0x2a3b, RemoteLID: 0x4c5d,
		LocalGID: testutil.MustGID("fe80::2:c903:0:1"), RemoteGID: testutil.MustGID("fe80::2:c903:0:2"),
		FlowLabel: 0x9abcd, TrafficClass: 0xe4, HopLimit: 0x7f, PacketRate: 0x0c,
		SL: 10, SubnetLocal: true, LocalACKTimeout: 0x13,
	},
	PrivateData: [LAPPrivateDataLen]byte{0: 0x06, 167: 0x5a},
}

var reservedLAP = concat(rsv(8, 4), []mask{{15, 0x07}}, rsv(16, 4),
	[]mask{{58, 0x0f}, {61, 0xc0}, {62, 0x07}, {63, 0x07}})

func TestLAPEncodeErrors(t *testing.T) {
	tests := []struct {
		field string
		edit  func(*LAP)
	}{
		{"Remote QPN/EECN", func(m *LAP) { m.RemoteQPN = 1 << 24 }},
		{"Remote CM Response Timeout", func(m *LAP) { m.RemoteCMResponseTimeout = 32 }},
		{"Alternate Flow Label", func(m *LAP) { m.Alternate.FlowLabel = 1 << 20 }},
		{"Alternate Packet Rate", func(m *LAP) { m.Alternate.PacketRate = 64 }},
		{"Alternate SL", func(m *LAP) { m.Alternate.SL = 16 }},
		{"Alternate Local ACK Timeout", func(m *LAP) { m.Alternate.LocalACKTimeout = 32 }},
	}
	for _, tt := range tests {
		m := wantLAP
		tt.edit(&m)
		testEncodeError(t, &m, tt.field)
	}
}
