package cm

import "encoding/binary"

// DREPPrivateDataLen is the size of a DREP's private data.
const DREPPrivateDataLen = 224

// DREP answers a DREQ (IBA Table 113).
type DREP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [DREPPrivateDataLen]byte
}

// AttrID implements Message.
func (m *DREP) AttrID() AttrID { return AttrDREP }

func (m *DREP) validate() error { return nil }

// MarshalMAD implements Message.
func (m *DREP) MarshalMAD(b []byte, tid uint64) error {
	p, err := startMAD(b, tid, AttrDREP)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(p[0:4], m.LocalCommID)
	binary.BigEndian.PutUint32(p[4:8], m.RemoteCommID)
	copy(p[8:], m.PrivateData[:])
	return nil
}

// DecodeDREP decodes a DREP from a 232-octet CM payload.
func DecodeDREP(p []byte) (DREP, error) {
	if err := checkPayload("DREP", p); err != nil {
		return DREP{}, err
	}
	return DREP{
		LocalCommID:  binary.BigEndian.Uint32(p[0:4]),
		RemoteCommID: binary.BigEndian.Uint32(p[4:8]),
		PrivateData:  [DREPPrivateDataLen]byte(p[8:]),
	}, nil
}
