package cm

import (
	"encoding/binary"
	"fmt"

	"github.com/ipoibd/ipoibd/ib"
)

// Sizes of a CM MAD. MADs are always exactly MADLen octets; CM needs no RMPP.
const (
	MADLen       = 256
	MADHeaderLen = 24
	PayloadLen   = MADLen - MADHeaderLen // the CM message proper
)

// MAD common header values every CM message carries.
const (
	MADBaseVersion = 1
	MgmtClassCM    = 0x07
	CMClassVersion = 2
	MethodSend     = 0x03 // every CM message, requests and replies alike

	// responseBit is bit 0 of the method octet (the R flag).
	responseBit = 0x80
	methodMask  = 0x7f
)

// AttrID is a MAD attribute ID; for class CM it names the message type.
type AttrID uint16

// CM attribute IDs.
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001a
)

var attrNames = map[AttrID]string{
	AttrClassPortInfo: "ClassPortInfo",
	AttrREQ:           "REQ",
	AttrMRA:           "MRA",
	AttrREJ:           "REJ",
	AttrREP:           "REP",
	AttrRTU:           "RTU",
	AttrDREQ:          "DREQ",
	AttrDREP:          "DREP",
	AttrSIDRREQ:       "SIDR_REQ",
	AttrSIDRREP:       "SIDR_REP",
	AttrLAP:           "LAP",
	AttrAPR:           "APR",
}

func (a AttrID) String() string {
	if n, ok := attrNames[a]; ok {
		return n
	}
	return fmt.Sprintf("AttrID(%#04x)", uint16(a))
}

// MADHeader is the 24-octet common header of every management datagram.
type MADHeader struct {
	BaseVersion       uint8
	MgmtClass         uint8
	ClassVersion      uint8
	Response          bool  // the R bit
	Method            uint8 // 7 bits
	Status            uint16
	ClassSpecific     uint16
	TransactionID     uint64
	AttributeID       AttrID
	AttributeModifier uint32
}

// Encode writes h into b[0:24]. The reserved octets 18-19 are written as zero.
func (h MADHeader) Encode(b []byte) error {
	if err := ib.NeedLen("MAD header", "buffer", b, MADHeaderLen); err != nil {
		return err
	}
	if h.Method&^methodMask != 0 {
		return ib.ErrField("MAD header", "Method", "%#x does not fit in 7 bits", h.Method)
	}
	b[0] = h.BaseVersion
	b[1] = h.MgmtClass
	b[2] = h.ClassVersion
	b[3] = bit(h.Response)<<7 | h.Method
	binary.BigEndian.PutUint16(b[4:6], h.Status)
	binary.BigEndian.PutUint16(b[6:8], h.ClassSpecific)
	binary.BigEndian.PutUint64(b[8:16], h.TransactionID)
	binary.BigEndian.PutUint16(b[16:18], uint16(h.AttributeID))
	b[18], b[19] = 0, 0
	binary.BigEndian.PutUint32(b[20:24], h.AttributeModifier)
	return nil
}

// DecodeMADHeader reads the common header of any MAD class from b[0:24]
// without judging its values; DecodeMAD does that for CM.
func DecodeMADHeader(b []byte) (MADHeader, error) {
	if err := ib.NeedLen("MAD header", "header", b, MADHeaderLen); err != nil {
		return MADHeader{}, err
	}
	return MADHeader{
		BaseVersion:       b[0],
		MgmtClass:         b[1],
		ClassVersion:      b[2],
		Response:          b[3]&responseBit != 0,
		Method:            b[3] & methodMask,
		Status:            binary.BigEndian.Uint16(b[4:6]),
		ClassSpecific:     binary.BigEndian.Uint16(b[6:8]),
		TransactionID:     binary.BigEndian.Uint64(b[8:16]),
		AttributeID:       AttrID(binary.BigEndian.Uint16(b[16:18])),
		AttributeModifier: binary.BigEndian.Uint32(b[20:24]),
	}, nil
}

// Message is one CM message: *REQ, *MRA, *REJ, *REP, *RTU, *DREQ, *DREP,
// *SIDRREQ, *SIDRREP, *LAP or *APR.
type Message interface {
	// AttrID is the attribute ID that identifies the message type.
	AttrID() AttrID
	// MarshalMAD writes the whole 256-octet MAD (common header with the
	// given transaction ID, then the message) into b[0:256]. It checks every
	// field first and leaves b untouched when one does not fit. Reserved
	// bits and unused octets are written as zero. It does not allocate.
	MarshalMAD(b []byte, tid uint64) error

	// validate keeps the set of messages closed: DecodeMAD must be able to
	// return every implementation.
	validate() error
}

// startMAD checks the buffer, zeroes the MAD and writes the CM header; it
// returns the 232-octet payload area for the message to fill.
func startMAD(b []byte, tid uint64, attr AttrID) ([]byte, error) {
	if err := ib.NeedLen("CM MAD", "buffer", b, MADLen); err != nil {
		return nil, err
	}
	b = b[:MADLen]
	clear(b)
	h := MADHeader{
		BaseVersion:   MADBaseVersion,
		MgmtClass:     MgmtClassCM,
		ClassVersion:  CMClassVersion,
		Method:        MethodSend,
		TransactionID: tid,
		AttributeID:   attr,
	}
	if err := h.Encode(b); err != nil {
		return nil, err
	}
	return b[MADHeaderLen:], nil
}

// DecodeMAD decodes one CM MAD. b must be exactly 256 octets carrying base
// version 1, class CM (0x07), class version 2 and method Send; the message is
// returned as a pointer to its concrete type (*REQ, *REP, ...). When the
// header is readable it is returned even if the message is not, so a caller
// can log or answer by transaction ID.
func DecodeMAD(b []byte) (MADHeader, Message, error) {
	if len(b) != MADLen {
		return MADHeader{}, nil, ib.ErrField("CM MAD", "length", "have %d octets, a MAD is exactly %d", len(b), MADLen)
	}
	h, err := DecodeMADHeader(b)
	if err != nil {
		return h, nil, err
	}
	switch {
	case h.BaseVersion != MADBaseVersion:
		return h, nil, ib.ErrField("CM MAD", "BaseVersion", "%d, want %d", h.BaseVersion, MADBaseVersion)
	case h.MgmtClass != MgmtClassCM:
		return h, nil, ib.ErrField("CM MAD", "MgmtClass", "%#02x is not Communication Management (%#02x)", h.MgmtClass, MgmtClassCM)
	case h.ClassVersion != CMClassVersion:
		return h, nil, ib.ErrField("CM MAD", "ClassVersion", "%d, want %d", h.ClassVersion, CMClassVersion)
	case h.Response || h.Method != MethodSend:
		return h, nil, ib.ErrField("CM MAD", "Method", "%#02x, CM messages use Send (%#02x)", b[3], MethodSend)
	}
	p := b[MADHeaderLen:]
	var m Message
	switch h.AttributeID {
	case AttrREQ:
		m, err = boxed(p, DecodeREQ)
	case AttrMRA:
		m, err = boxed(p, DecodeMRA)
	case AttrREJ:
		m, err = boxed(p, DecodeREJ)
	case AttrREP:
		m, err = boxed(p, DecodeREP)
	case AttrRTU:
		m, err = boxed(p, DecodeRTU)
	case AttrDREQ:
		m, err = boxed(p, DecodeDREQ)
	case AttrDREP:
		m, err = boxed(p, DecodeDREP)
	case AttrSIDRREQ:
		m, err = boxed(p, DecodeSIDRREQ)
	case AttrSIDRREP:
		m, err = boxed(p, DecodeSIDRREP)
	case AttrLAP:
		m, err = boxed(p, DecodeLAP)
	case AttrAPR:
		m, err = boxed(p, DecodeAPR)
	default:
		return h, nil, ib.ErrField("CM MAD", "AttributeID", "%v is not a CM message", h.AttributeID)
	}
	return h, m, err
}

// boxed runs a per-type decoder and returns its result behind Message.
func boxed[T any, PT interface {
	*T
	Message
}](p []byte, decode func([]byte) (T, error)) (Message, error) {
	m, err := decode(p)
	if err != nil {
		return nil, err
	}
	return PT(&m), nil
}
