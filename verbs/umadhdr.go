package verbs

import (
	"encoding/binary"
	"fmt"

	"github.com/ipoibd/ipoibd/ib"
)

// The kernel's user MAD interface (ib_umad, /dev/infiniband/umadN): every
// read and write is a struct ib_user_mad_hdr (include/uapi/rdma/
// ib_user_mad.h) followed by the 256-octet MAD. The header is in host
// order except the fields the uapi marks __be (QPN, Q_Key, LID, flow
// label). This layout, with the P_Key index, is the one the kernel uses
// once an agent was registered with IB_USER_MAD_REGISTER_AGENT2.

// umadHdrLen is sizeof(struct ib_user_mad_hdr).
const umadHdrLen = 64

// umadMsgLen is one header and one MAD.
const umadMsgLen = umadHdrLen + 256

// umadHdr is struct ib_user_mad_hdr.
type umadHdr struct {
	Agent     uint32 // the agent id the registration returned
	Status    uint32 // receive: 0, or an errno for a send that failed (ETIMEDOUT)
	TimeoutMs uint32 // send: wait this long for a response (0: none)
	Retries   uint32
	Length    uint32 // receive: header and MAD octets
	QPN       ib.QPN // remote QP (1 for the GSI)
	QKey      ib.QKey
	LID       uint16 // remote LID (InfiniBand; 0 on RoCE)
	SL        uint8
	PathBits  uint8
	GRH       bool  // a global route: GIDIndex, HopLimit, TrafficClass, GID, FlowLabel are valid
	GIDIndex  uint8 // send: our source GID's index
	HopLimit  uint8
	TClass    uint8
	GID       ib.GID // remote GID
	FlowLabel uint32
	PKeyIndex uint16
}

var ne = binary.NativeEndian

// encode writes h into b[:umadHdrLen]; the reserved octets are zeroed.
func (h *umadHdr) encode(b []byte) {
	_ = b[umadHdrLen-1]
	ne.PutUint32(b[0:], h.Agent)
	ne.PutUint32(b[4:], h.Status)
	ne.PutUint32(b[8:], h.TimeoutMs)
	ne.PutUint32(b[12:], h.Retries)
	ne.PutUint32(b[16:], h.Length)
	binary.BigEndian.PutUint32(b[20:], uint32(h.QPN))
	binary.BigEndian.PutUint32(b[24:], uint32(h.QKey))
	binary.BigEndian.PutUint16(b[28:], h.LID)
	b[30], b[31] = h.SL, h.PathBits
	b[32] = 0
	if h.GRH {
		b[32] = 1
	}
	b[33], b[34], b[35] = h.GIDIndex, h.HopLimit, h.TClass
	copy(b[36:52], h.GID[:])
	binary.BigEndian.PutUint32(b[52:], h.FlowLabel)
	ne.PutUint16(b[56:], h.PKeyIndex)
	clear(b[58:umadHdrLen])
}

// decodeUMADHdr reads a header the kernel wrote.
func decodeUMADHdr(b []byte) (umadHdr, error) {
	if len(b) < umadHdrLen {
		return umadHdr{}, fmt.Errorf("verbs: umad read of %d octets, shorter than its %d-octet header", len(b), umadHdrLen)
	}
	h := umadHdr{
		Agent:     ne.Uint32(b[0:]),
		Status:    ne.Uint32(b[4:]),
		TimeoutMs: ne.Uint32(b[8:]),
		Retries:   ne.Uint32(b[12:]),
		Length:    ne.Uint32(b[16:]),
		QPN:       ib.QPN(binary.BigEndian.Uint32(b[20:])),
		QKey:      ib.QKey(binary.BigEndian.Uint32(b[24:])),
		LID:       binary.BigEndian.Uint16(b[28:]),
		SL:        b[30],
		PathBits:  b[31],
		GRH:       b[32] != 0,
		GIDIndex:  b[33],
		HopLimit:  b[34],
		TClass:    b[35],
		FlowLabel: binary.BigEndian.Uint32(b[52:]),
		PKeyIndex: ne.Uint16(b[56:]),
	}
	copy(h.GID[:], b[36:52])
	return h, nil
}

// umadRegReq2 is struct ib_user_mad_reg_req2, the argument of
// IB_USER_MAD_REGISTER_AGENT2 (40 octets).
type umadRegReq2 struct {
	ID          uint32 // out: the agent id
	QPN         uint32 // 1: the GSI
	MgmtClass   uint8
	Version     uint8
	_           uint16
	Flags       uint32
	MethodMask  [2]uint64 // bit n: receive unsolicited method n
	OUI         uint32
	RMPPVersion uint8
	_           [3]uint8
}

// The ioctls of ib_umad: _IOWR(0x1b, 4, struct ib_user_mad_reg_req2) and
// _IOW(0x1b, 2, __u32).
const (
	umadRegisterAgent2  = 3<<30 | 40<<16 | 0x1b<<8 | 4
	umadUnregisterAgent = 1<<30 | 4<<16 | 0x1b<<8 | 2
)

// CM class MADs (IBA 12.6): class 0x07, version 2, and every message is a
// Send (0x03).
const (
	cmMgmtClass   = 0x07
	cmClassVer    = 2
	cmMethodSend  = 0x03
	umadHopLimit  = 64 // a routable RoCEv2 GRH; the kernel CM uses the route's (64 by default)
	umadMaxRecvSz = 4096
)

// madFrom turns a received header into the address the CM engine answers
// to; pkeys is the port's P_Key table. ok is false for what the engine
// cannot answer: no GRH (an InfiniBand peer inside the subnet names itself
// by LID only) or a P_Key index outside the table.
func (h *umadHdr) madFrom(pkeys []ib.PKey) (ib.MADAddr, bool) {
	if !h.GRH || int(h.PKeyIndex) >= len(pkeys) {
		return ib.MADAddr{}, false
	}
	return ib.MADAddr{GID: h.GID, QPN: h.QPN & ib.QPNMask, PKey: pkeys[h.PKeyIndex]}, true
}
