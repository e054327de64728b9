package cm

// goldenRTU follows IBA Table 111 (docs/ib-cm-messages.md); comments give
// payload offsets.
var goldenRTU = madHex(
	hdr("33445566778899aa", "0014"),
	"12345678",         // 0 Local Communication ID
	"9abcdef0",         // 4 Remote Communication ID
	"01", z(222), "5a", // 8 Private Data
)

var wantRTU = RTU{
	LocalCommID:  0x12345678,
	RemoteCommID: 0x9abcdef0,
	PrivateData:  [RTUPrivateDataLen]byte{0: 0x01, 223: 0x5a},
}
