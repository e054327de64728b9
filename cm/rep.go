package cm

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// REPPrivateDataLen is the size of a REP's private data.
const REPPrivateDataLen = 196

// REP accepts a REQ (IBA Table 110). Fields are named from the replier's
// point of view.
type REP struct {
	LocalCommID         uint32
	RemoteCommID        uint32 // the REQ's Local Communication ID
	LocalQKey           ib.QKey
	LocalQPN            ib.QPN
	LocalEECN           uint32 // 24 bits, RD only (Linux: the QPN for an XRC target)
	StartingPSN         uint32 // 24 bits
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // timer code, 5 bits
	FailoverAccepted    uint8 // 2 bits; 0 = accepted
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits; 7 = infinite
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         [REPPrivateDataLen]byte
}

// AttrID implements Message.
func (m *REP) AttrID() AttrID { return AttrREP }

func (m *REP) validate() error {
	c := checker{format: "REP"}
	c.width("Local QPN", uint64(m.LocalQPN), 24)
	c.width("Local EE Context Number", uint64(m.LocalEECN), 24)
	c.width("Starting PSN", uint64(m.StartingPSN), 24)
	c.width("Target ACK Delay", uint64(m.TargetACKDelay), 5)
	c.width("Failover Accepted", uint64(m.FailoverAccepted), 2)
	c.width("RNR Retry Count", uint64(m.RNRRetryCount), 3)
	return c.err
}

// MarshalMAD implements Message.
func (m *REP) MarshalMAD(b []byte, tid uint64) error {
	if err := m.validate(); err != nil {
		return err
	}
	p, err := startMAD(b, tid, AttrREP)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(p[0:4], m.LocalCommID)
	binary.BigEndian.PutUint32(p[4:8], m.RemoteCommID)
	binary.BigEndian.PutUint32(p[8:12], uint32(m.LocalQKey))
	ib.Put24(p[12:15], uint32(m.LocalQPN))
	ib.Put24(p[16:19], m.LocalEECN)
	ib.Put24(p[20:23], m.StartingPSN)
	p[24] = m.ResponderResources
	p[25] = m.InitiatorDepth
	p[26] = m.TargetACKDelay<<3 | m.FailoverAccepted<<1 | bit(m.EndToEndFlowControl)
	p[27] = m.RNRRetryCount<<5 | bit(m.SRQ)<<4
	binary.BigEndian.PutUint64(p[28:36], m.LocalCAGUID)
	copy(p[36:], m.PrivateData[:])
	return nil
}

// DecodeREP decodes a REP from a 232-octet CM payload.
func DecodeREP(p []byte) (REP, error) {
	if err := checkPayload("REP", p); err != nil {
		return REP{}, err
	}
	m := REP{
		LocalCommID:         binary.BigEndian.Uint32(p[0:4]),
		RemoteCommID:        binary.BigEndian.Uint32(p[4:8]),
		LocalQKey:           ib.QKey(binary.BigEndian.Uint32(p[8:12])),
		LocalQPN:            ib.QPN(ib.Get24(p[12:15])),
		LocalEECN:           ib.Get24(p[16:19]),
		StartingPSN:         ib.Get24(p[20:23]),
		ResponderResources:  p[24],
		InitiatorDepth:      p[25],
		TargetACKDelay:      p[26] >> 3,
		FailoverAccepted:    p[26] >> 1 & 3,
		EndToEndFlowControl: p[26]&1 != 0,
		RNRRetryCount:       p[27] >> 5,
		SRQ:                 p[27]&0x10 != 0,
		LocalCAGUID:         binary.BigEndian.Uint64(p[28:36]),
		PrivateData:         [REPPrivateDataLen]byte(p[36:]),
	}
	if err := m.validate(); err != nil {
		return REP{}, err
	}
	return m, nil
}
