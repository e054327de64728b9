package encap

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// HeaderLen is the size of the IPoIB encapsulation header that starts every
// UD and RC/UC payload.
const HeaderLen = 4

// EtherTypes of the payloads IPoIB carries (spec §1). Linux also sends TIPC
// (0x88CA); ipoibd does not.
const (
	EtherTypeIPv4 uint16 = 0x0800
	EtherTypeARP  uint16 = 0x0806
	EtherTypeRARP uint16 = 0x8035
	EtherTypeIPv6 uint16 = 0x86DD
)

const headerFormat = "IPoIB header"

// PutHeader writes the encapsulation header into b[:4]: the EtherType of
// the payload and a zero reserved field.
func PutHeader(b []byte, etherType uint16) error {
	if err := ib.NeedLen(headerFormat, "buffer", b, HeaderLen); err != nil {
		return err
	}
	_ = b[3]
	binary.BigEndian.PutUint16(b[0:2], etherType)
	b[2], b[3] = 0, 0
	return nil
}

// ParseHeader reads the EtherType from the encapsulation header in b[:4].
// The reserved field is ignored, as the spec asks of receivers. Which
// EtherTypes to accept is the caller's decision.
func ParseHeader(b []byte) (etherType uint16, err error) {
	if err := ib.NeedLen(headerFormat, "Type", b, 2); err != nil {
		return 0, err
	}
	// A frame too short for the reserved field is not an IPoIB frame,
	// even though the field's value does not matter.
	if err := ib.NeedLen(headerFormat, "Reserved", b, HeaderLen); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint16(b[0:2]), nil
}
