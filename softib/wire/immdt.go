package wire

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// PutImmDt writes immediate data into b[:4]. The value is opaque: it is
// carried big-endian exactly as the sender's 32 bits.
func PutImmDt(b []byte, imm uint32) error {
	if err := ib.NeedLen("ImmDt", "buffer", b, ImmDtLen); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(b, imm)
	return nil
}

// DecodeImmDt reads immediate data from b[:4].
func DecodeImmDt(b []byte) (uint32, error) {
	if err := ib.NeedLen("ImmDt", "header", b, ImmDtLen); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(b), nil
}
