package sa

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/ipoibd/ipoibd/ib"
)

// MCMemberRecordLen is an MCMemberRecord's size on the wire: 52 octets
// padded to 56.
const MCMemberRecordLen = 56

// MCMemberRecord component mask bits (IBA Table 216; the kernel's
// IB_SA_MCMEMBER_REC_*, rdma-core UMAD_SA_MCM_COMP_MASK_*).
const (
	MCMGID          uint64 = 1 << 0
	MCMPortGID      uint64 = 1 << 1
	MCMQKey         uint64 = 1 << 2
	MCMMLID         uint64 = 1 << 3
	MCMMTUSelector  uint64 = 1 << 4
	MCMMTU          uint64 = 1 << 5
	MCMTClass       uint64 = 1 << 6
	MCMPKey         uint64 = 1 << 7
	MCMRateSelector uint64 = 1 << 8
	MCMRate         uint64 = 1 << 9
	MCMLifeSelector uint64 = 1 << 10
	MCMLife         uint64 = 1 << 11
	MCMSL           uint64 = 1 << 12
	MCMFlowLabel    uint64 = 1 << 13
	MCMHopLimit     uint64 = 1 << 14
	MCMScope        uint64 = 1 << 15
	MCMJoinState    uint64 = 1 << 16
	MCMProxyJoin    uint64 = 1 << 17
)

// JoinState is the 4-bit membership of a port in a group.
type JoinState uint8

// Join states; a port may hold several at once.
const (
	FullMember         JoinState = 1 << 0
	NonMember          JoinState = 1 << 1
	SendOnlyNonMember  JoinState = 1 << 2
	SendOnlyFullMember JoinState = 1 << 3
)

func (j JoinState) String() string {
	if j == 0 {
		return "none"
	}
	var s []string
	for i, n := range []string{"full", "non", "send-only non", "send-only full"} {
		if j&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	if j>>4 != 0 {
		s = append(s, fmt.Sprintf("reserved %#x", uint8(j>>4)))
	}
	return strings.Join(s, "|")
}

// MCMemberRecord is a port's membership in a multicast group and the
// group's parameters (IBA 15.2.5.17).
//
//	octets  0-15  MGID
//	       16-31  PortGID
//	       32-35  Q_Key         36-37 MLID
//	       38     MTUSelector:2 MTU:6      39 TClass
//	       40-41  P_Key
//	       42     RateSelector:2 Rate:6
//	       43     PacketLifeTimeSelector:2 PacketLifeTime:6
//	       44-47  SL:4 FlowLabel:20 HopLimit:8
//	       48     Scope:4 JoinState:4
//	       49     ProxyJoin:1 reserved:7   50-55 reserved (and pad)
type MCMemberRecord struct {
	MGID, PortGID ib.GID
	QKey          ib.QKey
	MLID          uint16
	MTU           Selected
	TClass        uint8
	PKey          ib.PKey
	Rate          Selected
	Lifetime      Selected
	SL            uint8  // 4 bits
	FlowLabel     uint32 // 20 bits
	HopLimit      uint8
	Scope         uint8 // 4 bits
	JoinState     JoinState
	ProxyJoin     bool
}

// AttrID is MCMemberRecord's.
func (*MCMemberRecord) AttrID() AttrID { return AttrMCMemberRecord }

// Len is MCMemberRecordLen.
func (*MCMemberRecord) Len() int { return MCMemberRecordLen }

// Encode writes the record into b[0:56].
func (m *MCMemberRecord) Encode(b []byte) error {
	if err := ib.NeedLen("MCMemberRecord", "buffer", b, MCMemberRecordLen); err != nil {
		return err
	}
	c := checker{format: "MCMemberRecord"}
	m.MTU.check(&c, "MTU")
	m.Rate.check(&c, "Rate")
	m.Lifetime.check(&c, "PacketLifeTime")
	c.width("SL", uint64(m.SL), 4)
	c.width("FlowLabel", uint64(m.FlowLabel), 20)
	c.width("Scope", uint64(m.Scope), 4)
	c.width("JoinState", uint64(m.JoinState), 4)
	if c.err != nil {
		return c.err
	}
	be := binary.BigEndian
	copy(b[0:16], m.MGID[:])
	copy(b[16:32], m.PortGID[:])
	be.PutUint32(b[32:], uint32(m.QKey))
	be.PutUint16(b[36:], m.MLID)
	b[38], b[39] = m.MTU.octet(), m.TClass
	be.PutUint16(b[40:], uint16(m.PKey))
	b[42], b[43] = m.Rate.octet(), m.Lifetime.octet()
	be.PutUint32(b[44:], uint32(m.SL)<<28|m.FlowLabel<<8|uint32(m.HopLimit))
	b[48] = m.Scope<<4 | uint8(m.JoinState)
	b[49] = bit(m.ProxyJoin) << 7
	clear(b[50:56])
	return nil
}

// DecodeMCMemberRecord reads a record from b[0:56] (the 4 pad octets may
// be missing: a record is 52 octets); reserved bits are ignored.
func DecodeMCMemberRecord(b []byte) (MCMemberRecord, error) {
	if err := ib.NeedLen("MCMemberRecord", "record", b, 52); err != nil {
		return MCMemberRecord{}, err
	}
	be := binary.BigEndian
	w := be.Uint32(b[44:])
	m := MCMemberRecord{
		QKey:      ib.QKey(be.Uint32(b[32:])),
		MLID:      be.Uint16(b[36:]),
		MTU:       selected(b[38]),
		TClass:    b[39],
		PKey:      ib.PKey(be.Uint16(b[40:])),
		Rate:      selected(b[42]),
		Lifetime:  selected(b[43]),
		SL:        uint8(w >> 28),
		FlowLabel: w >> 8 & 0xfffff,
		HopLimit:  uint8(w),
		Scope:     b[48] >> 4,
		JoinState: JoinState(b[48] & 0xf),
		ProxyJoin: b[49]&0x80 != 0,
	}
	copy(m.MGID[:], b[0:16])
	copy(m.PortGID[:], b[16:32])
	return m, nil
}
