package cm

import "testing"

// goldenDREQ follows IBA Table 112 (docs/ib-cm-messages.md); comments give
// payload offsets.
var goldenDREQ = madHex(
	hdr("445566778899aabb", "0015"),
	"13579bdf",     // 0 Local Communication ID
	"2468ace0",     // 4 Remote Communication ID
	"c0de42", "00", // 8 Remote QPN/EECN; 11 reserved
	"02", z(218), "5a", // 12 Private Data
)

var wantDREQ = DREQ{
	LocalCommID:  0x13579bdf,
	RemoteCommID: 0x2468ace0,
	RemoteQPN:    0xc0de42,
	PrivateData:  [DREQPrivateDataLen]byte{0: 0x02, 219: 0x5a},
}

var reservedDREQ = []mask{{11, 0xff}}

func TestDREQErrors(t *testing.T) {
	m := wantDREQ
	m.RemoteQPN = 1 << 24
	testEncodeError(t, &m, "Remote QPN/EECN")
}
