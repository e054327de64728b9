package softib

import (
	"encoding/binary"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// UDPPort is the RoCEv2 destination port.
const UDPPort = 4791

// Header sizes.
const (
	BTHLen  = 12
	DETHLen = 8
	AETHLen = 4
	ICRCLen = 4
)

// Opcode is the BTH opcode: transport in bits 7-5, operation in bits 4-0.
type Opcode uint8

// The opcodes softib speaks: SENDs of the three transports and the RC ACK.
const (
	OpRCSendFirst  Opcode = 0x00
	OpRCSendMiddle Opcode = 0x01
	OpRCSendLast   Opcode = 0x02
	OpRCSendOnly   Opcode = 0x04
	OpRCAck        Opcode = 0x11
	OpUCSendFirst  Opcode = 0x20
	OpUCSendMiddle Opcode = 0x21
	OpUCSendLast   Opcode = 0x22
	OpUCSendOnly   Opcode = 0x24
	OpUDSendOnly   Opcode = 0x64
)

// Position is where a packet sits in its message.
type Position uint8

// Packet positions.
const (
	PosNone Position = iota // not a SEND (ACK)
	PosFirst
	PosMiddle
	PosLast
	PosOnly
)

// Transport returns the transport an opcode belongs to (0 if none softib
// knows).
func (o Opcode) Transport() ib.QPType {
	switch o >> 5 {
	case 0:
		return ib.RC
	case 1:
		return ib.UC
	case 3:
		return ib.UD
	}
	return 0
}

// Position returns the packet's place in its message.
func (o Opcode) Position() Position {
	switch o & 0x1f {
	case 0x00:
		return PosFirst
	case 0x01:
		return PosMiddle
	case 0x02:
		return PosLast
	case 0x04:
		return PosOnly
	}
	return PosNone
}

// Valid reports whether softib understands the opcode.
func (o Opcode) Valid() bool {
	switch o {
	case OpRCSendFirst, OpRCSendMiddle, OpRCSendLast, OpRCSendOnly, OpRCAck,
		OpUCSendFirst, OpUCSendMiddle, OpUCSendLast, OpUCSendOnly, OpUDSendOnly:
		return true
	}
	return false
}

// extLen is the size of the extension headers that follow the BTH.
func (o Opcode) extLen() int {
	switch o {
	case OpUDSendOnly:
		return DETHLen
	case OpRCAck:
		return AETHLen
	}
	return 0
}

// PSN is a 24-bit packet sequence number.
type PSN uint32

const (
	psnMask PSN = 0xffffff
	// psnWindow is half the PSN space: a PSN further ahead is behind.
	psnWindow = 1 << 23
)

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return (p + PSN(n)) & psnMask }

// Prev returns p-1 modulo 2^24.
func (p PSN) Prev() PSN { return (p - 1) & psnMask }

// Compare orders PSNs in the circular space: -1 if a is before b, +1 if
// after, 0 if equal.
func Compare(a, b PSN) int {
	d := int32(uint32(a-b) << 8)
	switch {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}

// Distance returns how many PSNs b is ahead of a.
func Distance(a, b PSN) uint32 { return uint32((b - a) & psnMask) }

// LocalACKTimeout decodes a QP's local ACK timeout: 4.096 µs × 2^code; 0
// means the timer is off and is returned as 0.
func LocalACKTimeout(code uint8) time.Duration {
	if code == 0 {
		return 0
	}
	return time.Duration(4096<<min(code, 31)) * time.Nanosecond
}

// BTH is the base transport header.
type BTH struct {
	Opcode Opcode
	SE     bool // solicited event
	MigReq bool
	PadCnt uint8
	PKey   ib.PKey
	DestQP ib.QPN
	AckReq bool
	PSN    PSN
}

// Encode writes the BTH into b[:12]; reserved fields and TVer are zero.
func (h *BTH) Encode(b []byte) error {
	if err := ib.NeedLen("BTH", "buffer", b, BTHLen); err != nil {
		return err
	}
	if h.PadCnt > 3 {
		return ib.ErrField("BTH", "PadCnt", "%d exceeds 3", h.PadCnt)
	}
	if !h.DestQP.Valid() {
		return ib.ErrField("BTH", "DestQP", "%#x exceeds 24 bits", uint32(h.DestQP))
	}
	if h.PSN > psnMask {
		return ib.ErrField("BTH", "PSN", "%#x exceeds 24 bits", uint32(h.PSN))
	}
	b[0] = byte(h.Opcode)
	b[1] = h.PadCnt << 4
	if h.SE {
		b[1] |= 0x80
	}
	if h.MigReq {
		b[1] |= 0x40
	}
	binary.BigEndian.PutUint16(b[2:], uint16(h.PKey))
	b[4] = 0
	ib.Put24(b[5:8], uint32(h.DestQP))
	b[8] = 0
	if h.AckReq {
		b[8] = 0x80
	}
	ib.Put24(b[9:12], uint32(h.PSN))
	return nil
}

// DecodeBTH reads a BTH; unknown opcodes and transport versions are errors.
func DecodeBTH(b []byte) (BTH, error) {
	if err := ib.NeedLen("BTH", "header", b, BTHLen); err != nil {
		return BTH{}, err
	}
	h := BTH{
		Opcode: Opcode(b[0]),
		SE:     b[1]&0x80 != 0,
		MigReq: b[1]&0x40 != 0,
		PadCnt: (b[1] >> 4) & 3,
		PKey:   ib.PKey(binary.BigEndian.Uint16(b[2:])),
		DestQP: ib.QPN(ib.Get24(b[5:8])),
		AckReq: b[8]&0x80 != 0,
		PSN:    PSN(ib.Get24(b[9:12])),
	}
	if tver := b[1] & 0x0f; tver != 0 {
		return BTH{}, ib.ErrField("BTH", "TVer", "version %d, want 0", tver)
	}
	if !h.Opcode.Valid() {
		return BTH{}, ib.ErrField("BTH", "OpCode", "unsupported opcode %#02x", uint8(h.Opcode))
	}
	return h, nil
}

// DETH is the datagram extended transport header of UD packets.
type DETH struct {
	QKey  ib.QKey
	SrcQP ib.QPN
}

// Encode writes the DETH into b[:8].
func (h *DETH) Encode(b []byte) error {
	if err := ib.NeedLen("DETH", "buffer", b, DETHLen); err != nil {
		return err
	}
	if !h.SrcQP.Valid() {
		return ib.ErrField("DETH", "SrcQP", "%#x exceeds 24 bits", uint32(h.SrcQP))
	}
	binary.BigEndian.PutUint32(b[0:], uint32(h.QKey))
	b[4] = 0
	ib.Put24(b[5:8], uint32(h.SrcQP))
	return nil
}

// DecodeDETH reads a DETH.
func DecodeDETH(b []byte) (DETH, error) {
	if err := ib.NeedLen("DETH", "header", b, DETHLen); err != nil {
		return DETH{}, err
	}
	return DETH{QKey: ib.QKey(binary.BigEndian.Uint32(b)), SrcQP: ib.QPN(ib.Get24(b[5:8]))}, nil
}

// AETH is the ACK extended transport header: a syndrome and the MSN.
type AETH struct {
	Syndrome uint8
	MSN      uint32
}

// AckKind is the type in bits 7-5 of an AETH syndrome.
type AckKind uint8

// ACK kinds.
const (
	AckKindACK      AckKind = 0
	AckKindRNRNAK   AckKind = 1
	AckKindReserved AckKind = 2
	AckKindNAK      AckKind = 3
)

// NAK codes (syndrome bits 4-0 of a NAK).
const (
	NAKPSNSequenceError  uint8  = 0
	NAKInvalidRequest    uint8  = 1
	NAKRemoteAccessError uint8  = 2
	NAKRemoteOperational uint8  = 3
	unlimitedCredits     uint8  = 0x1f
	msnMask              uint32 = 0xffffff
)

// ACK acknowledges with "no credit information", as IPoIB (no end-to-end
// flow control) does.
func ACK(msn uint32) AETH { return AETH{Syndrome: unlimitedCredits, MSN: msn & msnMask} }

// RNRNAK tells the requester to retry after the RNR timer code's time.
func RNRNAK(timer uint8, msn uint32) AETH {
	return AETH{Syndrome: 1<<5 | timer&0x1f, MSN: msn & msnMask}
}

// NAK reports an error code.
func NAK(code uint8, msn uint32) AETH { return AETH{Syndrome: 3<<5 | code&0x1f, MSN: msn & msnMask} }

// Kind returns the syndrome's type.
func (a AETH) Kind() AckKind { return AckKind(a.Syndrome >> 5) }

// NAKCode returns the code of a NAK.
func (a AETH) NAKCode() uint8 { return a.Syndrome & 0x1f }

// rnrTimerMicros are the RNR NAK timer codes in microseconds (code 0 is
// the longest).
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimer returns how long an RNR NAK asks the requester to wait.
func (a AETH) RNRTimer() time.Duration { return RNRDelay(a.Syndrome & 0x1f) }

// RNRDelay decodes an RNR timer code.
func RNRDelay(code uint8) time.Duration {
	return time.Duration(rnrTimerMicros[code&0x1f]) * time.Microsecond
}

// Encode writes the AETH into b[:4].
func (a AETH) Encode(b []byte) error {
	if err := ib.NeedLen("AETH", "buffer", b, AETHLen); err != nil {
		return err
	}
	if a.MSN > msnMask {
		return ib.ErrField("AETH", "MSN", "%#x exceeds 24 bits", a.MSN)
	}
	b[0] = a.Syndrome
	ib.Put24(b[1:4], a.MSN)
	return nil
}

// DecodeAETH reads an AETH.
func DecodeAETH(b []byte) (AETH, error) {
	if err := ib.NeedLen("AETH", "header", b, AETHLen); err != nil {
		return AETH{}, err
	}
	a := AETH{Syndrome: b[0], MSN: ib.Get24(b[1:4])}
	if a.Kind() == AckKindReserved {
		return AETH{}, ib.ErrField("AETH", "Syndrome", "reserved type in %#02x", a.Syndrome)
	}
	return a, nil
}

// PadCount is the number of pad octets that round a payload up to 4.
func PadCount(payloadLen int) uint8 { return uint8((4 - payloadLen%4) % 4) }

// Packet is a parsed IB transport packet; Payload aliases the input.
type Packet struct {
	BTH     BTH
	DETH    DETH
	AETH    AETH
	Payload []byte
}

// ParsePacket parses the UDP payload of a RoCEv2 packet into p without
// allocating. It checks the header set of the opcode and the pad; the ICRC
// is checked separately because it covers the IP header too.
func ParsePacket(b []byte, p *Packet) error {
	bth, err := DecodeBTH(b)
	if err != nil {
		return err
	}
	hdrs := BTHLen + bth.Opcode.extLen()
	if err := ib.NeedLen("packet", "headers and ICRC", b, hdrs+ICRCLen); err != nil {
		return err
	}
	p.BTH = bth
	p.DETH, p.AETH = DETH{}, AETH{}
	switch bth.Opcode.extLen() {
	case DETHLen:
		p.DETH, _ = DecodeDETH(b[BTHLen:])
	case AETHLen:
		if p.AETH, err = DecodeAETH(b[BTHLen:]); err != nil {
			return err
		}
	}
	body := b[hdrs : len(b)-ICRCLen]
	if bth.Opcode == OpRCAck {
		if len(body) != 0 {
			return ib.ErrField("packet", "payload", "an ACK carries %d octets", len(body))
		}
	} else if len(body)%4 != 0 {
		return ib.ErrField("packet", "payload", "payload and pad of %d octets is not a multiple of 4", len(body))
	}
	if int(bth.PadCnt) > len(body) {
		return ib.ErrField("BTH", "PadCnt", "%d pad octets in a %d-octet payload", bth.PadCnt, len(body))
	}
	p.Payload = body[:len(body)-int(bth.PadCnt)]
	return nil
}
