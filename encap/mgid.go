package encap

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
)

// Scope is the 4-bit scope of an IPoIB MGID (GID octet 1, low nibble).
type Scope uint8

// Scopes of RFC 4391. Linux takes the scope from the interface's broadcast
// address and uses it for every group of the interface, whatever the scope
// of the IPv6 group itself.
const (
	LinkLocal Scope = 0x2
	SiteLocal Scope = 0x5
	OrgLocal  Scope = 0x8
	Global    Scope = 0xE
)

// Valid reports whether s fits in the 4-bit field.
func (s Scope) Valid() bool { return s <= 0xf }

func (s Scope) String() string {
	switch s {
	case LinkLocal:
		return "link-local"
	case SiteLocal:
		return "site-local"
	case OrgLocal:
		return "organization-local"
	case Global:
		return "global"
	}
	return fmt.Sprintf("scope(%#x)", uint8(s))
}

// MGID signatures (GID octets 2-3).
const (
	SignatureIPv4 uint16 = 0x401B
	SignatureIPv6 uint16 = 0x601B
)

// mgidPrefix builds FF1S:sig:PKEY and zero octets 6-15. IPoIB always puts
// the full-member P_Key in an MGID (Linux sets 0x8000 in ipoib_ndo_init),
// so a limited member joins the same group as the full members.
func mgidPrefix(sig uint16, pkey ib.PKey, scope Scope) ib.GID {
	var g ib.GID
	g[0] = 0xff
	g[1] = 0x10 | byte(scope&0xf) // flags 0x1: transient group
	binary.BigEndian.PutUint16(g[2:4], sig)
	binary.BigEndian.PutUint16(g[4:6], uint16(pkey.AsFull()))
	return g
}

// BroadcastMGID returns the IPv4 broadcast group of a partition,
// FF1S:401B:PPPP::FFFF:FFFF. Every node of the IPoIB link joins it; ARP and
// both IPv4 broadcasts (255.255.255.255 and the subnet-directed broadcast,
// which only the caller can recognise) go to it. Only the low nibble of
// scope is used.
func BroadcastMGID(pkey ib.PKey, scope Scope) ib.GID {
	g := mgidPrefix(SignatureIPv4, pkey, scope)
	g[12], g[13], g[14], g[15] = 0xff, 0xff, 0xff, 0xff
	return g
}

// BroadcastLinkAddr is the link address of the broadcast group, the
// interface's "broadcast address" in Linux terms.
func BroadcastLinkAddr(pkey ib.PKey, scope Scope) ib.LinkAddr {
	return ib.MulticastLinkAddr(BroadcastMGID(pkey, scope))
}

const mgidFormat = "MGID"

// IPv4MulticastMGID maps an IPv4 multicast group (224.0.0.0/4) to its MGID:
// the low 28 bits of the group in octets 12-15, as Linux ip_ib_mc_map does.
// 255.255.255.255 is not multicast here: use BroadcastMGID (or
// MulticastMGID) for it, because masking it would give a different group.
func IPv4MulticastMGID(group netip.Addr, pkey ib.PKey, scope Scope) (ib.GID, error) {
	if !group.Is4() || !group.IsMulticast() {
		return ib.GID{}, ib.ErrField(mgidFormat, "group", "%v is not an IPv4 multicast address", group)
	}
	g := mgidPrefix(SignatureIPv4, pkey, scope)
	a := group.As4()
	g[12] = a[0] & 0x0f
	g[13], g[14], g[15] = a[1], a[2], a[3]
	return g, nil
}

// IPv6MulticastMGID maps an IPv6 multicast group (ff00::/8) to its MGID:
// the low 80 bits of the group in octets 6-15, as Linux ipv6_ib_mc_map does.
// The group's own scope nibble is dropped; scope is the interface's.
func IPv6MulticastMGID(group netip.Addr, pkey ib.PKey, scope Scope) (ib.GID, error) {
	if !group.Is6() || group.Is4In6() || !group.IsMulticast() {
		return ib.GID{}, ib.ErrField(mgidFormat, "group", "%v is not an IPv6 multicast address", group)
	}
	g := mgidPrefix(SignatureIPv6, pkey, scope)
	a := group.As16()
	copy(g[6:16], a[6:16])
	return g, nil
}

// limitedBroadcast is 255.255.255.255.
var limitedBroadcast = netip.AddrFrom4([4]byte{0xff, 0xff, 0xff, 0xff})

// MulticastMGID returns the MGID a packet to group goes to: the broadcast
// group for 255.255.255.255, otherwise the IPv4 or IPv6 multicast MGID.
// A subnet-directed broadcast cannot be told from a unicast address without
// the subnet; its sender calls BroadcastMGID.
func MulticastMGID(group netip.Addr, pkey ib.PKey, scope Scope) (ib.GID, error) {
	switch {
	case group == limitedBroadcast:
		return BroadcastMGID(pkey, scope), nil
	case group.Is4():
		return IPv4MulticastMGID(group, pkey, scope)
	default:
		return IPv6MulticastMGID(group, pkey, scope)
	}
}
