package cm

import "encoding/binary"

// RTUPrivateDataLen is the size of an RTU's private data.
const RTUPrivateDataLen = 224

// RTU tells the replier that the connection is ready to use (IBA Table 111).
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [RTUPrivateDataLen]byte
}

// AttrID implements Message.
func (m *RTU) AttrID() AttrID { return AttrRTU }

func (m *RTU) validate() error { return nil }

// MarshalMAD implements Message.
func (m *RTU) MarshalMAD(b []byte, tid uint64) error {
	p, err := startMAD(b, tid, AttrRTU)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(p[0:4], m.LocalCommID)
	binary.BigEndian.PutUint32(p[4:8], m.RemoteCommID)
	copy(p[8:], m.PrivateData[:])
	return nil
}

// DecodeRTU decodes an RTU from a 232-octet CM payload.
func DecodeRTU(p []byte) (RTU, error) {
	if err := checkPayload("RTU", p); err != nil {
		return RTU{}, err
	}
	return RTU{
		LocalCommID:  binary.BigEndian.Uint32(p[0:4]),
		RemoteCommID: binary.BigEndian.Uint32(p[4:8]),
		PrivateData:  [RTUPrivateDataLen]byte(p[8:]),
	}, nil
}
