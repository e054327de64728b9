package sa

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// PathRecordLen is a PathRecord's size on the wire.
const PathRecordLen = 64

// PathRecord component mask bits (IBA Table 201; the kernel's
// IB_SA_PATH_REC_*): bit n of ComponentMask says field n is significant.
const (
	PathServiceID   uint64 = 3 << 0 // two components: the 64-bit ServiceID
	PathDGID        uint64 = 1 << 2
	PathSGID        uint64 = 1 << 3
	PathDLID        uint64 = 1 << 4
	PathSLID        uint64 = 1 << 5
	PathRawTraffic  uint64 = 1 << 6
	PathFlowLabel   uint64 = 1 << 8
	PathHopLimit    uint64 = 1 << 9
	PathTClass      uint64 = 1 << 10
	PathReversible  uint64 = 1 << 11
	PathNumbPath    uint64 = 1 << 12
	PathPKey        uint64 = 1 << 13
	PathQoSClass    uint64 = 1 << 14
	PathSL          uint64 = 1 << 15
	PathMTUSelector uint64 = 1 << 16
	PathMTU         uint64 = 1 << 17
	PathRateSel     uint64 = 1 << 18
	PathRate        uint64 = 1 << 19
	PathLifeSel     uint64 = 1 << 20
	PathLife        uint64 = 1 << 21
	PathPreference  uint64 = 1 << 22
)

// PathRecord is the SA's description of a path from SGID to DGID
// (IBA 15.2.5.16): what an address handle and a CM REQ's path need.
//
//	octets  0-7   ServiceID
//	        8-23  DGID
//	       24-39  SGID
//	       40-41  DLID          42-43 SLID
//	       44-47  RawTraffic:1 reserved:3 FlowLabel:20 HopLimit:8
//	       48     TClass        49 Reversible:1 NumbPath:7
//	       50-51  P_Key         52-53 QoSClass:12 SL:4
//	       54     MTUSelector:2 MTU:6
//	       55     RateSelector:2 Rate:6
//	       56     PacketLifeTimeSelector:2 PacketLifeTime:6
//	       57     Preference    58-63 reserved
type PathRecord struct {
	ServiceID  uint64
	DGID, SGID ib.GID
	DLID, SLID uint16
	RawTraffic bool
	FlowLabel  uint32 // 20 bits
	HopLimit   uint8
	TClass     uint8
	Reversible bool
	NumbPath   uint8 // 7 bits
	PKey       ib.PKey
	QoSClass   uint16 // 12 bits
	SL         uint8  // 4 bits
	MTU        Selected
	Rate       Selected
	Lifetime   Selected // PacketLifeTime: 4.096 µs × 2^Value
	Preference uint8
}

// AttrID is PathRecord's.
func (*PathRecord) AttrID() AttrID { return AttrPathRecord }

// Len is PathRecordLen.
func (*PathRecord) Len() int { return PathRecordLen }

// Encode writes the record into b[0:64].
func (p *PathRecord) Encode(b []byte) error {
	if err := ib.NeedLen("PathRecord", "buffer", b, PathRecordLen); err != nil {
		return err
	}
	c := checker{format: "PathRecord"}
	c.width("FlowLabel", uint64(p.FlowLabel), 20)
	c.width("NumbPath", uint64(p.NumbPath), 7)
	c.width("QoSClass", uint64(p.QoSClass), 12)
	c.width("SL", uint64(p.SL), 4)
	p.MTU.check(&c, "MTU")
	p.Rate.check(&c, "Rate")
	p.Lifetime.check(&c, "PacketLifeTime")
	if c.err != nil {
		return c.err
	}
	be := binary.BigEndian
	be.PutUint64(b[0:], p.ServiceID)
	copy(b[8:24], p.DGID[:])
	copy(b[24:40], p.SGID[:])
	be.PutUint16(b[40:], p.DLID)
	be.PutUint16(b[42:], p.SLID)
	be.PutUint32(b[44:], uint32(bit(p.RawTraffic))<<31|p.FlowLabel<<8|uint32(p.HopLimit))
	b[48] = p.TClass
	b[49] = bit(p.Reversible)<<7 | p.NumbPath
	be.PutUint16(b[50:], uint16(p.PKey))
	be.PutUint16(b[52:], p.QoSClass<<4|uint16(p.SL))
	b[54], b[55], b[56] = p.MTU.octet(), p.Rate.octet(), p.Lifetime.octet()
	b[57] = p.Preference
	clear(b[58:64])
	return nil
}

// DecodePathRecord reads a record from b[0:64]; reserved bits are ignored.
func DecodePathRecord(b []byte) (PathRecord, error) {
	if err := ib.NeedLen("PathRecord", "record", b, PathRecordLen); err != nil {
		return PathRecord{}, err
	}
	be := binary.BigEndian
	w := be.Uint32(b[44:])
	q := be.Uint16(b[52:])
	p := PathRecord{
		ServiceID:  be.Uint64(b[0:]),
		DLID:       be.Uint16(b[40:]),
		SLID:       be.Uint16(b[42:]),
		RawTraffic: w>>31 != 0,
		FlowLabel:  w >> 8 & 0xfffff,
		HopLimit:   uint8(w),
		TClass:     b[48],
		Reversible: b[49]&0x80 != 0,
		NumbPath:   b[49] & 0x7f,
		PKey:       ib.PKey(be.Uint16(b[50:])),
		QoSClass:   q >> 4,
		SL:         uint8(q & 0xf),
		MTU:        selected(b[54]),
		Rate:       selected(b[55]),
		Lifetime:   selected(b[56]),
		Preference: b[57],
	}
	copy(p.DGID[:], b[8:24])
	copy(p.SGID[:], b[24:40])
	return p, nil
}
