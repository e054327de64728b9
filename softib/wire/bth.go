package wire

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// BTHLen is the size of the base transport header.
const BTHLen = 12

// BTH is the base transport header that starts every IB transport packet
// (spec §3).
type BTH struct {
	Opcode Opcode
	SE     bool  // solicited event
	MigReq bool  // path migration state; softib sends false and ignores it
	PadCnt uint8 // pad octets before the ICRC, 0-3
	TVer   uint8 // transport header version, 0
	PKey   ib.PKey
	// FECN and BECN exist only on native IB; RoCEv2 carries congestion in
	// the IP header, so senders leave them false. Kept so that a received
	// header is shown as it was.
	FECN   bool
	BECN   bool
	DestQP ib.QPN
	AckReq bool
	PSN    PSN
}

// BTH octet 1 and the flag bits of octets 4 and 8.
const (
	bthSE     = 0x80
	bthMigReq = 0x40
	bthPad    = 0x30
	bthTVer   = 0x0f
	bthFECN   = 0x80
	bthBECN   = 0x40
	bthAckReq = 0x80
)

// Encode writes the BTH into b[:12]. Reserved bits are written as zero.
func (h BTH) Encode(b []byte) error {
	if err := ib.NeedLen("BTH", "buffer", b, BTHLen); err != nil {
		return err
	}
	if h.PadCnt > 3 {
		return ib.ErrField("BTH", "PadCnt", "%d exceeds 3", h.PadCnt)
	}
	if h.TVer > bthTVer {
		return ib.ErrField("BTH", "TVer", "%d exceeds 4 bits", h.TVer)
	}
	if !h.DestQP.Valid() {
		return ib.ErrField("BTH", "DestQP", "%#x exceeds 24 bits", uint32(h.DestQP))
	}
	if !h.PSN.Valid() {
		return ib.ErrField("BTH", "PSN", "%#x exceeds 24 bits", uint32(h.PSN))
	}
	_ = b[11]
	b[0] = byte(h.Opcode)
	b[1] = h.PadCnt<<4 | h.TVer
	if h.SE {
		b[1] |= bthSE
	}
	if h.MigReq {
		b[1] |= bthMigReq
	}
	binary.BigEndian.PutUint16(b[2:4], uint16(h.PKey))
	b[4] = 0
	if h.FECN {
		b[4] |= bthFECN
	}
	if h.BECN {
		b[4] |= bthBECN
	}
	ib.Put24(b[5:8], uint32(h.DestQP))
	b[8] = 0
	if h.AckReq {
		b[8] = bthAckReq
	}
	ib.Put24(b[9:12], uint32(h.PSN))
	return nil
}

// DecodeBTH reads a BTH from b[:12]. A transport version other than 0 and
// an opcode softib does not accept (Opcode.Valid) are errors; reserved bits
// are ignored.
func DecodeBTH(b []byte) (BTH, error) {
	if err := ib.NeedLen("BTH", "header", b, BTHLen); err != nil {
		return BTH{}, err
	}
	_ = b[11]
	if tver := b[1] & bthTVer; tver != 0 {
		return BTH{}, ib.ErrField("BTH", "TVer", "version %d, want 0", tver)
	}
	op := Opcode(b[0])
	if !op.Valid() {
		return BTH{}, errUnsupportedOpcode(op)
	}
	return BTH{
		Opcode: op,
		SE:     b[1]&bthSE != 0,
		MigReq: b[1]&bthMigReq != 0,
		PadCnt: (b[1] & bthPad) >> 4,
		PKey:   ib.PKey(binary.BigEndian.Uint16(b[2:4])),
		FECN:   b[4]&bthFECN != 0,
		BECN:   b[4]&bthBECN != 0,
		DestQP: ib.QPN(ib.Get24(b[5:8])),
		AckReq: b[8]&bthAckReq != 0,
		PSN:    PSN(ib.Get24(b[9:12])),
	}, nil
}
