package wire

import (
	"fmt"

	"github.com/ipoibd/ipoibd/ib"
)

// Opcode is the BTH opcode: transport in bits 7-5, operation in bits 4-0.
type Opcode uint8

// The SEND family of the three transports and the RC acknowledgement: the
// opcodes softib sends and accepts (Valid).
const (
	OpRCSendFirst   Opcode = 0x00
	OpRCSendMiddle  Opcode = 0x01
	OpRCSendLast    Opcode = 0x02
	OpRCSendLastImm Opcode = 0x03
	OpRCSendOnly    Opcode = 0x04
	OpRCSendOnlyImm Opcode = 0x05
	OpRCAck         Opcode = 0x11

	OpUCSendFirst   Opcode = 0x20
	OpUCSendMiddle  Opcode = 0x21
	OpUCSendLast    Opcode = 0x22
	OpUCSendLastImm Opcode = 0x23
	OpUCSendOnly    Opcode = 0x24
	OpUCSendOnlyImm Opcode = 0x25

	OpUDSendOnly    Opcode = 0x64
	OpUDSendOnlyImm Opcode = 0x65
)

// Opcodes softib describes but does not accept: they name packets in
// captures and test vectors (the spec's first ICRC vector is an RDMA WRITE).
const (
	OpRCRDMAWriteFirst     Opcode = 0x06
	OpRCRDMAWriteMiddle    Opcode = 0x07
	OpRCRDMAWriteLast      Opcode = 0x08
	OpRCRDMAWriteLastImm   Opcode = 0x09
	OpRCRDMAWriteOnly      Opcode = 0x0a
	OpRCRDMAWriteOnlyImm   Opcode = 0x0b
	OpRCRDMAReadRequest    Opcode = 0x0c
	OpRCRDMAReadRespFirst  Opcode = 0x0d
	OpRCRDMAReadRespMiddle Opcode = 0x0e
	OpRCRDMAReadRespLast   Opcode = 0x0f
	OpRCRDMAReadRespOnly   Opcode = 0x10
	OpRCAtomicAck          Opcode = 0x12
	OpRCCompareSwap        Opcode = 0x13
	OpRCFetchAdd           Opcode = 0x14
	OpRCSendLastInv        Opcode = 0x16
	OpRCSendOnlyInv        Opcode = 0x17
)

// Position is where a packet sits in its message.
type Position uint8

// Packet positions.
const (
	PosNone Position = iota // not part of a segmented message (ACK, READ request, atomics)
	PosFirst
	PosMiddle
	PosLast
	PosOnly
)

var positionNames = [...]string{PosNone: "None", PosFirst: "First", PosMiddle: "Middle", PosLast: "Last", PosOnly: "Only"}

func (p Position) String() string {
	if int(p) < len(positionNames) {
		return positionNames[p]
	}
	return fmt.Sprintf("Position(%d)", uint8(p))
}

// ExtHeaders is the set of extension headers that follow the BTH.
type ExtHeaders uint8

// Extension headers, in the order they follow the BTH (IBA order: DETH,
// RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH).
const (
	HasDETH ExtHeaders = 1 << iota
	HasRETH
	HasAtomicETH
	HasAETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
)

// Extension header sizes (Linux ib_pack.h / rxe).
const (
	DETHLen         = 8
	RETHLen         = 16
	AtomicETHLen    = 28
	AETHLen         = 4
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
)

// Len returns the octets the headers of s occupy after the BTH.
func (s ExtHeaders) Len() int {
	n := 0
	if s&HasDETH != 0 {
		n += DETHLen
	}
	if s&HasRETH != 0 {
		n += RETHLen
	}
	if s&HasAtomicETH != 0 {
		n += AtomicETHLen
	}
	if s&HasAETH != 0 {
		n += AETHLen
	}
	if s&HasAtomicAckETH != 0 {
		n += AtomicAckETHLen
	}
	if s&HasImmDt != 0 {
		n += ImmDtLen
	}
	if s&HasIETH != 0 {
		n += IETHLen
	}
	return n
}

// opInfo describes one opcode. hdrLen is BTH plus extension headers, kept
// precomputed because the receive path asks for it on every packet.
type opInfo struct {
	name    string
	t       ib.QPType
	ext     ExtHeaders
	pos     Position
	payload bool
	valid   bool // softib sends and accepts it
	hdrLen  uint8
}

// opTable is indexed by the opcode byte so that every lookup is one load
// without a bounds check; unnamed entries are opcodes softib does not know.
var opTable = func() (t [256]opInfo) {
	type op = struct {
		o       Opcode
		name    string
		ext     ExtHeaders
		pos     Position
		payload bool
		valid   bool
	}
	send := func(base Opcode, tr string, valid bool) []op {
		return []op{
			{base + 0x00, tr + " SEND First", 0, PosFirst, true, valid},
			{base + 0x01, tr + " SEND Middle", 0, PosMiddle, true, valid},
			{base + 0x02, tr + " SEND Last", 0, PosLast, true, valid},
			{base + 0x03, tr + " SEND Last with Immediate", HasImmDt, PosLast, true, valid},
			{base + 0x04, tr + " SEND Only", 0, PosOnly, true, valid},
			{base + 0x05, tr + " SEND Only with Immediate", HasImmDt, PosOnly, true, valid},
			{base + 0x06, tr + " RDMA WRITE First", HasRETH, PosFirst, true, false},
			{base + 0x07, tr + " RDMA WRITE Middle", 0, PosMiddle, true, false},
			{base + 0x08, tr + " RDMA WRITE Last", 0, PosLast, true, false},
			{base + 0x09, tr + " RDMA WRITE Last with Immediate", HasImmDt, PosLast, true, false},
			{base + 0x0a, tr + " RDMA WRITE Only", HasRETH, PosOnly, true, false},
			{base + 0x0b, tr + " RDMA WRITE Only with Immediate", HasRETH | HasImmDt, PosOnly, true, false},
		}
	}
	ops := send(0x00, "RC", true)
	ops = append(ops, send(0x20, "UC", true)...) // UC: SEND and RDMA WRITE only
	ops = append(ops, []op{
		{OpRCRDMAReadRequest, "RC RDMA READ Request", HasRETH, PosNone, false, false},
		{OpRCRDMAReadRespFirst, "RC RDMA READ Response First", HasAETH, PosFirst, true, false},
		{OpRCRDMAReadRespMiddle, "RC RDMA READ Response Middle", 0, PosMiddle, true, false},
		{OpRCRDMAReadRespLast, "RC RDMA READ Response Last", HasAETH, PosLast, true, false},
		{OpRCRDMAReadRespOnly, "RC RDMA READ Response Only", HasAETH, PosOnly, true, false},
		{OpRCAck, "RC Acknowledge", HasAETH, PosNone, false, true},
		{OpRCAtomicAck, "RC Atomic Acknowledge", HasAETH | HasAtomicAckETH, PosNone, false, false},
		{OpRCCompareSwap, "RC CmpSwap", HasAtomicETH, PosNone, false, false},
		{OpRCFetchAdd, "RC FetchAdd", HasAtomicETH, PosNone, false, false},
		// With Invalidate: softib has no memory keys to invalidate, so it
		// cannot honour them and does not accept them.
		{OpRCSendLastInv, "RC SEND Last with Invalidate", HasIETH, PosLast, true, false},
		{OpRCSendOnlyInv, "RC SEND Only with Invalidate", HasIETH, PosOnly, true, false},
		{OpUDSendOnly, "UD SEND Only", HasDETH, PosOnly, true, true},
		{OpUDSendOnlyImm, "UD SEND Only with Immediate", HasDETH | HasImmDt, PosOnly, true, true},
	}...)
	for _, o := range ops {
		tr := ib.QPType(0)
		switch o.o >> 5 {
		case 0:
			tr = ib.RC
		case 1:
			tr = ib.UC
		case 3:
			tr = ib.UD
		}
		t[o.o] = opInfo{o.name, tr, o.ext, o.pos, o.payload, o.valid, uint8(BTHLen + o.ext.Len())}
	}
	return t
}()

// Valid reports whether softib understands the opcode: the SEND family of
// RC, UC and UD (with Immediate included, with Invalidate not) and the RC
// ACK. Decoders reject every other opcode.
func (o Opcode) Valid() bool { return opTable[o].valid }

// Known reports whether the opcode is one the table describes (a superset
// of Valid).
func (o Opcode) Known() bool { return opTable[o].name != "" }

// Transport returns the transport of a known opcode, 0 otherwise.
func (o Opcode) Transport() ib.QPType { return opTable[o].t }

// Headers returns the extension headers that follow the BTH.
func (o Opcode) Headers() ExtHeaders { return opTable[o].ext }

// HeaderLen returns the length of the BTH and its extension headers, 0 for
// an unknown opcode.
func (o Opcode) HeaderLen() int { return int(opTable[o].hdrLen) }

// Position returns the packet's place in its message.
func (o Opcode) Position() Position { return opTable[o].pos }

// HasPayload reports whether packets of this opcode carry payload (which
// may still be empty, e.g. a zero-length SEND Only).
func (o Opcode) HasPayload() bool { return opTable[o].payload }

func (o Opcode) String() string {
	if n := opTable[o].name; n != "" {
		return n
	}
	return fmt.Sprintf("Opcode(0x%02x)", uint8(o))
}

// errUnsupportedOpcode is the error of decoders and encoders for an opcode
// that is not Valid.
func errUnsupportedOpcode(op Opcode) error {
	if op.Known() {
		return ib.ErrField("BTH", "OpCode", "unsupported opcode 0x%02x (%v)", uint8(op), op)
	}
	return ib.ErrField("BTH", "OpCode", "unsupported opcode 0x%02x", uint8(op))
}
