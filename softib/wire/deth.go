package wire

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// DETH is the datagram extended transport header of UD packets (spec §4).
type DETH struct {
	QKey  ib.QKey
	SrcQP ib.QPN
}

// Encode writes the DETH into b[:8]; the reserved octet is zero.
func (h DETH) Encode(b []byte) error {
	if err := ib.NeedLen("DETH", "buffer", b, DETHLen); err != nil {
		return err
	}
	if !h.SrcQP.Valid() {
		return ib.ErrField("DETH", "SrcQP", "%#x exceeds 24 bits", uint32(h.SrcQP))
	}
	_ = b[7]
	binary.BigEndian.PutUint32(b[0:4], uint32(h.QKey))
	b[4] = 0
	ib.Put24(b[5:8], uint32(h.SrcQP))
	return nil
}

// DecodeDETH reads a DETH from b[:8]; the reserved octet is ignored.
func DecodeDETH(b []byte) (DETH, error) {
	if err := ib.NeedLen("DETH", "header", b, DETHLen); err != nil {
		return DETH{}, err
	}
	_ = b[7]
	return DETH{QKey: ib.QKey(binary.BigEndian.Uint32(b[0:4])), SrcQP: ib.QPN(ib.Get24(b[5:8]))}, nil
}
