package cm

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/ipoibd/ipoibd/mad"
)

// golden is a CM MAD written by hand from the spec tables, the message it
// carries, and the bits the spec marks reserved.
type golden struct {
	wire     []byte
	tid      uint64
	msg      Message
	reserved []mask
}

// mask marks reserved bits of one payload octet.
type mask struct {
	off  int // payload offset
	bits byte
}

// goldens lists every message's vector; each is defined in its message's
// _test.go file.
var goldens = map[string]golden{
	"REQ":      {goldenREQ, 0x0123456789abcdef, &wantREQ, reservedREQ},
	"MRA":      {goldenMRA, 0x1122334455667788, &wantMRA, reservedMRA},
	"REJ":      {goldenREJ, 0x2233445566778899, &wantREJ, reservedREJ},
	"REP":      {goldenREP, 0x0123456789abcdef, &wantREP, reservedREP},
	"RTU":      {goldenRTU, 0x33445566778899aa, &wantRTU, nil},
	"DREQ":     {goldenDREQ, 0x445566778899aabb, &wantDREQ, reservedDREQ},
	"DREP":     {goldenDREP, 0x5566778899aabbcc, &wantDREP, nil},
	"SIDR_REQ": {goldenSIDRREQ, 0x66778899aabbccdd, &wantSIDRREQ, reservedSIDRREQ},
	"SIDR_REP": {goldenSIDRREP, 0x778899aabbccddee, &wantSIDRREP, reservedSIDRREP},
	"LAP":      {goldenLAP, 0x8899aabbccddeeff, &wantLAP, reservedLAP},
	"APR":      {goldenAPR, 0x99aabbccddeeff00, &wantAPR, reservedAPR},
}

// rsv marks whole reserved octets at payload offsets off..off+n-1.
func rsv(off, n int) []mask {
	m := make([]mask, n)
	for i := range m {
		m[i] = mask{off + i, 0xff}
	}
	return m
}

// hdr is the CM MAD header as docs/ib-cm-messages.md lays it out: base version 1, class
// 0x07, class version 2, method Send, status 0, class-specific 0, the
// transaction ID, the attribute ID, 2 reserved octets, attribute modifier 0.
func hdr(tid, attr string) string {
	return "01 07 02 03" + "0000 0000" + tid + attr + "0000" + "00000000"
}

// z is n zero octets in hex.
func z(n int) string { return strings.Repeat("00", n) }

// madHex joins hex fragments into a MAD and panics unless it is exactly 256
// octets, so a miscounted vector fails at once.
func madHex(parts ...string) []byte {
	s := strings.ReplaceAll(strings.Join(parts, ""), " ", "")
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	if len(b) != MADLen {
		panic(fmt.Sprintf("golden MAD has %d octets", len(b)))
	}
	return b
}

// notCarried returns, per MAD octet, the bits a decode-then-marshal round
// trip does not preserve: reserved bits, and the header fields MarshalMAD
// always writes as zero (Status, ClassSpecific, reserved, AttributeModifier).
func notCarried(g golden) [MADLen]byte {
	var m [MADLen]byte
	for _, i := range []int{4, 5, 6, 7, 18, 19, 20, 21, 22, 23} {
		m[i] = 0xff
	}
	for _, r := range g.reserved {
		m[mad.HeaderLen+r.off] |= r.bits
	}
	return m
}

func goldenFor(attr AttrID) (golden, bool) {
	g, ok := goldens[attr.String()]
	return g, ok
}
