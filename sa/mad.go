package sa

import (
	"encoding/binary"
	"fmt"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/mad"
)

// Sizes of an SA MAD: the common header (package mad), then the SA's own.
const (
	MADLen    = mad.Len
	RMPPLen   = 12                 // the RMPP header every SA MAD carries
	HeaderLen = 56                 // MAD + RMPP + SM_Key, AttributeOffset, reserved, ComponentMask
	DataLen   = MADLen - HeaderLen // 200: one record (no RMPP: the first 200 octets of a table)
)

// Header values every SA MAD carries besides base version 1.
const (
	MgmtClassSA  = mad.ClassSA
	ClassVersion = 2
	responseBit  = mad.ResponseBit
)

// saClass is what DecodeMAD accepts of the common header.
var saClass = mad.Class{Name: "SA", Title: "Subnet Administration", ID: MgmtClassSA, Version: ClassVersion}

// Method is the 8-bit method octet of the common header, the R bit
// included: GetResp is 0x81.
type Method uint8

// SA methods (IBA Table 155; rdma-core umad_sa.h).
const (
	MethodGet          Method = 0x01
	MethodSet          Method = 0x02
	MethodGetResp      Method = 0x81
	MethodReport       Method = 0x06
	MethodReportResp   Method = 0x86
	MethodGetTable     Method = 0x12
	MethodGetTableResp Method = 0x92
	MethodGetMulti     Method = 0x14
	MethodDelete       Method = 0x15
	MethodDeleteResp   Method = 0x95
)

var methodNames = map[Method]string{
	MethodGet: "Get", MethodSet: "Set", MethodGetResp: "GetResp", MethodReport: "Report",
	MethodReportResp: "ReportResp", MethodGetTable: "GetTable", MethodGetTableResp: "GetTableResp",
	MethodGetMulti: "GetMulti", MethodDelete: "Delete", MethodDeleteResp: "DeleteResp",
}

func (m Method) String() string {
	if n, ok := methodNames[m]; ok {
		return n
	}
	return fmt.Sprintf("Method(%#02x)", uint8(m))
}

// IsResponse reports the R bit.
func (m Method) IsResponse() bool { return m&responseBit != 0 }

// Response is the method that answers m (Get → GetResp, Set → GetResp,
// Delete → DeleteResp, GetTable → GetTableResp).
func (m Method) Response() Method {
	if m == MethodSet {
		return MethodGetResp
	}
	return m | responseBit
}

// AttrID names an SA attribute.
type AttrID uint16

// The SA attributes ipoibd uses or may meet.
const (
	AttrClassPortInfo  AttrID = 0x0001
	AttrNotice         AttrID = 0x0002
	AttrInformInfo     AttrID = 0x0003
	AttrNodeRecord     AttrID = 0x0011
	AttrPortInfoRecord AttrID = 0x0012
	AttrServiceRecord  AttrID = 0x0031
	AttrPathRecord     AttrID = 0x0035
	AttrMCMemberRecord AttrID = 0x0038
	AttrMultiPath      AttrID = 0x003a
)

var attrNames = map[AttrID]string{
	AttrClassPortInfo: "ClassPortInfo", AttrNotice: "Notice", AttrInformInfo: "InformInfo",
	AttrNodeRecord: "NodeRecord", AttrPortInfoRecord: "PortInfoRecord", AttrServiceRecord: "ServiceRecord",
	AttrPathRecord: "PathRecord", AttrMCMemberRecord: "MCMemberRecord", AttrMultiPath: "MultiPathRecord",
}

func (a AttrID) String() string {
	if n, ok := attrNames[a]; ok {
		return n
	}
	return fmt.Sprintf("AttrID(%#04x)", uint16(a))
}

// RMPP is the RMPP header (IBA 13.6.2). ipoibd sends no multi-packet
// transfers: its requests carry version 1 with type 0 ("not RMPP"),
// as the kernel's SA client does.
type RMPP struct {
	Version  uint8
	Type     uint8
	RespTime uint8 // 5 bits
	Flags    uint8 // 3 bits: Active, First, Last
	Status   uint8
	Data1    uint32
	Data2    uint32
}

// Header is everything of an SA MAD before its record: the common MAD
// header with the SA's types for its method, status and attribute, then
// the RMPP header and the SA's own fields.
type Header struct {
	BaseVersion       uint8
	MgmtClass         uint8
	ClassVersion      uint8
	Method            Method
	Status            Status
	ClassSpecific     uint16
	TransactionID     uint64
	AttributeID       AttrID
	AttributeModifier uint32
	RMPP              RMPP
	SMKey             uint64
	AttributeOffset   uint16 // record size in 8-octet words (GetTable answers)
	ComponentMask     uint64
}

// Encode writes h into b[0:56]; reserved octets are written as zero.
func (h Header) Encode(b []byte) error {
	if err := ib.NeedLen("SA header", "buffer", b, HeaderLen); err != nil {
		return err
	}
	if h.RMPP.RespTime > 0x1f {
		return ib.ErrField("SA header", "RRespTime", "%#x does not fit in 5 bits", h.RMPP.RespTime)
	}
	if h.RMPP.Flags > 0x7 {
		return ib.ErrField("SA header", "RMPPFlags", "%#x does not fit in 3 bits", h.RMPP.Flags)
	}
	if err := h.common().Encode(b); err != nil {
		return err
	}
	be := binary.BigEndian
	b[24], b[25] = h.RMPP.Version, h.RMPP.Type
	b[26] = h.RMPP.RespTime<<3 | h.RMPP.Flags
	b[27] = h.RMPP.Status
	be.PutUint32(b[28:], h.RMPP.Data1)
	be.PutUint32(b[32:], h.RMPP.Data2)
	be.PutUint64(b[36:], h.SMKey)
	be.PutUint16(b[44:], h.AttributeOffset)
	b[46], b[47] = 0, 0
	be.PutUint64(b[48:], h.ComponentMask)
	return nil
}

// common is the common MAD header of h.
func (h Header) common() mad.Header {
	return mad.Header{
		BaseVersion: h.BaseVersion, MgmtClass: h.MgmtClass, ClassVersion: h.ClassVersion,
		Method: uint8(h.Method), Status: uint16(h.Status), ClassSpecific: h.ClassSpecific,
		TransactionID: h.TransactionID, AttributeID: uint16(h.AttributeID), AttributeModifier: h.AttributeModifier,
	}
}

// DecodeHeader reads b[0:56] without judging the values; DecodeMAD does.
func DecodeHeader(b []byte) (Header, error) {
	if err := ib.NeedLen("SA header", "header", b, HeaderLen); err != nil {
		return Header{}, err
	}
	c, _ := mad.DecodeHeader(b)
	be := binary.BigEndian
	return Header{
		BaseVersion:       c.BaseVersion,
		MgmtClass:         c.MgmtClass,
		ClassVersion:      c.ClassVersion,
		Method:            Method(c.Method),
		Status:            Status(c.Status),
		ClassSpecific:     c.ClassSpecific,
		TransactionID:     c.TransactionID,
		AttributeID:       AttrID(c.AttributeID),
		AttributeModifier: c.AttributeModifier,
		RMPP: RMPP{
			Version: b[24], Type: b[25], RespTime: b[26] >> 3, Flags: b[26] & 7, Status: b[27],
			Data1: be.Uint32(b[28:]), Data2: be.Uint32(b[32:]),
		},
		SMKey:           be.Uint64(b[36:]),
		AttributeOffset: be.Uint16(b[44:]),
		ComponentMask:   be.Uint64(b[48:]),
	}, nil
}

// Record is an SA attribute ipoibd encodes: *PathRecord or *MCMemberRecord.
type Record interface {
	AttrID() AttrID
	// Len is the record's size on the wire, padded to 8 octets.
	Len() int
	// Encode checks every field and writes the record into b[0:Len()];
	// it leaves b untouched when a field does not fit.
	Encode(b []byte) error
}

// Request is what a client asks the SA: a method on one record, with the
// components that matter.
type Request struct {
	Method        Method
	TransactionID uint64
	ComponentMask uint64
	Record        Record
}

// MarshalMAD writes the whole 256-octet request MAD into b[0:256]: the
// headers, the record, zeroes after it.
func (r Request) MarshalMAD(b []byte) error {
	if err := ib.NeedLen("SA MAD", "buffer", b, MADLen); err != nil {
		return err
	}
	if r.Record == nil {
		return ib.ErrField("SA MAD", "record", "none")
	}
	var rec [DataLen]byte
	if err := r.Record.Encode(rec[:]); err != nil {
		return err
	}
	h := Header{
		BaseVersion: mad.BaseVersion, MgmtClass: MgmtClassSA, ClassVersion: ClassVersion,
		Method: r.Method, TransactionID: r.TransactionID, AttributeID: r.Record.AttrID(),
		RMPP:          RMPP{Version: 1},
		ComponentMask: r.ComponentMask,
	}
	if err := h.Encode(b); err != nil {
		return err
	}
	copy(b[HeaderLen:MADLen], rec[:])
	return nil
}

// DecodeMAD checks an SA MAD's framing (exactly 256 octets, base version
// 1, class SA, class version 2) and returns its header and its data area.
// The records are decoded by the caller, who knows what it asked for.
func DecodeMAD(b []byte) (Header, []byte, error) {
	_, err := saClass.Decode(b)
	if len(b) != MADLen {
		return Header{}, nil, err
	}
	h, _ := DecodeHeader(b)
	if err != nil {
		return h, nil, err
	}
	return h, b[HeaderLen:MADLen], nil
}
