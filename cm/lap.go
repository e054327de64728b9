package cm

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// LAPPrivateDataLen is the size of a LAP's private data.
const LAPPrivateDataLen = 168

// LAP loads an alternate path for path migration (IBA Table 115). IPoIB
// does not use it; Linux refuses it on RoCE ports.
type LAP struct {
	LocalCommID             uint32
	RemoteCommID            uint32
	RemoteQPN               ib.QPN // the receiver's QPN or EECN
	RemoteCMResponseTimeout uint8  // timer code, 5 bits
	Alternate               Path
	PrivateData             [LAPPrivateDataLen]byte
}

// AttrID implements Message.
func (m *LAP) AttrID() AttrID { return AttrLAP }

func (m *LAP) validate() error {
	c := checker{format: "LAP"}
	c.width("Remote QPN/EECN", uint64(m.RemoteQPN), 24)
	c.width("Remote CM Response Timeout", uint64(m.RemoteCMResponseTimeout), 5)
	c.prefix = "Alternate "
	m.Alternate.check(&c)
	return c.err
}

// MarshalMAD implements Message.
func (m *LAP) MarshalMAD(b []byte, tid uint64) error {
	if err := m.validate(); err != nil {
		return err
	}
	p, err := startMAD(b, tid, AttrLAP)
	if err != nil {
		return err
	}
	a := &m.Alternate
	binary.BigEndian.PutUint32(p[0:4], m.LocalCommID)
	binary.BigEndian.PutUint32(p[4:8], m.RemoteCommID)
	ib.Put24(p[12:15], uint32(m.RemoteQPN))
	p[15] = m.RemoteCMResponseTimeout << 3
	binary.BigEndian.PutUint16(p[20:22], a.LocalLID)
	binary.BigEndian.PutUint16(p[22:24], a.RemoteLID)
	copy(p[24:40], a.LocalGID[:])
	copy(p[40:56], a.RemoteGID[:])
	// Unlike the REQ, the LAP puts the traffic class (not the rate) in the
	// low octet of the flow-label word.
	binary.BigEndian.PutUint32(p[56:60], a.FlowLabel<<12|uint32(a.TrafficClass))
	p[60] = a.HopLimit
	p[61] = a.PacketRate
	p[62] = a.SL<<4 | bit(a.SubnetLocal)<<3
	p[63] = a.LocalACKTimeout << 3
	copy(p[64:], m.PrivateData[:])
	return nil
}

// DecodeLAP decodes a LAP from a 232-octet CM payload.
func DecodeLAP(p []byte) (LAP, error) {
	if err := checkPayload("LAP", p); err != nil {
		return LAP{}, err
	}
	m := LAP{
		LocalCommID:             binary.BigEndian.Uint32(p[0:4]),
		RemoteCommID:            binary.BigEndian.Uint32(p[4:8]),
		RemoteQPN:               ib.QPN(ib.Get24(p[12:15])),
		RemoteCMResponseTimeout: p[15] >> 3,
		Alternate: Path{
			LocalLID:        binary.BigEndian.Uint16(p[20:22]),
			RemoteLID:       binary.BigEndian.Uint16(p[22:24]),
			LocalGID:        ib.GID(p[24:40]),
			RemoteGID:       ib.GID(p[40:56]),
			FlowLabel:       binary.BigEndian.Uint32(p[56:60]) >> 12,
			TrafficClass:    p[59],
			HopLimit:        p[60],
			PacketRate:      p[61] & 0x3f,
			SL:              p[62] >> 4,
			SubnetLocal:     p[62]&0x08 != 0,
			LocalACKTimeout: p[63] >> 3,
		},
		PrivateData: [LAPPrivateDataLen]byte(p[64:]),
	}
	if err := m.validate(); err != nil {
		return LAP{}, err
	}
	return m, nil
}
