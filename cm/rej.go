package cm

import "encoding/binary"

// Sizes of a REJ's variable parts.
const (
	REJPrivateDataLen = 148
	// InfoLen is the size of the REJ's Additional Rejection Information and
	// of the SIDR_REP's and APR's Additional Information; a length field says
	// how many of its octets are meaningful.
	InfoLen = 72
)

// REJ rejects a REQ or REP, or ends a connection attempt (IBA Table 108).
type REJ struct {
	LocalCommID      uint32 // 0 when rejecting a REQ before a local ID exists
	RemoteCommID     uint32 // the rejected message's Local Communication ID
	MessageRejected  MsgType
	RejectInfoLength uint8 // meaningful octets of ARI, 0-72
	Reason           RejectReason
	// ARI is sent and received whole; octets beyond RejectInfoLength are
	// normally zero.
	ARI         [InfoLen]byte
	PrivateData [REJPrivateDataLen]byte
}

// Info returns the meaningful part of the ARI.
func (m *REJ) Info() []byte { return m.ARI[:min(int(m.RejectInfoLength), InfoLen)] }

// AttrID implements Message.
func (m *REJ) AttrID() AttrID { return AttrREJ }

func (m *REJ) validate() error {
	c := checker{format: "REJ"}
	c.atMost("Message REJected", uint64(m.MessageRejected), uint64(MsgOther))
	c.atMost("Reject Info Length", uint64(m.RejectInfoLength), InfoLen)
	return c.err
}

// MarshalMAD implements Message.
func (m *REJ) MarshalMAD(b []byte, tid uint64) error {
	if err := m.validate(); err != nil {
		return err
	}
	p, err := startMAD(b, tid, AttrREJ)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(p[0:4], m.LocalCommID)
	binary.BigEndian.PutUint32(p[4:8], m.RemoteCommID)
	p[8] = uint8(m.MessageRejected) << 6
	p[9] = m.RejectInfoLength << 1
	binary.BigEndian.PutUint16(p[10:12], uint16(m.Reason))
	copy(p[12:84], m.ARI[:])
	copy(p[84:], m.PrivateData[:])
	return nil
}

// DecodeREJ decodes a REJ from a 232-octet CM payload.
func DecodeREJ(p []byte) (REJ, error) {
	if err := checkPayload("REJ", p); err != nil {
		return REJ{}, err
	}
	m := REJ{
		LocalCommID:      binary.BigEndian.Uint32(p[0:4]),
		RemoteCommID:     binary.BigEndian.Uint32(p[4:8]),
		MessageRejected:  MsgType(p[8] >> 6),
		RejectInfoLength: p[9] >> 1,
		Reason:           RejectReason(binary.BigEndian.Uint16(p[10:12])),
		ARI:              [InfoLen]byte(p[12:84]),
		PrivateData:      [REJPrivateDataLen]byte(p[84:]),
	}
	if err := m.validate(); err != nil {
		return REJ{}, err
	}
	return m, nil
}

// RejectReason is the 16-bit reason code of a REJ (IBA ch.12, Linux enum
// ib_cm_rej_reason).
type RejectReason uint16

// REJ reason codes. 34 is not defined.
const (
	RejNoQP                      RejectReason = 1
	RejNoEEC                     RejectReason = 2
	RejNoResources               RejectReason = 3
	RejTimeout                   RejectReason = 4 // ARI: the sender's CA GUID
	RejUnsupportedRequest        RejectReason = 5
	RejInvalidCommID             RejectReason = 6
	RejInvalidCommInstance       RejectReason = 7
	RejInvalidServiceID          RejectReason = 8
	RejInvalidTransportType      RejectReason = 9
	RejStaleConnection           RejectReason = 10
	RejRDCNotExist               RejectReason = 11
	RejInvalidGID                RejectReason = 12 // ARI: the sender's port GID
	RejInvalidLID                RejectReason = 13
	RejInvalidSL                 RejectReason = 14
	RejInvalidTrafficClass       RejectReason = 15
	RejInvalidHopLimit           RejectReason = 16
	RejInvalidPacketRate         RejectReason = 17
	RejInvalidAltGID             RejectReason = 18
	RejInvalidAltLID             RejectReason = 19
	RejInvalidAltSL              RejectReason = 20
	RejInvalidAltTrafficClass    RejectReason = 21
	RejInvalidAltHopLimit        RejectReason = 22
	RejInvalidAltPacketRate      RejectReason = 23
	RejPortCMRedirect            RejectReason = 24
	RejPortRedirect              RejectReason = 25
	RejInvalidMTU                RejectReason = 26
	RejInsufficientRespResources RejectReason = 27
	RejConsumerReject            RejectReason = 28
	RejInvalidRNRRetry           RejectReason = 29
	RejDuplicateLocalCommID      RejectReason = 30
	RejInvalidClassVersion       RejectReason = 31
	RejInvalidFlowLabel          RejectReason = 32
	RejInvalidAltFlowLabel       RejectReason = 33
	RejVendorOptionNotSupported  RejectReason = 35
)

var rejectReasonNames = []string{
	RejNoQP:                      "NoQP",
	RejNoEEC:                     "NoEEC",
	RejNoResources:               "NoResources",
	RejTimeout:                   "Timeout",
	RejUnsupportedRequest:        "UnsupportedRequest",
	RejInvalidCommID:             "InvalidCommID",
	RejInvalidCommInstance:       "InvalidCommInstance",
	RejInvalidServiceID:          "InvalidServiceID",
	RejInvalidTransportType:      "InvalidTransportType",
	RejStaleConnection:           "StaleConnection",
	RejRDCNotExist:               "RDCNotExist",
	RejInvalidGID:                "InvalidGID",
	RejInvalidLID:                "InvalidLID",
	RejInvalidSL:                 "InvalidSL",
	RejInvalidTrafficClass:       "InvalidTrafficClass",
	RejInvalidHopLimit:           "InvalidHopLimit",
	RejInvalidPacketRate:         "InvalidPacketRate",
	RejInvalidAltGID:             "InvalidAltGID",
	RejInvalidAltLID:             "InvalidAltLID",
	RejInvalidAltSL:              "InvalidAltSL",
	RejInvalidAltTrafficClass:    "InvalidAltTrafficClass",
	RejInvalidAltHopLimit:        "InvalidAltHopLimit",
	RejInvalidAltPacketRate:      "InvalidAltPacketRate",
	RejPortCMRedirect:            "PortCMRedirect",
	RejPortRedirect:              "PortRedirect",
	RejInvalidMTU:                "InvalidMTU",
	RejInsufficientRespResources: "InsufficientRespResources",
	RejConsumerReject:            "ConsumerReject",
	RejInvalidRNRRetry:           "InvalidRNRRetry",
	RejDuplicateLocalCommID:      "DuplicateLocalCommID",
	RejInvalidClassVersion:       "InvalidClassVersion",
	RejInvalidFlowLabel:          "InvalidFlowLabel",
	RejInvalidAltFlowLabel:       "InvalidAltFlowLabel",
	RejVendorOptionNotSupported:  "VendorOptionNotSupported",
}

// String returns the reason's name, e.g. "StaleConnection", or
// "RejectReason(34)" for a code without one.
func (r RejectReason) String() string {
	return enumName(rejectReasonNames, uint64(r), "RejectReason")
}
