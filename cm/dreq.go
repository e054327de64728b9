package cm

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// DREQPrivateDataLen is the size of a DREQ's private data.
const DREQPrivateDataLen = 220

// DREQ asks the peer to disconnect (IBA Table 112).
type DREQ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	// RemoteQPN is the receiver's QPN (or EECN); Linux ignores a DREQ whose
	// value is not its local QPN.
	RemoteQPN   ib.QPN
	PrivateData [DREQPrivateDataLen]byte
}

// AttrID implements Message.
func (m *DREQ) AttrID() AttrID { return AttrDREQ }

func (m *DREQ) validate() error {
	c := checker{format: "DREQ"}
	c.width("Remote QPN/EECN", uint64(m.RemoteQPN), 24)
	return c.err
}

// MarshalMAD implements Message.
func (m *DREQ) MarshalMAD(b []byte, tid uint64) error {
	if err := m.validate(); err != nil {
		return err
	}
	p, err := startMAD(b, tid, AttrDREQ)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(p[0:4], m.LocalCommID)
	binary.BigEndian.PutUint32(p[4:8], m.RemoteCommID)
	ib.Put24(p[8:11], uint32(m.RemoteQPN))
	copy(p[12:], m.PrivateData[:])
	return nil
}

// DecodeDREQ decodes a DREQ from a 232-octet CM payload.
func DecodeDREQ(p []byte) (DREQ, error) {
	if err := checkPayload("DREQ", p); err != nil {
		return DREQ{}, err
	}
	m := DREQ{
		LocalCommID:  binary.BigEndian.Uint32(p[0:4]),
		RemoteCommID: binary.BigEndian.Uint32(p[4:8]),
		RemoteQPN:    ib.QPN(ib.Get24(p[8:11])),
		PrivateData:  [DREQPrivateDataLen]byte(p[12:]),
	}
	if err := m.validate(); err != nil {
		return DREQ{}, err
	}
	return m, nil
}
