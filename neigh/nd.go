package neigh

import (
	"encoding/binary"
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
)

// ICMPv6 types of neighbor discovery that the codec handles (RFC 4861).
const (
	TypeNeighborSolicitation  uint8 = 135
	TypeNeighborAdvertisement uint8 = 136
)

// ND option types carrying a link-layer address.
const (
	OptSourceLinkAddr uint8 = 1
	OptTargetLinkAddr uint8 = 2
	// OptReplacedLinkAddr is ipoibd's own, in an unsolicited NA: the link
	// address the target had before its daemon restarted, as a gratuitous
	// ARP names it in its target hardware address. 253 is one of the two
	// types RFC 4727 sets aside for experiments; a receiver that does not
	// know it skips it (RFC 4861 §4.6), as Linux does.
	OptReplacedLinkAddr uint8 = 253
	// OptSiblingLinkAddr is ipoibd's own too, the other experimental type:
	// the link address of the sender's other port (an interface over two
	// ports), in an NS or an NA. A peer that knows it accepts a later
	// announcement that moves the address there at once (failover).
	OptSiblingLinkAddr uint8 = 254
)

const (
	// NDHeaderLen is the fixed part of an NS or NA: type, code, checksum,
	// flags/reserved and the target address.
	NDHeaderLen = 24
	// LinkAddrOptLen is the IPoIB link-layer address option: type, length
	// 3 (×8 octets), two pad octets, then the 20-octet address (spec §4).
	LinkAddrOptLen = 24
	// NDMaxLen is the longest message Encode writes: the link-layer
	// option and both of ours (replaced and sibling: a failover's NA).
	NDMaxLen = NDHeaderLen + 3*LinkAddrOptLen
	// IPv6HeaderLen is the fixed IPv6 header in front of the message.
	IPv6HeaderLen = 40
	// NDHopLimit is the only hop limit RFC 4861 accepts on ND packets: it
	// proves the packet was not forwarded by a router.
	NDHopLimit = 255
)

// NA flags (octet 4).
const (
	naRouter    = 0x80
	naSolicited = 0x40
	naOverride  = 0x20
)

// linkAddrOptUnits is the option length field of the IPoIB option.
const linkAddrOptUnits = LinkAddrOptLen / 8

// NeighborMessage is a neighbor solicitation or advertisement. In an NS,
// LinkAddr is the source link-layer address option; in an NA it is the
// target link-layer address option. HasLinkAddr says whether the option is
// (to be) present.
type NeighborMessage struct {
	Type                        uint8 // TypeNeighborSolicitation or TypeNeighborAdvertisement
	Router, Solicited, Override bool  // NA flags; false in an NS
	Target                      netip.Addr
	LinkAddr                    ib.LinkAddr
	HasLinkAddr                 bool
	// Replaces, in an NA, is the link address the target's interface
	// had before (OptReplacedLinkAddr); HasReplaces says it is present.
	Replaces    ib.LinkAddr
	HasReplaces bool
	// Sibling is the link address of the sender's other port
	// (OptSiblingLinkAddr); HasSibling says it is present.
	Sibling    ib.LinkAddr
	HasSibling bool
}

const (
	ndFormat   = "ICMPv6 ND"
	ipv6Format = "IPv6"
)

// Len returns the size of the ICMPv6 message Encode writes for m.
func (m *NeighborMessage) Len() int {
	n := NDHeaderLen
	if m.HasLinkAddr {
		n += LinkAddrOptLen
	}
	if m.HasReplaces {
		n += LinkAddrOptLen
	}
	if m.HasSibling {
		n += LinkAddrOptLen
	}
	return n
}

// optType is the link-layer option that belongs in m's type of message.
func (m *NeighborMessage) optType() uint8 {
	if m.Type == TypeNeighborSolicitation {
		return OptSourceLinkAddr
	}
	return OptTargetLinkAddr
}

// Encode writes m as an ICMPv6 message sent from src to dst into b, with
// its checksum, and returns the length written (m.Len()). It refuses what
// DecodeNeighborMessage would drop. On error b is left untouched.
func (m *NeighborMessage) Encode(b []byte, src, dst netip.Addr) (int, error) {
	if m.Type != TypeNeighborSolicitation && m.Type != TypeNeighborAdvertisement {
		return 0, ib.ErrField(ndFormat, "type", "%d is neither NS (135) nor NA (136)", m.Type)
	}
	if m.Type == TypeNeighborSolicitation && (m.Router || m.Solicited || m.Override) {
		return 0, ib.ErrField(ndFormat, "flags", "R, S and O are NA flags; an NS has none")
	}
	if !m.Target.Is6() {
		return 0, ib.ErrField(ndFormat, "target", "%v is not IPv6", m.Target)
	}
	if m.HasLinkAddr && !m.LinkAddr.QPN.Valid() {
		return 0, ib.ErrField(ndFormat, "link-layer address option", "QPN %#x exceeds 24 bits", uint32(m.LinkAddr.QPN))
	}
	if m.HasReplaces && (m.Type != TypeNeighborAdvertisement || !m.Replaces.QPN.Valid()) {
		return 0, ib.ErrField(ndFormat, "replaced link-layer address option", "only in an NA, with a QPN of 24 bits")
	}
	if m.HasSibling && !m.Sibling.QPN.Valid() {
		return 0, ib.ErrField(ndFormat, "sibling link-layer address option", "QPN %#x exceeds 24 bits", uint32(m.Sibling.QPN))
	}
	if err := m.check(src, dst); err != nil {
		return 0, err
	}
	n := m.Len()
	if err := ib.NeedLen(ndFormat, "buffer", b, n); err != nil {
		return 0, err
	}
	b = b[:n]
	b[0], b[1] = m.Type, 0
	b[2], b[3] = 0, 0
	var flags byte
	if m.Router {
		flags |= naRouter
	}
	if m.Solicited {
		flags |= naSolicited
	}
	if m.Override {
		flags |= naOverride
	}
	b[4], b[5], b[6], b[7] = flags, 0, 0, 0
	t := m.Target.As16()
	copy(b[8:24], t[:])
	o := b[NDHeaderLen:]
	if m.HasLinkAddr {
		o[0], o[1], o[2], o[3] = m.optType(), linkAddrOptUnits, 0, 0
		_ = m.LinkAddr.Encode(o[4:24]) // cannot fail: length and QPN checked
		o = o[LinkAddrOptLen:]
	}
	if m.HasReplaces {
		o[0], o[1], o[2], o[3] = OptReplacedLinkAddr, linkAddrOptUnits, 0, 0
		_ = m.Replaces.Encode(o[4:24])
		o = o[LinkAddrOptLen:]
	}
	if m.HasSibling {
		o[0], o[1], o[2], o[3] = OptSiblingLinkAddr, linkAddrOptUnits, 0, 0
		_ = m.Sibling.Encode(o[4:24])
	}
	binary.BigEndian.PutUint16(b[2:4], ICMPv6Checksum(src, dst, b))
	return n, nil
}

// check applies the RFC 4861 §7.1 validity rules that involve the
// addresses; Linux ndisc_recv_ns/ndisc_recv_na drop what fails them.
func (m *NeighborMessage) check(src, dst netip.Addr) error {
	if !src.Is6() || src.IsMulticast() {
		return ib.ErrField(ndFormat, "source address", "%v is not an IPv6 unicast or unspecified address", src)
	}
	if !dst.Is6() {
		return ib.ErrField(ndFormat, "destination address", "%v is not IPv6", dst)
	}
	if m.Target.IsMulticast() {
		return ib.ErrField(ndFormat, "target", "%v is multicast", m.Target)
	}
	switch m.Type {
	case TypeNeighborSolicitation:
		// Duplicate address detection: the sender has no address yet.
		if src.IsUnspecified() {
			if !isSolicitedNode(dst) {
				return ib.ErrField(ndFormat, "destination address", "DAD solicitation to %v, not to a solicited-node group", dst)
			}
			if m.HasLinkAddr {
				return ib.ErrField(ndFormat, "link-layer address option", "DAD solicitation carries a source link-layer address")
			}
		}
	case TypeNeighborAdvertisement:
		if m.Solicited && dst.IsMulticast() {
			return ib.ErrField(ndFormat, "flags", "solicited advertisement sent to multicast %v", dst)
		}
	}
	return nil
}

// DecodeNeighborMessage reads an NS or NA from b, the whole ICMPv6 message
// (the IPv6 payload) received from src to dst. It verifies the checksum
// and the RFC 4861 rules a codec can check: code 0, at least 24 octets,
// options of non-zero length within the message, a non-multicast target,
// no S flag towards a multicast destination, DAD solicitations only to a
// solicited-node group and without a link-layer address. Like Linux, it
// skips unknown options and the link-layer option of the other direction,
// uses the first option of the right type only, ignores that option when
// its length is not 3 (24 octets), and does not look at its pad octets.
func DecodeNeighborMessage(b []byte, src, dst netip.Addr) (NeighborMessage, error) {
	if len(b) < 4 {
		return NeighborMessage{}, ib.ErrField(ndFormat, "length", "%d octets, need at least %d", len(b), NDHeaderLen)
	}
	typ := b[0]
	if typ != TypeNeighborSolicitation && typ != TypeNeighborAdvertisement {
		return NeighborMessage{}, ib.ErrField(ndFormat, "type", "%d is neither NS (135) nor NA (136)", typ)
	}
	if b[1] != 0 {
		return NeighborMessage{}, ib.ErrField(ndFormat, "code", "%d, want 0", b[1])
	}
	if len(b) < NDHeaderLen {
		return NeighborMessage{}, ib.ErrField(ndFormat, "length", "%d octets, need at least %d", len(b), NDHeaderLen)
	}
	if !src.Is6() {
		return NeighborMessage{}, ib.ErrField(ndFormat, "source address", "%v is not IPv6", src)
	}
	if !dst.Is6() {
		return NeighborMessage{}, ib.ErrField(ndFormat, "destination address", "%v is not IPv6", dst)
	}
	if !checksumOK(src, dst, b) {
		return NeighborMessage{}, ib.ErrField(ndFormat, "checksum", "%#04x, want %#04x",
			binary.BigEndian.Uint16(b[2:4]), ICMPv6Checksum(src, dst, b))
	}
	m := NeighborMessage{Type: typ, Target: netip.AddrFrom16([16]byte(b[8:24]))}
	if typ == TypeNeighborAdvertisement {
		// The other 29 bits are reserved: ignored on receive.
		m.Router = b[4]&naRouter != 0
		m.Solicited = b[4]&naSolicited != 0
		m.Override = b[4]&naOverride != 0
	}
	want, seen := m.optType(), false
	for o := b[NDHeaderLen:]; len(o) > 0; {
		if len(o) < 2 {
			return NeighborMessage{}, ib.ErrField(ndFormat, "option length", "a %d-octet option has no length", len(o))
		}
		n := int(o[1]) * 8
		if n == 0 {
			return NeighborMessage{}, ib.ErrField(ndFormat, "option length", "zero in option type %d", o[0])
		}
		if n > len(o) {
			return NeighborMessage{}, ib.ErrField(ndFormat, "option length", "option type %d of %d octets runs past the end (%d left)", o[0], n, len(o))
		}
		// Linux keeps the first of a kind and ignores it unless it is
		// exactly as long as the IPoIB option (ndisc_opt_addr_data).
		if o[0] == want && !seen {
			seen = true
			if n == LinkAddrOptLen {
				m.LinkAddr, _ = ib.DecodeLinkAddr(o[4:24])
				m.HasLinkAddr = true
			}
		}
		if o[0] == OptReplacedLinkAddr && typ == TypeNeighborAdvertisement && !m.HasReplaces && n == LinkAddrOptLen {
			m.Replaces, _ = ib.DecodeLinkAddr(o[4:24])
			m.HasReplaces = true
		}
		if o[0] == OptSiblingLinkAddr && !m.HasSibling && n == LinkAddrOptLen {
			m.Sibling, _ = ib.DecodeLinkAddr(o[4:24])
			m.HasSibling = true
		}
		o = o[n:]
	}
	if err := m.check(src, dst); err != nil {
		return NeighborMessage{}, err
	}
	return m, nil
}

// EncodeIPv6 writes m as a whole IPv6 packet into b: the 40-octet IPv6
// header (next header 58, hop limit 255, traffic class and flow label 0)
// followed by the ICMPv6 message. It returns the length written.
func (m *NeighborMessage) EncodeIPv6(b []byte, src, dst netip.Addr) (int, error) {
	if err := ib.NeedLen(ipv6Format, "buffer", b, IPv6HeaderLen+m.Len()); err != nil {
		return 0, err
	}
	n, err := m.Encode(b[IPv6HeaderLen:], src, dst)
	if err != nil {
		return 0, err
	}
	h := b[:IPv6HeaderLen]
	h[0], h[1], h[2], h[3] = 0x60, 0, 0, 0 // version 6
	binary.BigEndian.PutUint16(h[4:6], uint16(n))
	h[6], h[7] = protoICMPv6, NDHopLimit
	s, d := src.As16(), dst.As16()
	copy(h[8:24], s[:])
	copy(h[24:40], d[:])
	return IPv6HeaderLen + n, nil
}

// DecodeIPv6ND reads an IPv6 packet carrying an NS or NA, as received after
// the IPoIB header. The IPv6 header must have version 6, next header 58
// (no extension headers) and hop limit 255; octets past the payload length
// are ignored. The message is then decoded as by DecodeNeighborMessage.
func DecodeIPv6ND(b []byte) (src, dst netip.Addr, m NeighborMessage, err error) {
	if err := ib.NeedLen(ipv6Format, "header", b, IPv6HeaderLen); err != nil {
		return netip.Addr{}, netip.Addr{}, NeighborMessage{}, err
	}
	if v := b[0] >> 4; v != 6 {
		return netip.Addr{}, netip.Addr{}, NeighborMessage{}, ib.ErrField(ipv6Format, "version", "%d, want 6", v)
	}
	if b[6] != protoICMPv6 {
		return netip.Addr{}, netip.Addr{}, NeighborMessage{}, ib.ErrField(ipv6Format, "next header", "%d, want 58 (ICMPv6)", b[6])
	}
	if b[7] != NDHopLimit {
		return netip.Addr{}, netip.Addr{}, NeighborMessage{}, ib.ErrField(ipv6Format, "hop limit", "%d, want 255: ND packets must not be forwarded", b[7])
	}
	plen := int(binary.BigEndian.Uint16(b[4:6]))
	if IPv6HeaderLen+plen > len(b) {
		return netip.Addr{}, netip.Addr{}, NeighborMessage{}, ib.ErrField(ipv6Format, "payload length", "%d, but %d octets follow the header", plen, len(b)-IPv6HeaderLen)
	}
	src = netip.AddrFrom16([16]byte(b[8:24]))
	dst = netip.AddrFrom16([16]byte(b[24:40]))
	m, err = DecodeNeighborMessage(b[IPv6HeaderLen:IPv6HeaderLen+plen], src, dst)
	if err != nil {
		return netip.Addr{}, netip.Addr{}, NeighborMessage{}, err
	}
	return src, dst, m, nil
}

// SolicitedNode returns the solicited-node multicast group of an IPv6
// address, ff02::1:ffXX:XXXX with its low 24 bits (RFC 4291 §2.7.1). It
// returns the zero Addr for anything but IPv6.
func SolicitedNode(a netip.Addr) netip.Addr {
	if !a.Is6() {
		return netip.Addr{}
	}
	s := a.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 11: 0x01, 12: 0xff, 13: s[13], 14: s[14], 15: s[15]})
}

// isSolicitedNode reports whether a is in ff02::1:ff00:0/104.
func isSolicitedNode(a netip.Addr) bool {
	s := a.As16()
	return a.Is6() && s == [16]byte{0xff, 0x02, 11: 0x01, 12: 0xff, 13: s[13], 14: s[14], 15: s[15]}
}
