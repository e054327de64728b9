package cm

import "encoding/binary"

// APRPrivateDataLen is the size of an APR's private data.
const APRPrivateDataLen = 148

// APStatus is the status of an APR (Linux enum ib_cm_apr_status).
type APStatus uint8

// APR status codes.
const (
	APSuccess             APStatus = 0
	APInvalidCommID       APStatus = 1
	APUnsupported         APStatus = 2
	APReject              APStatus = 3
	APRedirect            APStatus = 4
	APIsCurrent           APStatus = 5
	APInvalidQPNEECN      APStatus = 6
	APInvalidLID          APStatus = 7
	APInvalidGID          APStatus = 8
	APInvalidFlowLabel    APStatus = 9
	APInvalidTrafficClass APStatus = 10
	APInvalidHopLimit     APStatus = 11
	APInvalidPacketRate   APStatus = 12
	APInvalidSL           APStatus = 13
)

var apStatusNames = []string{
	"Success", "InvalidCommID", "Unsupported", "Reject", "Redirect", "IsCurrent",
	"InvalidQPNEECN", "InvalidLID", "InvalidGID", "InvalidFlowLabel",
	"InvalidTrafficClass", "InvalidHopLimit", "InvalidPacketRate", "InvalidSL",
}

func (s APStatus) String() string { return enumName(apStatusNames, uint64(s), "APStatus") }

// APR answers a LAP (IBA Table 116).
type APR struct {
	LocalCommID          uint32
	RemoteCommID         uint32
	AdditionalInfoLength uint8 // meaningful octets of AdditionalInfo, 0-72
	Status               APStatus
	// AdditionalInfo is sent and received whole; octets beyond
	// AdditionalInfoLength are normally zero.
	AdditionalInfo [InfoLen]byte
	PrivateData    [APRPrivateDataLen]byte
}

// Info returns the meaningful part of AdditionalInfo.
func (m *APR) Info() []byte { return m.AdditionalInfo[:min(int(m.AdditionalInfoLength), InfoLen)] }

// AttrID implements Message.
func (m *APR) AttrID() AttrID { return AttrAPR }

func (m *APR) validate() error {
	c := checker{format: "APR"}
	c.atMost("Additional Information Length", uint64(m.AdditionalInfoLength), InfoLen)
	return c.err
}

// MarshalMAD implements Message.
func (m *APR) MarshalMAD(b []byte, tid uint64) error {
	if err := m.validate(); err != nil {
		return err
	}
	p, err := startMAD(b, tid, AttrAPR)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(p[0:4], m.LocalCommID)
	binary.BigEndian.PutUint32(p[4:8], m.RemoteCommID)
	p[8] = m.AdditionalInfoLength
	p[9] = uint8(m.Status)
	copy(p[12:84], m.AdditionalInfo[:])
	copy(p[84:], m.PrivateData[:])
	return nil
}

// DecodeAPR decodes an APR from a 232-octet CM payload.
func DecodeAPR(p []byte) (APR, error) {
	if err := checkPayload("APR", p); err != nil {
		return APR{}, err
	}
	m := APR{
		LocalCommID:          binary.BigEndian.Uint32(p[0:4]),
		RemoteCommID:         binary.BigEndian.Uint32(p[4:8]),
		AdditionalInfoLength: p[8],
		Status:               APStatus(p[9]),
		AdditionalInfo:       [InfoLen]byte(p[12:84]),
		PrivateData:          [APRPrivateDataLen]byte(p[84:]),
	}
	if err := m.validate(); err != nil {
		return APR{}, err
	}
	return m, nil
}
