package neigh

import (
	"encoding/binary"
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
)

// ARPLen is the size of an IPv4 ARP packet over IPoIB.
const ARPLen = 56

// ARPSiblingLen is the trailer an ipoibd host on several ports appends:
// siblingTag, then its other port's 20-octet link address. A receiver
// that does not know it takes it for padding, as Linux's arp_rcv does
// with any octets past the ARP fields.
const ARPSiblingLen = 4 + ib.LinkAddrLen

// ARPMaxLen is the longest ARP packet Encode writes.
const ARPMaxLen = ARPLen + ARPSiblingLen

// siblingTag opens the sibling trailer: "IPD" and version 1.
var siblingTag = [4]byte{'I', 'P', 'D', 1}

// ARP opcodes.
const (
	ARPRequest uint16 = 1
	ARPReply   uint16 = 2
)

// Fixed ARP fields for IPv4 over IPoIB (spec §3).
const (
	ARPHardwareInfiniBand uint16 = 32 // ARPHRD_INFINIBAND
	arpProtocolIPv4       uint16 = 0x0800
	arpPLen                      = 4
)

// ARP is an IPv4 ARP request or reply between IPoIB hosts. TargetHW is
// zero in requests. The flags octet of SenderHW tells whether the sender
// accepts connected mode (RFC 4755).
type ARP struct {
	Op       uint16 // ARPRequest or ARPReply
	SenderHW ib.LinkAddr
	SenderIP netip.Addr
	TargetHW ib.LinkAddr
	TargetIP netip.Addr
	// Sibling, when HasSibling, is the link address of the sender's
	// other port (an interface over two ports: the one on standby), in
	// the trailer after the ARP fields (ARPSiblingLen).
	Sibling    ib.LinkAddr
	HasSibling bool
}

// Len is the length Encode writes for a.
func (a *ARP) Len() int {
	if a.HasSibling {
		return ARPMaxLen
	}
	return ARPLen
}

const arpFormat = "ARP"

// Encode writes a into b[:a.Len()]. On error b is left untouched.
func (a *ARP) Encode(b []byte) error {
	if err := ib.NeedLen(arpFormat, "buffer", b, a.Len()); err != nil {
		return err
	}
	if a.Op != ARPRequest && a.Op != ARPReply {
		return ib.ErrField(arpFormat, "opcode", "%d is neither request (1) nor reply (2)", a.Op)
	}
	if !a.SenderHW.QPN.Valid() {
		return ib.ErrField(arpFormat, "sender hardware address", "QPN %#x exceeds 24 bits", uint32(a.SenderHW.QPN))
	}
	if !a.TargetHW.QPN.Valid() {
		return ib.ErrField(arpFormat, "target hardware address", "QPN %#x exceeds 24 bits", uint32(a.TargetHW.QPN))
	}
	if !a.SenderIP.Is4() {
		return ib.ErrField(arpFormat, "sender protocol address", "%v is not IPv4", a.SenderIP)
	}
	if !a.TargetIP.Is4() {
		return ib.ErrField(arpFormat, "target protocol address", "%v is not IPv4", a.TargetIP)
	}
	if a.HasSibling && !a.Sibling.QPN.Valid() {
		return ib.ErrField(arpFormat, "sibling link address", "QPN %#x exceeds 24 bits", uint32(a.Sibling.QPN))
	}
	if a.HasSibling {
		copy(b[ARPLen:], siblingTag[:])
		_ = a.Sibling.Encode(b[ARPLen+4 : ARPMaxLen])
	}
	b = b[:ARPLen]
	binary.BigEndian.PutUint16(b[0:2], ARPHardwareInfiniBand)
	binary.BigEndian.PutUint16(b[2:4], arpProtocolIPv4)
	b[4] = ib.LinkAddrLen
	b[5] = arpPLen
	binary.BigEndian.PutUint16(b[6:8], a.Op)
	_ = a.SenderHW.Encode(b[8:28]) // cannot fail: length and QPN checked
	s := a.SenderIP.As4()
	copy(b[28:32], s[:])
	_ = a.TargetHW.Encode(b[32:52])
	t := a.TargetIP.As4()
	copy(b[52:56], t[:])
	return nil
}

// DecodeARP reads an IPv4-over-IPoIB ARP packet from b. Octets after the
// first ARPLen are ignored (a receive may carry padding) unless they are
// a sibling trailer (ARPSiblingLen). The fixed header
// is checked before the length, so that an ARP for another hardware or
// protocol is reported as such rather than as truncated.
func DecodeARP(b []byte) (ARP, error) {
	if len(b) < 8 {
		return ARP{}, arpTruncated(b)
	}
	if v := binary.BigEndian.Uint16(b[0:2]); v != ARPHardwareInfiniBand {
		return ARP{}, ib.ErrField(arpFormat, "hardware type", "%d, want %d (InfiniBand)", v, ARPHardwareInfiniBand)
	}
	if v := binary.BigEndian.Uint16(b[2:4]); v != arpProtocolIPv4 {
		return ARP{}, ib.ErrField(arpFormat, "protocol type", "%#04x, want 0x0800 (IPv4)", v)
	}
	if b[4] != ib.LinkAddrLen {
		return ARP{}, ib.ErrField(arpFormat, "hardware address length", "%d, want %d", b[4], ib.LinkAddrLen)
	}
	if b[5] != arpPLen {
		return ARP{}, ib.ErrField(arpFormat, "protocol address length", "%d, want %d", b[5], arpPLen)
	}
	op := binary.BigEndian.Uint16(b[6:8])
	if op != ARPRequest && op != ARPReply {
		return ARP{}, ib.ErrField(arpFormat, "opcode", "%d is neither request (1) nor reply (2)", op)
	}
	if len(b) < ARPLen {
		return ARP{}, arpTruncated(b)
	}
	// DecodeLinkAddr cannot fail on 20 octets.
	sha, _ := ib.DecodeLinkAddr(b[8:28])
	tha, _ := ib.DecodeLinkAddr(b[32:52])
	a := ARP{
		Op:       op,
		SenderHW: sha,
		SenderIP: netip.AddrFrom4([4]byte(b[28:32])),
		TargetHW: tha,
		TargetIP: netip.AddrFrom4([4]byte(b[52:56])),
	}
	if len(b) >= ARPMaxLen && [4]byte(b[ARPLen:ARPLen+4]) == siblingTag {
		a.Sibling, _ = ib.DecodeLinkAddr(b[ARPLen+4 : ARPMaxLen])
		a.HasSibling = true
	}
	return a, nil
}

// arpFields are the ARP fields by end offset, to name the one a short
// packet cuts.
var arpFields = [...]struct {
	end  int
	name string
}{
	{2, "hardware type"},
	{4, "protocol type"},
	{5, "hardware address length"},
	{6, "protocol address length"},
	{8, "opcode"},
	{28, "sender hardware address"},
	{32, "sender protocol address"},
	{52, "target hardware address"},
	{ARPLen, "target protocol address"},
}

func arpTruncated(b []byte) error {
	for _, f := range arpFields {
		if len(b) < f.end {
			return ib.NeedLen(arpFormat, f.name, b, ARPLen)
		}
	}
	return nil
}
