package cm

import (
	"fmt"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/mad"
)

// Sizes of a CM MAD. MADs are always exactly MADLen octets; CM needs no RMPP.
const (
	MADLen     = mad.Len
	PayloadLen = mad.Len - mad.HeaderLen // the CM message proper
)

// Common header values every CM message carries besides base version 1
// and class CM (mad.ClassCM).
const (
	CMClassVersion = 2
	MethodSend     = 0x03 // every CM message, requests and replies alike
)

// cmClass is what DecodeMAD accepts of the common header.
var cmClass = mad.Class{Name: "CM", Title: "Communication Management", ID: mad.ClassCM, Version: CMClassVersion}

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
	h := mad.Header{
		BaseVersion:   mad.BaseVersion,
		MgmtClass:     mad.ClassCM,
		ClassVersion:  CMClassVersion,
		Method:        MethodSend,
		TransactionID: tid,
		AttributeID:   uint16(attr),
	}
	if err := h.Encode(b); err != nil {
		return nil, err
	}
	return b[mad.HeaderLen:], nil
}

// DecodeMAD decodes one CM MAD. b must be exactly 256 octets carrying base
// version 1, class CM (0x07), class version 2 and method Send; the message is
// returned as a pointer to its concrete type (*REQ, *REP, ...). When the
// header is readable it is returned even if the message is not, so a caller
// can log or answer by transaction ID.
func DecodeMAD(b []byte) (mad.Header, Message, error) {
	h, err := cmClass.Decode(b)
	if err != nil {
		return h, nil, err
	}
	if h.Method != MethodSend {
		return h, nil, cmClass.Err("Method", "%#02x, CM messages use Send (%#02x)", h.Method, MethodSend)
	}
	p := b[mad.HeaderLen:]
	var m Message
	switch AttrID(h.AttributeID) {
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
		return h, nil, cmClass.Err("AttributeID", "%v is not a CM message", AttrID(h.AttributeID))
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
