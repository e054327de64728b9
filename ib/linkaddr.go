package ib

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strings"
)

// LinkAddrLen is the size of an IPoIB link-layer address.
const LinkAddrLen = 20

// LinkFlags is the first octet of an IPoIB link address: the connected-mode
// capabilities of RFC 4755.
type LinkFlags uint8

const (
	// FlagRC says the node accepts RC connections.
	FlagRC LinkFlags = 0x80
	// FlagUC says the node accepts UC connections.
	FlagUC LinkFlags = 0x40
	// knownFlags are the defined bits; the rest are reserved.
	knownFlags = FlagRC | FlagUC
)

func (f LinkFlags) String() string {
	var modes []string
	if f&FlagRC != 0 {
		modes = append(modes, "RC")
	}
	if f&FlagUC != 0 {
		modes = append(modes, "UC")
	}
	if len(modes) == 0 {
		return "UD"
	}
	return strings.Join(modes, "+")
}

// LinkAddr is the 20-octet IPoIB hardware address: flags, the node's UD QPN
// and its port GID.
type LinkAddr struct {
	Flags LinkFlags
	QPN   QPN
	GID   GID
}

// MulticastLinkAddr is the link address of a multicast group.
func MulticastLinkAddr(mgid GID) LinkAddr { return LinkAddr{QPN: MulticastQPN, GID: mgid} }

// Encode writes a into b[0:20]. Reserved flag bits are sent as zero.
func (a LinkAddr) Encode(b []byte) error {
	if err := NeedLen("link address", "buffer", b, LinkAddrLen); err != nil {
		return err
	}
	if !a.QPN.Valid() {
		return ErrField("link address", "QPN", "%#x does not fit in 24 bits", uint32(a.QPN))
	}
	b[0] = byte(a.Flags & knownFlags)
	Put24(b[1:4], uint32(a.QPN))
	copy(b[4:20], a.GID[:])
	return nil
}

// Bytes returns the 20-octet wire form of a.
func (a LinkAddr) Bytes() [LinkAddrLen]byte {
	var b [LinkAddrLen]byte
	a.Flags &= knownFlags
	a.QPN &= QPNMask
	_ = a.Encode(b[:])
	return b
}

// DecodeLinkAddr reads a link address from b[0:20]. Reserved flag bits are
// ignored.
func DecodeLinkAddr(b []byte) (LinkAddr, error) {
	if err := NeedLen("link address", "address", b, LinkAddrLen); err != nil {
		return LinkAddr{}, err
	}
	return LinkAddr{
		Flags: LinkFlags(b[0]) & knownFlags,
		QPN:   QPN(Get24(b[1:4])),
		GID:   GID(b[4:20]),
	}, nil
}

// IsMulticast reports whether a names a multicast group.
func (a LinkAddr) IsMulticast() bool { return a.GID.IsMulticast() }

// String prints a the way Linux prints an IPoIB hardware address: 20 octets
// in colon-separated hex.
func (a LinkAddr) String() string {
	b := a.Bytes()
	var s strings.Builder
	s.Grow(3*LinkAddrLen - 1)
	for i, o := range b {
		if i > 0 {
			s.WriteByte(':')
		}
		s.WriteString(hex.EncodeToString([]byte{o}))
	}
	return s.String()
}

// ParseLinkAddr parses the colon-hex form String prints.
func ParseLinkAddr(s string) (LinkAddr, error) {
	parts := strings.Split(s, ":")
	if len(parts) != LinkAddrLen {
		return LinkAddr{}, fmt.Errorf("link address %q: want %d colon-separated octets, have %d", s, LinkAddrLen, len(parts))
	}
	var b [LinkAddrLen]byte
	for i, p := range parts {
		if len(p) != 2 {
			return LinkAddr{}, fmt.Errorf("link address %q: octet %d %q is not two hex digits", s, i, p)
		}
		if _, err := hex.Decode(b[i:i+1], []byte(p)); err != nil {
			return LinkAddr{}, fmt.Errorf("link address %q: octet %d %q is not two hex digits", s, i, p)
		}
	}
	return DecodeLinkAddr(b[:])
}

// CompareIgnoringFlags orders two link addresses as RFC 4755 does for
// crossing REQs: octet by octet, most significant first, with the flags octet
// taken as zero. It returns -1, 0 or +1.
func CompareIgnoringFlags(a, b LinkAddr) int {
	a.Flags, b.Flags = 0, 0
	ab, bb := a.Bytes(), b.Bytes()
	return bytes.Compare(ab[:], bb[:])
}

// SameNode reports whether a and b name the same UD endpoint, whatever
// flags they advertise.
func (a LinkAddr) SameNode(b LinkAddr) bool { return CompareIgnoringFlags(a, b) == 0 }
