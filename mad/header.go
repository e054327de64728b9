package mad

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// Sizes of a MAD. Every MAD is exactly Len octets; the classes ipoibd
// speaks need no RMPP transfers longer than one.
const (
	Len       = 256
	HeaderLen = 24
)

// BaseVersion is the only MAD base version (IBA 13.4.2).
const BaseVersion = 1

// Management classes ipoibd speaks (IBA Table 97; Linux ib_mad.h).
const (
	ClassSA = 0x03 // Subnet Administration
	ClassCM = 0x07 // Communication Management
)

// ResponseBit is the R bit of the method octet: set in every answer.
const ResponseBit = 0x80

// Header is the common header of every MAD (IBA 13.4.2), octets 0-23.
// Status, ClassSpecific and AttributeID are left as the numbers on the
// wire; a class package gives them its own types and names.
type Header struct {
	BaseVersion  uint8
	MgmtClass    uint8
	ClassVersion uint8
	// Method is the whole method octet: ResponseBit and the 7-bit method.
	Method            uint8
	Status            uint16
	ClassSpecific     uint16
	TransactionID     uint64
	AttributeID       uint16
	AttributeModifier uint32
}

// IsResponse reports the R bit of the method.
func (h Header) IsResponse() bool { return h.Method&ResponseBit != 0 }

// Encode writes h into b[0:24]; the reserved octets 18-19 are written as
// zero. It fails only when b is too short, and then writes nothing.
func (h Header) Encode(b []byte) error {
	if err := ib.NeedLen("MAD header", "buffer", b, HeaderLen); err != nil {
		return err
	}
	be := binary.BigEndian
	b[0], b[1], b[2], b[3] = h.BaseVersion, h.MgmtClass, h.ClassVersion, h.Method
	be.PutUint16(b[4:6], h.Status)
	be.PutUint16(b[6:8], h.ClassSpecific)
	be.PutUint64(b[8:16], h.TransactionID)
	be.PutUint16(b[16:18], h.AttributeID)
	b[18], b[19] = 0, 0
	be.PutUint32(b[20:24], h.AttributeModifier)
	return nil
}

// DecodeHeader reads the common header of a MAD of any class from b[0:24]
// without judging its values; Class.Decode does that for a whole MAD.
func DecodeHeader(b []byte) (Header, error) {
	if err := ib.NeedLen("MAD header", "header", b, HeaderLen); err != nil {
		return Header{}, err
	}
	be := binary.BigEndian
	return Header{
		BaseVersion:       b[0],
		MgmtClass:         b[1],
		ClassVersion:      b[2],
		Method:            b[3],
		Status:            be.Uint16(b[4:6]),
		ClassSpecific:     be.Uint16(b[6:8]),
		TransactionID:     be.Uint64(b[8:16]),
		AttributeID:       be.Uint16(b[16:18]),
		AttributeModifier: be.Uint32(b[20:24]),
	}, nil
}

// Class is a management class as a decoder accepts it: its number, the
// one class version it speaks, and its names for errors.
type Class struct {
	Name    string // short, for errors: "CM" gives the format "CM MAD"
	Title   string // e.g. "Communication Management"
	ID      uint8
	Version uint8
}

// Decode checks the framing of one whole MAD of class c (exactly Len
// octets, base version 1, c's class and class version) and returns its
// header. When the header is readable it is returned with the error too,
// so that a caller can log or answer by transaction ID. Errors are
// *ib.FieldError with the format "<Name> MAD".
func (c Class) Decode(b []byte) (Header, error) {
	if len(b) != Len {
		return Header{}, c.Err("length", "have %d octets, a MAD is exactly %d", len(b), Len)
	}
	h, _ := DecodeHeader(b)
	switch {
	case h.BaseVersion != BaseVersion:
		return h, c.Err("BaseVersion", "%d, want %d", h.BaseVersion, BaseVersion)
	case h.MgmtClass != c.ID:
		return h, c.Err("MgmtClass", "%#02x is not %s (%#02x)", h.MgmtClass, c.Title, c.ID)
	case h.ClassVersion != c.Version:
		return h, c.Err("ClassVersion", "%d, want %d", h.ClassVersion, c.Version)
	}
	return h, nil
}

// Err is an *ib.FieldError about a MAD of class c, with the format
// "<Name> MAD", for the checks a class adds after Decode's.
func (c Class) Err(field, reason string, args ...any) error {
	return ib.ErrField(c.Name+" MAD", field, reason, args...)
}
