package ib

import (
	"fmt"
	"hash/fnv"
	"net/netip"
)

// GID is a 128-bit InfiniBand global identifier. On RoCEv2 (and on softib) it
// is the port's IPv6 address, or the IPv4-mapped IPv6 address for IPv4.
type GID [16]byte

// ParseGID parses a GID written in IPv6 notation ("fe80::2:c903:a:bcde",
// "::ffff:192.0.2.1").
func ParseGID(s string) (GID, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() || a.Zone() != "" {
		return GID{}, fmt.Errorf("GID %q: not an IPv6-notation address", s)
	}
	return GID(a.As16()), nil
}

// GIDFromAddr returns the GID for an underlay address: IPv6 as is, IPv4 as
// the IPv4-mapped IPv6 address.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the GID as an IP address, unmapping IPv4-mapped GIDs.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsMulticast reports whether g is a multicast GID (first octet 0xFF).
func (g GID) IsMulticast() bool { return g[0] == 0xff }

// IsIPv4Mapped reports whether g has the ::ffff:a.b.c.d form RoCEv2 uses
// for IPv4 underlays.
func (g GID) IsIPv4Mapped() bool { return netip.AddrFrom16(g).Is4In6() }

// String formats g in IPv6 notation, IPv4-mapped GIDs as ::ffff:a.b.c.d.
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// IPv4Group maps a multicast GID to the IPv4-mapped GID of an IPv4 group in
// 239.0.0.0/8 (administratively scoped), for fabrics that carry IB over
// IPv4: RoCEv2 with an IPv4 GID, and softib on an IPv4 underlay. Those
// cannot send to an ff12:... MGID, so every member maps it the same way: an
// FNV-1a hash of the MGID. A collision only delivers a datagram to a group
// member that filters it out above.
func IPv4Group(mgid GID) GID {
	h := fnv.New32a()
	h.Write(mgid[:])
	v := h.Sum32()
	return GIDFromAddr(netip.AddrFrom4([4]byte{239, byte(v >> 16), byte(v >> 8), byte(v)}))
}
