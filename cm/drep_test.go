package cm

// goldenDREP follows IBA Table 113 (docs/ib-cm-messages.md); comments give
// payload offsets.
var goldenDREP = madHex(
	hdr("5566778899aabbcc", "0016"),
	"fedcba98",         // 0 Local Communication ID
	"76543210",         // 4 Remote Communication ID
	"03", z(222), "5a", // 8 Private Data
)

var wantDREP = DREP{
	LocalCommID:  0xfedcba98,
	RemoteCommID: 0x76543210,
	PrivateData:  [DREPPrivateDataLen]byte{0: 0x03, 223: 0x5a},
}
