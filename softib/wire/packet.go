package wire

import (
	"github.com/ipoibd/ipoibd/ib"
)

const (
	// ICRCLen is the size of the invariant CRC that ends every packet.
	ICRCLen = 4
	// MaxPayload is the largest payload of one packet: the largest IB path
	// MTU (4096). Anything longer is not an IB packet.
	MaxPayload = 4096
)

// Packet is an IB transport packet as it travels in a UDP payload. Only the
// extension headers its opcode carries are meaningful; the others are zero
// after ParsePacket.
type Packet struct {
	BTH     BTH
	DETH    DETH   // UD opcodes
	AETH    AETH   // RC Acknowledge
	Imm     uint32 // "with Immediate" opcodes
	Payload []byte // ParsePacket: a sub-slice of its input, pad stripped
}

// ParsePacket parses the UDP payload of a RoCEv2 packet (BTH to ICRC
// inclusive) into p without allocating on success. It checks the opcode's
// header set, the length, the pad and that payload and pad fill whole
// 4-octet words. It does not verify the ICRC, which covers the IP header
// the caller has and this function does not (see ICRC). On error p is
// unchanged.
func ParsePacket(b []byte, p *Packet) error {
	bth, err := DecodeBTH(b)
	if err != nil {
		return err
	}
	info := &opTable[bth.Opcode]
	rest := b[BTHLen:]
	var (
		deth DETH
		aeth AETH
		imm  uint32
	)
	// DecodeBTH admits only Valid opcodes, whose headers are among these
	// three, in this order.
	if info.ext&HasDETH != 0 {
		if err := ib.NeedLen("packet", "DETH", rest, DETHLen); err != nil {
			return err
		}
		deth, _ = DecodeDETH(rest)
		rest = rest[DETHLen:]
	}
	if info.ext&HasAETH != 0 {
		if err := ib.NeedLen("packet", "AETH", rest, AETHLen); err != nil {
			return err
		}
		if aeth, err = DecodeAETH(rest); err != nil {
			return err
		}
		rest = rest[AETHLen:]
	}
	if info.ext&HasImmDt != 0 {
		if err := ib.NeedLen("packet", "ImmDt", rest, ImmDtLen); err != nil {
			return err
		}
		imm, _ = DecodeImmDt(rest)
		rest = rest[ImmDtLen:]
	}
	if err := ib.NeedLen("packet", "ICRC", rest, ICRCLen); err != nil {
		return err
	}
	body := rest[:len(rest)-ICRCLen] // payload and pad
	pad := int(bth.PadCnt)
	switch {
	case !info.payload && len(body) != 0:
		return ib.ErrField("packet", "payload", "%v carries no payload, have %d octets", bth.Opcode, len(body))
	case len(body)%4 != 0:
		return ib.ErrField("packet", "payload", "payload and pad of %d octets is not a multiple of 4", len(body))
	case pad > len(body):
		return ib.ErrField("BTH", "PadCnt", "%d pad octets in %d octets of payload and pad", pad, len(body))
	case len(body)-pad > MaxPayload:
		return ib.ErrField("packet", "payload", "%d octets exceed the largest path MTU %d", len(body)-pad, MaxPayload)
	}
	n := len(body) - pad
	*p = Packet{BTH: bth, DETH: deth, AETH: aeth, Imm: imm, Payload: body[:n:n]}
	return nil
}

// PadCount returns the pad octets that round a payload up to a multiple of 4.
func PadCount(payloadLen int) uint8 { return uint8(-payloadLen & 3) }

// PacketLen returns the length of the IB packet (BTH to ICRC inclusive)
// that carries payloadLen octets with opcode op.
func PacketLen(op Opcode, payloadLen int) int {
	return op.HeaderLen() + payloadLen + int(PadCount(payloadLen)) + ICRCLen
}

// PutHeaders writes the headers a sender puts in front of a payload of
// payloadLen octets into b: the BTH, then the DETH (UD), AETH (ACK) and
// ImmDt ("with Immediate") from p, as the opcode requires. BTH.PadCnt is
// computed from payloadLen; the one in p is ignored, and so is p.Payload, so
// that a payload held elsewhere (registered memory) is framed without a copy.
// It returns the header length.
func PutHeaders(b []byte, p *Packet, payloadLen int) (int, error) {
	op := p.BTH.Opcode
	if !op.Valid() {
		return 0, errUnsupportedOpcode(op)
	}
	info := &opTable[op]
	switch {
	case payloadLen < 0 || payloadLen > MaxPayload:
		return 0, ib.ErrField("packet", "payload", "length %d outside 0-%d", payloadLen, MaxPayload)
	case !info.payload && payloadLen != 0:
		return 0, ib.ErrField("packet", "payload", "%v carries no payload, have %d octets", op, payloadLen)
	}
	n := int(info.hdrLen)
	if err := ib.NeedLen("packet", "buffer", b, n); err != nil {
		return 0, err
	}
	bth := p.BTH
	bth.PadCnt = PadCount(payloadLen)
	if err := bth.Encode(b); err != nil {
		return 0, err
	}
	off := BTHLen
	if info.ext&HasDETH != 0 {
		if err := p.DETH.Encode(b[off:]); err != nil {
			return 0, err
		}
		off += DETHLen
	}
	if info.ext&HasAETH != 0 {
		if err := p.AETH.Encode(b[off:]); err != nil {
			return 0, err
		}
		off += AETHLen
	}
	if info.ext&HasImmDt != 0 {
		_ = PutImmDt(b[off:], p.Imm)
	}
	return n, nil
}

// AppendPacket appends the whole IB packet p to dst: headers (PutHeaders),
// p.Payload, zero pad, and a zero ICRC slot for PutICRC to fill once the
// ICRC over the IP and UDP headers is known.
func AppendPacket(dst []byte, p *Packet) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, PacketLen(p.BTH.Opcode, len(p.Payload)))...)
	n, err := PutHeaders(dst[start:], p, len(p.Payload))
	if err != nil {
		return dst[:start], err
	}
	copy(dst[start+n:], p.Payload) // pad and ICRC slot are already zero
	return dst, nil
}
