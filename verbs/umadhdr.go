package verbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/ipoibd/ipoibd/ib"
)

// The kernel's user MAD interface (ib_umad, /dev/infiniband/umadN), as
// libibumad hands it over: every MAD read or written is a struct
// ib_user_mad_hdr (include/uapi/rdma/ib_user_mad.h; libibumad's struct
// ib_user_mad) followed by the 256-octet MAD. The header is in host order
// except the fields the uapi marks __be (QPN, Q_Key, LID, flow label).
// This layout, with the P_Key index, is the one the kernel uses once the
// file enabled P_Key indices, as libibumad's umad_open_port does.

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
// to, as the kernel reported it (recv_handler): the sender's LID and SL,
// the bits of our LID it was sent to, and, when it carried a GRH, the
// sender's GID and the GRH's fields. pkeys is the port's current P_Key
// table; ok is false for a P_Key index outside it, the one thing the
// engine could not answer. A MAD without a GRH (the kernel's CM inside a
// subnet) is kept: its LID is its address.
func (h *umadHdr) madFrom(pkeys []ib.PKey) (ib.MADAddr, bool) {
	if int(h.PKeyIndex) >= len(pkeys) {
		return ib.MADAddr{}, false
	}
	a := ib.MADAddr{QPN: h.QPN & ib.QPNMask, PKey: pkeys[h.PKeyIndex],
		Path: ib.Path{DLID: h.LID, SL: h.SL & 0xf, SrcPathBits: h.PathBits & 0x7f}}
	if h.GRH {
		a.GID = h.GID
		a.Path.GRH, a.Path.HopLimit, a.Path.TrafficClass, a.Path.FlowLabel = true, h.HopLimit, h.TClass, h.FlowLabel&0xfffff
	}
	return a, true
}

// errNoLID: an InfiniBand MAD needs the destination's LID; a zero one
// would go to LID 0, which is no port (issue 22: REQs went there).
var errNoLID = errors.New("no LID to send to (InfiniBand MADs go by LID; GID addressing is RoCE's)")

// sendHdr is the header that sends one MAD to to, as ib_umad_write builds
// the address from it: the destination LID, SL and our source path bits,
// and a GRH only when the address asks for one. On a RoCE port (ethernet)
// every MAD carries a GRH, the only address there, with the address's
// hop limit or umadHopLimit. pkeys is the port's current P_Key table: the
// header names the P_Key by its index.
func sendHdr(to ib.MADAddr, agent uint32, gidIndex uint8, pkeys []ib.PKey, ethernet bool) (umadHdr, error) {
	idx := slices.Index(pkeys, to.PKey)
	if idx < 0 {
		idx = slices.IndexFunc(pkeys, func(p ib.PKey) bool { return p.Valid() && p.Partition() == to.PKey.Partition() })
	}
	if idx < 0 {
		return umadHdr{}, fmt.Errorf("P_Key %v is not in the port's table", to.PKey)
	}
	qpn := to.QPN
	if qpn == 0 {
		qpn = ib.QP1
	}
	h := umadHdr{Agent: agent, Length: umadMsgLen, QPN: qpn, QKey: ib.GSIQKey, PKeyIndex: uint16(idx)}
	grh := to.Path.GRH
	if ethernet {
		grh = true
	} else {
		if !to.LIDRouted() {
			return umadHdr{}, errNoLID
		}
		h.LID, h.SL, h.PathBits = to.Path.DLID, to.Path.SL&0xf, to.Path.SrcPathBits&0x7f
	}
	if grh {
		h.GRH, h.GIDIndex, h.GID = true, gidIndex, to.GID
		h.HopLimit, h.TClass, h.FlowLabel = to.Path.HopLimit, to.Path.TrafficClass, to.Path.FlowLabel&0xfffff
		if !to.Path.GRH || h.HopLimit == 0 {
			h.HopLimit = umadHopLimit
		}
	}
	return h, nil
}
