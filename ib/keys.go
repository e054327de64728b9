package ib

import (
	"fmt"
	"strconv"
)

// QPN is a 24-bit queue pair number.
type QPN uint32

const (
	// QPNMask keeps the 24 bits a QPN has on the wire.
	QPNMask QPN = 0xffffff
	// QP0 is the subnet management QP (absent on RoCE).
	QP0 QPN = 0
	// QP1 is the general services (GSI) QP that carries CM MADs.
	QP1 QPN = 1
	// MulticastQPN is the destination QPN of every multicast packet.
	MulticastQPN QPN = 0xffffff
)

// Valid reports whether q fits in 24 bits.
func (q QPN) Valid() bool { return q&^QPNMask == 0 }

func (q QPN) String() string { return fmt.Sprintf("0x%06x", uint32(q)) }

// PKey is a 16-bit partition key; bit 15 is the membership bit (1 = full).
type PKey uint16

const (
	// PKeyFullMember is the membership bit of a P_Key.
	PKeyFullMember PKey = 0x8000
	// DefaultPKey is the default partition with full membership.
	DefaultPKey PKey = 0xffff
)

// Partition returns the 15-bit partition number.
func (p PKey) Partition() uint16 { return uint16(p &^ PKeyFullMember) }

// IsFull reports whether p carries full membership.
func (p PKey) IsFull() bool { return p&PKeyFullMember != 0 }

// AsFull returns p with the full-membership bit set, as IPoIB uses it for
// MGIDs and joins.
func (p PKey) AsFull() PKey { return p | PKeyFullMember }

// Valid reports whether p names a partition (its low 15 bits are not zero).
func (p PKey) Valid() bool { return p.Partition() != 0 }

// Accepts reports whether a packet carrying P_Key other may be received by a
// port holding p: same partition, and at least one of the two a full member.
func (p PKey) Accepts(other PKey) bool {
	return p.Valid() && p.Partition() == other.Partition() && (p.IsFull() || other.IsFull())
}

func (p PKey) String() string { return fmt.Sprintf("0x%04x", uint16(p)) }

// ParsePKey reads a P_Key as written by operators and every InfiniBand
// tool (OpenSM's partitions.conf, ibstat, sysfs): hexadecimal, with or
// without 0x (0x8001, 8001). It must name a partition.
func ParsePKey(s string) (PKey, error) {
	digits := s
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		digits = s[2:]
	}
	v, err := strconv.ParseUint(digits, 16, 16)
	if err != nil {
		return 0, ErrField("P_Key", "value", "%q is not a 16-bit hexadecimal number such as 0xffff or 8001", s)
	}
	if p := PKey(v); p.Valid() {
		return p, nil
	}
	return 0, ErrField("P_Key", "partition", "%q names no partition (its low 15 bits are zero)", s)
}

// QKey is a 32-bit queue key checked on datagram receives.
type QKey uint32

const (
	// GSIQKey is the well-known Q_Key of QP1.
	GSIQKey QKey = 0x80010000
	// DefaultIPoIBQKey is the Q_Key OpenSM gives the IPoIB broadcast group;
	// with no subnet manager, ipoibd uses it for every partition.
	DefaultIPoIBQKey QKey = 0x0b1b
	// controlledQKey marks a Q_Key only privileged consumers may send with.
	controlledQKey QKey = 0x80000000
)

// IsControlled reports whether q has the controlled (privileged) bit set.
func (q QKey) IsControlled() bool { return q&controlledQKey != 0 }

func (q QKey) String() string { return fmt.Sprintf("0x%08x", uint32(q)) }

// Put24 writes the low 24 bits of v big-endian into b[0:3].
func Put24(b []byte, v uint32) {
	_ = b[2]
	b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v)
}

// Get24 reads a big-endian 24-bit value from b[0:3].
func Get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}
