package cm

import "encoding/binary"

// MRAPrivateDataLen is the size of an MRA's private data.
const MRAPrivateDataLen = 222

// MRA acknowledges a REQ, REP or LAP and asks the peer to wait longer
// (IBA Table 107).
type MRA struct {
	LocalCommID    uint32
	RemoteCommID   uint32 // 0 allowed when MRAing a REQ
	MessageMRAed   MsgType
	ServiceTimeout uint8 // timer code, 5 bits: extra time the sender needs
	PrivateData    [MRAPrivateDataLen]byte
}

// AttrID implements Message.
func (m *MRA) AttrID() AttrID { return AttrMRA }

func (m *MRA) validate() error {
	c := checker{format: "MRA"}
	c.atMost("Message MRAed", uint64(m.MessageMRAed), uint64(MsgOther))
	c.width("Service Timeout", uint64(m.ServiceTimeout), 5)
	return c.err
}

// MarshalMAD implements Message.
func (m *MRA) MarshalMAD(b []byte, tid uint64) error {
	if err := m.validate(); err != nil {
		return err
	}
	p, err := startMAD(b, tid, AttrMRA)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(p[0:4], m.LocalCommID)
	binary.BigEndian.PutUint32(p[4:8], m.RemoteCommID)
	p[8] = uint8(m.MessageMRAed) << 6
	p[9] = m.ServiceTimeout << 3
	copy(p[10:], m.PrivateData[:])
	return nil
}

// DecodeMRA decodes an MRA from a 232-octet CM payload.
func DecodeMRA(p []byte) (MRA, error) {
	if err := checkPayload("MRA", p); err != nil {
		return MRA{}, err
	}
	m := MRA{
		LocalCommID:    binary.BigEndian.Uint32(p[0:4]),
		RemoteCommID:   binary.BigEndian.Uint32(p[4:8]),
		MessageMRAed:   MsgType(p[8] >> 6),
		ServiceTimeout: p[9] >> 3,
		PrivateData:    [MRAPrivateDataLen]byte(p[10:]),
	}
	if err := m.validate(); err != nil {
		return MRA{}, err
	}
	return m, nil
}
