package wire

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// LRHLen is the size of the local route header that starts every packet
// on an InfiniBand link (IBA Vol 1 §7.7).
const LRHLen = 8

// VCRCLen is the size of the variant CRC that ends every packet on an
// InfiniBand link, behind the ICRC.
const VCRCLen = 2

// Link Next Header values: what follows the LRH. softib sends and takes
// only IBA transport packets, local (BTH next) or global (GRH next); raw
// packets (0b00, 0b01) carry no ICRC and are no IB transport.
const (
	LNHLocal  = 0b10 // BTH follows
	LNHGlobal = 0b11 // GRH follows
)

// LIDs with a meaning of their own.
const (
	// PermissiveLID (0xFFFF) as a DLID is accepted by any port: the
	// address of a port whose LID is not known (directed-route SMPs).
	PermissiveLID = 0xffff
	// MulticastLIDBase to MulticastLIDLast are multicast LIDs (MLIDs);
	// 1 to 0xBFFF are unicast, 0 is reserved and never valid.
	MulticastLIDBase = 0xc000
	MulticastLIDLast = 0xfffe
)

// IsMulticastLID reports whether lid names a multicast group.
func IsMulticastLID(lid uint16) bool { return lid >= MulticastLIDBase && lid <= MulticastLIDLast }

// IsUnicastLID reports whether lid can be a port's LID.
func IsUnicastLID(lid uint16) bool { return lid != 0 && lid < MulticastLIDBase }

// LRH is the local route header (IBA Vol 1 §7.7): what switches forward
// by. Its two reserved fields are sent as zero and ignored on receive.
type LRH struct {
	VL     uint8  // virtual lane, 4 bits: set by each hop from the SL
	LVer   uint8  // link version, 4 bits: 0
	SL     uint8  // service level, 4 bits
	LNH    uint8  // link next header, 2 bits
	DLID   uint16 // destination LID
	PktLen uint16 // 11 bits: packet length in 4-octet words, LRH to ICRC inclusive
	SLID   uint16 // source LID
}

// Encode writes the LRH into b[:8].
func (h LRH) Encode(b []byte) error {
	if err := ib.NeedLen("LRH", "buffer", b, LRHLen); err != nil {
		return err
	}
	switch {
	case h.VL > 15:
		return ib.ErrField("LRH", "VL", "%d exceeds 4 bits", h.VL)
	case h.LVer > 15:
		return ib.ErrField("LRH", "LVer", "%d exceeds 4 bits", h.LVer)
	case h.SL > 15:
		return ib.ErrField("LRH", "SL", "%d exceeds 4 bits", h.SL)
	case h.LNH > 3:
		return ib.ErrField("LRH", "LNH", "%d exceeds 2 bits", h.LNH)
	case h.PktLen > 0x7ff:
		return ib.ErrField("LRH", "PktLen", "%d words exceed 11 bits", h.PktLen)
	}
	_ = b[7]
	b[0] = h.VL<<4 | h.LVer
	b[1] = h.SL<<4 | h.LNH
	binary.BigEndian.PutUint16(b[2:4], h.DLID)
	binary.BigEndian.PutUint16(b[4:6], h.PktLen)
	binary.BigEndian.PutUint16(b[6:8], h.SLID)
	return nil
}

// DecodeLRH reads an LRH from b[:8]. It refuses a link version other than
// 0, the only one defined.
func DecodeLRH(b []byte) (LRH, error) {
	if err := ib.NeedLen("LRH", "header", b, LRHLen); err != nil {
		return LRH{}, err
	}
	_ = b[7]
	h := LRH{
		VL:     b[0] >> 4,
		LVer:   b[0] & 0x0f,
		SL:     b[1] >> 4,
		LNH:    b[1] & 0x03,
		DLID:   binary.BigEndian.Uint16(b[2:4]),
		PktLen: binary.BigEndian.Uint16(b[4:6]) & 0x7ff,
		SLID:   binary.BigEndian.Uint16(b[6:8]),
	}
	if h.LVer != 0 {
		return LRH{}, ib.ErrField("LRH", "LVer", "link version %d, want 0", h.LVer)
	}
	return h, nil
}

// GRH is the global route header of a native InfiniBand packet (IBA Vol 1
// §8.3), laid out as an IPv6 header: IPVer 6, NxtHdr 0x1B (IBA
// transport). PayLen counts the octets after the GRH up to and including
// the ICRC.
type GRH struct {
	TClass    uint8
	FlowLabel uint32 // 20 bits
	PayLen    uint16
	NxtHdr    uint8
	HopLmt    uint8
	SGID      ib.GID
	DGID      ib.GID
}

// grhNextIBA is the GRH NxtHdr of an IBA transport packet.
const grhNextIBA = 0x1b

// Encode writes the GRH into b[:40] with IPVer 6.
func (h *GRH) Encode(b []byte) error {
	if err := ib.NeedLen("GRH", "buffer", b, ib.GRHLen); err != nil {
		return err
	}
	if h.FlowLabel > 0xfffff {
		return ib.ErrField("GRH", "FlowLabel", "%#x exceeds 20 bits", h.FlowLabel)
	}
	_ = b[39]
	binary.BigEndian.PutUint32(b[0:4], 6<<28|uint32(h.TClass)<<20|h.FlowLabel)
	binary.BigEndian.PutUint16(b[4:6], h.PayLen)
	b[6], b[7] = h.NxtHdr, h.HopLmt
	copy(b[8:24], h.SGID[:])
	copy(b[24:40], h.DGID[:])
	return nil
}

// DecodeGRH reads a GRH from b[:40]; it refuses an IPVer other than 6.
func DecodeGRH(b []byte, h *GRH) error {
	if err := ib.NeedLen("GRH", "header", b, ib.GRHLen); err != nil {
		return err
	}
	_ = b[39]
	w := binary.BigEndian.Uint32(b[0:4])
	if w>>28 != 6 {
		return ib.ErrField("GRH", "IPVer", "%d, want 6", w>>28)
	}
	h.TClass = uint8(w >> 20)
	h.FlowLabel = w & 0xfffff
	h.PayLen = binary.BigEndian.Uint16(b[4:6])
	h.NxtHdr, h.HopLmt = b[6], b[7]
	copy(h.SGID[:], b[8:24])
	copy(h.DGID[:], b[24:40])
	return nil
}
