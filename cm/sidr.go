package cm

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// Sizes of the SIDR messages' private data.
const (
	SIDRREQPrivateDataLen = 216
	SIDRREPPrivateDataLen = 136
)

// SIDRREQ asks which UD QP serves a service ID (IBA Table 119). IPoIB does
// not use it.
type SIDRREQ struct {
	RequestID   uint32
	PKey        ib.PKey
	ServiceID   uint64
	PrivateData [SIDRREQPrivateDataLen]byte
}

// AttrID implements Message.
func (m *SIDRREQ) AttrID() AttrID { return AttrSIDRREQ }

func (m *SIDRREQ) validate() error { return nil }

// MarshalMAD implements Message.
func (m *SIDRREQ) MarshalMAD(b []byte, tid uint64) error {
	p, err := startMAD(b, tid, AttrSIDRREQ)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(p[0:4], m.RequestID)
	binary.BigEndian.PutUint16(p[4:6], uint16(m.PKey))
	binary.BigEndian.PutUint64(p[8:16], m.ServiceID)
	copy(p[16:], m.PrivateData[:])
	return nil
}

// DecodeSIDRREQ decodes a SIDR_REQ from a 232-octet CM payload.
func DecodeSIDRREQ(p []byte) (SIDRREQ, error) {
	if err := checkPayload("SIDR_REQ", p); err != nil {
		return SIDRREQ{}, err
	}
	return SIDRREQ{
		RequestID:   binary.BigEndian.Uint32(p[0:4]),
		PKey:        ib.PKey(binary.BigEndian.Uint16(p[4:6])),
		ServiceID:   binary.BigEndian.Uint64(p[8:16]),
		PrivateData: [SIDRREQPrivateDataLen]byte(p[16:]),
	}, nil
}

// SIDRStatus is the status of a SIDR_REP (Linux enum ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR_REP status codes.
const (
	SIDRSuccess              SIDRStatus = 0
	SIDRUnsupportedServiceID SIDRStatus = 1
	SIDRRejected             SIDRStatus = 2
	SIDRNoQP                 SIDRStatus = 3
	SIDRRedirect             SIDRStatus = 4
	SIDRUnsupportedVersion   SIDRStatus = 5
)

var sidrStatusNames = []string{
	"Success", "UnsupportedServiceID", "Rejected", "NoQP", "Redirect", "UnsupportedVersion",
}

func (s SIDRStatus) String() string { return enumName(sidrStatusNames, uint64(s), "SIDRStatus") }

// SIDRREP answers a SIDR_REQ (IBA Table 120).
type SIDRREP struct {
	RequestID            uint32
	Status               SIDRStatus
	AdditionalInfoLength uint8 // meaningful octets of AdditionalInfo, 0-72
	QPN                  ib.QPN
	ServiceID            uint64
	QKey                 ib.QKey
	// AdditionalInfo (a ClassPortInfo on redirect) is sent and received
	// whole; octets beyond AdditionalInfoLength are normally zero.
	AdditionalInfo [InfoLen]byte
	PrivateData    [SIDRREPPrivateDataLen]byte
}

// Info returns the meaningful part of AdditionalInfo.
func (m *SIDRREP) Info() []byte { return m.AdditionalInfo[:min(int(m.AdditionalInfoLength), InfoLen)] }

// AttrID implements Message.
func (m *SIDRREP) AttrID() AttrID { return AttrSIDRREP }

func (m *SIDRREP) validate() error {
	c := checker{format: "SIDR_REP"}
	c.atMost("Additional Information Length", uint64(m.AdditionalInfoLength), InfoLen)
	c.width("QPN", uint64(m.QPN), 24)
	return c.err
}

// MarshalMAD implements Message.
func (m *SIDRREP) MarshalMAD(b []byte, tid uint64) error {
	if err := m.validate(); err != nil {
		return err
	}
	p, err := startMAD(b, tid, AttrSIDRREP)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(p[0:4], m.RequestID)
	p[4] = uint8(m.Status)
	p[5] = m.AdditionalInfoLength
	ib.Put24(p[8:11], uint32(m.QPN))
	binary.BigEndian.PutUint64(p[12:20], m.ServiceID)
	binary.BigEndian.PutUint32(p[20:24], uint32(m.QKey))
	copy(p[24:96], m.AdditionalInfo[:])
	copy(p[96:], m.PrivateData[:])
	return nil
}

// DecodeSIDRREP decodes a SIDR_REP from a 232-octet CM payload.
func DecodeSIDRREP(p []byte) (SIDRREP, error) {
	if err := checkPayload("SIDR_REP", p); err != nil {
		return SIDRREP{}, err
	}
	m := SIDRREP{
		RequestID:            binary.BigEndian.Uint32(p[0:4]),
		Status:               SIDRStatus(p[4]),
		AdditionalInfoLength: p[5],
		QPN:                  ib.QPN(ib.Get24(p[8:11])),
		ServiceID:            binary.BigEndian.Uint64(p[12:20]),
		QKey:                 ib.QKey(binary.BigEndian.Uint32(p[20:24])),
		AdditionalInfo:       [InfoLen]byte(p[24:96]),
		PrivateData:          [SIDRREPPrivateDataLen]byte(p[96:]),
	}
	if err := m.validate(); err != nil {
		return SIDRREP{}, err
	}
	return m, nil
}
