package cm

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// REQPrivateDataLen is the size of a REQ's private data.
const REQPrivateDataLen = 92

// REQ asks the receiver to set up a connection (IBA Table 106). Fields are
// named from the sender's point of view, as on the wire.
type REQ struct {
	LocalCommID             uint32 // never 0
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               ib.QKey
	LocalQPN                ib.QPN
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits, RD only
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits, RD only
	RemoteCMResponseTimeout uint8  // timer code, 5 bits
	TransportType           TransportType
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits
	LocalCMResponseTimeout  uint8  // timer code, 5 bits
	RetryCount              uint8  // 3 bits
	PKey                    ib.PKey
	PathMTU                 ib.MTU // one of the five IB MTU codes
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits; 7 = infinite
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits; 1 = XRC with TransportExt
	Primary                 Path
	Alternate               Path // all zero when there is no alternate path
	PrivateData             [REQPrivateDataLen]byte
}

// Path is the addressing of one path as a REQ (primary and alternate) or a
// LAP (alternate) carries it.
type Path struct {
	LocalLID        uint16
	RemoteLID       uint16
	LocalGID        ib.GID
	RemoteGID       ib.GID
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // rate code, 6 bits
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalACKTimeout uint8 // timer code, 5 bits
}

func (p *Path) check(c *checker) {
	c.width("Flow Label", uint64(p.FlowLabel), 20)
	c.width("Packet Rate", uint64(p.PacketRate), 6)
	c.width("SL", uint64(p.SL), 4)
	c.width("Local ACK Timeout", uint64(p.LocalACKTimeout), 5)
}

// The REQ carries a path in 44 octets starting at its local LID.
const reqPathLen = 44

func (p *Path) putREQ(b []byte) {
	_ = b[reqPathLen-1]
	binary.BigEndian.PutUint16(b[0:2], p.LocalLID)
	binary.BigEndian.PutUint16(b[2:4], p.RemoteLID)
	copy(b[4:20], p.LocalGID[:])
	copy(b[20:36], p.RemoteGID[:])
	// Flow label in the top 20 bits of a word whose low 6 bits are the rate.
	binary.BigEndian.PutUint32(b[36:40], p.FlowLabel<<12|uint32(p.PacketRate))
	b[40] = p.TrafficClass
	b[41] = p.HopLimit
	b[42] = p.SL<<4 | bit(p.SubnetLocal)<<3
	b[43] = p.LocalACKTimeout << 3
}

func decodeREQPath(b []byte) Path {
	_ = b[reqPathLen-1]
	w := binary.BigEndian.Uint32(b[36:40])
	return Path{
		LocalLID:        binary.BigEndian.Uint16(b[0:2]),
		RemoteLID:       binary.BigEndian.Uint16(b[2:4]),
		LocalGID:        ib.GID(b[4:20]),
		RemoteGID:       ib.GID(b[20:36]),
		FlowLabel:       w >> 12,
		PacketRate:      uint8(w & 0x3f),
		TrafficClass:    b[40],
		HopLimit:        b[41],
		SL:              b[42] >> 4,
		SubnetLocal:     b[42]&0x08 != 0,
		LocalACKTimeout: b[43] >> 3,
	}
}

// AttrID implements Message.
func (m *REQ) AttrID() AttrID { return AttrREQ }

func (m *REQ) validate() error {
	c := checker{format: "REQ"}
	if m.LocalCommID == 0 {
		c.fail("Local Communication ID", "must not be 0")
	}
	c.width("Local QPN", uint64(m.LocalQPN), 24)
	c.width("Local EECN", uint64(m.LocalEECN), 24)
	c.width("Remote EECN", uint64(m.RemoteEECN), 24)
	c.width("Remote CM Response Timeout", uint64(m.RemoteCMResponseTimeout), 5)
	c.width("Transport Service Type", uint64(m.TransportType), 2)
	c.width("Starting PSN", uint64(m.StartingPSN), 24)
	c.width("Local CM Response Timeout", uint64(m.LocalCMResponseTimeout), 5)
	c.width("Retry Count", uint64(m.RetryCount), 3)
	if !m.PathMTU.Valid() {
		c.fail("Path Packet Payload MTU", "%d is not an IB MTU code (1-5)", uint8(m.PathMTU))
	}
	c.width("RNR Retry Count", uint64(m.RNRRetryCount), 3)
	c.width("Max CM Retries", uint64(m.MaxCMRetries), 4)
	c.width("Extended Transport Type", uint64(m.ExtendedTransportType), 3)
	c.prefix = "Primary "
	m.Primary.check(&c)
	c.prefix = "Alternate "
	m.Alternate.check(&c)
	return c.err
}

// MarshalMAD implements Message.
func (m *REQ) MarshalMAD(b []byte, tid uint64) error {
	if err := m.validate(); err != nil {
		return err
	}
	p, err := startMAD(b, tid, AttrREQ)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(p[0:4], m.LocalCommID)
	binary.BigEndian.PutUint64(p[8:16], m.ServiceID)
	binary.BigEndian.PutUint64(p[16:24], m.LocalCAGUID)
	binary.BigEndian.PutUint32(p[28:32], uint32(m.LocalQKey))
	ib.Put24(p[32:35], uint32(m.LocalQPN))
	p[35] = m.ResponderResources
	ib.Put24(p[36:39], m.LocalEECN)
	p[39] = m.InitiatorDepth
	ib.Put24(p[40:43], m.RemoteEECN)
	p[43] = m.RemoteCMResponseTimeout<<3 | uint8(m.TransportType)<<1 | bit(m.EndToEndFlowControl)
	ib.Put24(p[44:47], m.StartingPSN)
	p[47] = m.LocalCMResponseTimeout<<3 | m.RetryCount
	binary.BigEndian.PutUint16(p[48:50], uint16(m.PKey))
	p[50] = uint8(m.PathMTU)<<4 | bit(m.RDCExists)<<3 | m.RNRRetryCount
	p[51] = m.MaxCMRetries<<4 | bit(m.SRQ)<<3 | m.ExtendedTransportType
	m.Primary.putREQ(p[52:96])
	m.Alternate.putREQ(p[96:140])
	copy(p[140:], m.PrivateData[:])
	return nil
}

// DecodeREQ decodes a REQ from a 232-octet CM payload.
func DecodeREQ(p []byte) (REQ, error) {
	if err := checkPayload("REQ", p); err != nil {
		return REQ{}, err
	}
	m := REQ{
		LocalCommID:             binary.BigEndian.Uint32(p[0:4]),
		ServiceID:               binary.BigEndian.Uint64(p[8:16]),
		LocalCAGUID:             binary.BigEndian.Uint64(p[16:24]),
		LocalQKey:               ib.QKey(binary.BigEndian.Uint32(p[28:32])),
		LocalQPN:                ib.QPN(ib.Get24(p[32:35])),
		ResponderResources:      p[35],
		LocalEECN:               ib.Get24(p[36:39]),
		InitiatorDepth:          p[39],
		RemoteEECN:              ib.Get24(p[40:43]),
		RemoteCMResponseTimeout: p[43] >> 3,
		TransportType:           TransportType(p[43] >> 1 & 3),
		EndToEndFlowControl:     p[43]&1 != 0,
		StartingPSN:             ib.Get24(p[44:47]),
		LocalCMResponseTimeout:  p[47] >> 3,
		RetryCount:              p[47] & 7,
		PKey:                    ib.PKey(binary.BigEndian.Uint16(p[48:50])),
		PathMTU:                 ib.MTU(p[50] >> 4),
		RDCExists:               p[50]&0x08 != 0,
		RNRRetryCount:           p[50] & 7,
		MaxCMRetries:            p[51] >> 4,
		SRQ:                     p[51]&0x08 != 0,
		ExtendedTransportType:   p[51] & 7,
		Primary:                 decodeREQPath(p[52:96]),
		Alternate:               decodeREQPath(p[96:140]),
		PrivateData:             [REQPrivateDataLen]byte(p[140:]),
	}
	// The encoder's checks double as the decoder's consistency checks, so
	// whatever decodes also encodes.
	if err := m.validate(); err != nil {
		return REQ{}, err
	}
	return m, nil
}
