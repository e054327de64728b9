// Package mtu handles the per-destination MTU of an ipoibd interface: the
// ICMP "fragmentation needed" / ICMPv6 "packet too big" errors written
// back into the TUN device when a packet is larger than its path allows
// (icmp.go; how the kernel's ipoib does it is in docs/ipoib-cm.md §7.4,
// and the data flow in docs/design.md), and the "host unreachable" errors
// for packets whose destination did not answer address resolution.
//
// Seams: mtu only builds packets, so the datapath may use it without
// netlink; package ipoib decides when a packet is too big and writes the
// error into the netdev, whose host routes (Dest; tun's Routes through
// netlink) carry each destination's MTU.
package mtu

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/ipoibd/ipoibd/inetsum"
)

// Largest ICMP errors TooBig writes: RFC 1812 §4.3.2.3 lets an IPv4 error
// be up to 576 octets, RFC 4443 §2.4(c) an ICMPv6 error up to the IPv6
// minimum MTU. A dst of MaxLen octets always suffices.
const (
	MaxLen4 = 576
	MaxLen6 = 1280
	MaxLen  = MaxLen6
)

// Reasons TooBig writes nothing although the input is well formed. Test
// with errors.Is.
var (
	// ErrFragment: an IPv4 packet without DF may be fragmented; the
	// caller must fragment it (or drop it), not answer with an ICMP error.
	ErrFragment = errors.New("mtu: IPv4 packet without DF: fragment it instead")
	// ErrNoError: the rules forbid an ICMP error for this packet (it is an
	// ICMP error itself, a non-first fragment, or it is addressed to or
	// from something that is not one host). Drop the packet silently.
	ErrNoError = errors.New("mtu: no ICMP error allowed for this packet")
	// ErrNotTooBig: the packet fits the given MTU.
	ErrNotTooBig = errors.New("mtu: packet fits the MTU")
)

// MalformedError reports the field of the input that is wrong.
type MalformedError struct {
	Field string // e.g. "ipv4 total length", "src", "mtu"
}

func (e *MalformedError) Error() string { return "mtu: bad " + e.Field }

// Preallocated so that the error paths allocate nothing either.
var (
	errShort     = &MalformedError{"packet length"}
	errVersion   = &MalformedError{"ip version"}
	errIHL       = &MalformedError{"ipv4 header length"}
	errTotLen    = &MalformedError{"ipv4 total length"}
	errHdrCsum   = &MalformedError{"ipv4 header checksum"}
	errICMPHdr   = &MalformedError{"icmp header"}
	errPayLen    = &MalformedError{"ipv6 payload length"}
	errExtHdr    = &MalformedError{"ipv6 extension header"}
	errMTU       = &MalformedError{"mtu"}
	errSrc       = &MalformedError{"src"}
	errDstBuffer = &MalformedError{"dst buffer length"}
)

const (
	protoICMP   = 1
	protoICMPv6 = 58
)

// TooBig writes into dst the ICMP error for the IP packet pkt (IPv4:
// Destination Unreachable, Fragmentation Needed, type 3 code 4, next-hop
// MTU = mtu; IPv6: Packet Too Big, type 2 code 0, MTU = mtu) and returns
// its length. The error quotes as much of pkt as the RFCs allow and dst
// holds (IPv4: the whole ICMP error at most MaxLen4 octets, RFC 1812
// §4.3.2.3; IPv6: at most MaxLen6, RFC 4443 §2.4(c)), and at least the IP
// header and 8 octets of payload; a dst of MaxLen octets always suffices.
// dst and pkt may overlap (TooBig may answer in place).
//
// src is the source address of the ICMP packet; the zero Addr means pkt's
// own destination address, which is what the daemon should use: it is as
// if the peer reported the problem. Tested against Linux 6.18 through a
// TUN device (kernel_test.go: 60000-octet DF datagrams, errors with MTU
// 2044..576 (IPv4) and 2044..1280 (IPv6)): the kernel takes the error,
// lowers the path MTU and fails the next DF send with EMSGSIZE when src is
// pkt's destination, another on-link address or an off-link address. It
// silently drops an IPv4 error whose source is one of the host's own
// addresses (a martian source) and, with strict rp_filter, one from an
// address not routed back via the TUN; pkt's destination passes both,
// since the packet just left through that link. IPv6 accepts the host's
// own address too. src must be a unicast address of pkt's family (or an
// IPv4-mapped IPv6 address for IPv4); the error goes to pkt's source.
//
// No error is written, and TooBig returns:
//   - ErrFragment for an IPv4 packet without DF (the caller fragments it);
//   - ErrNoError for an ICMP/ICMPv6 error message (or an ICMP type it
//     does not know), an IPv4 non-first fragment, an IPv4 packet to a
//     multicast or the limited broadcast address, or a packet whose
//     source is not a single host (unspecified, loopback, multicast, IPv4
//     class E or broadcast). A subnet-directed broadcast cannot be told
//     from the packet alone: the caller must not pass one. IPv6 packets to
//     multicast addresses DO get a Packet Too Big, as RFC 4443 §2.4(e.3)
//     requires for path MTU discovery of multicast (Linux does the same);
//     src must then be given, since a multicast address cannot be one;
//   - ErrNotTooBig if pkt is not larger than mtu;
//   - a *MalformedError naming the field for malformed input, an mtu out
//     of range (IPv4 68..65535, IPv6 1280..2³²−1), an unusable src or a
//     dst too short.
//
// TooBig never panics and does not allocate.
func TooBig(dst, pkt []byte, mtu int, src netip.Addr) (int, error) {
	if len(pkt) < 1 {
		return 0, errShort
	}
	switch pkt[0] >> 4 {
	case 4:
		return tooBig4(dst, pkt, mtu, src)
	case 6:
		return tooBig6(dst, pkt, mtu, src)
	}
	return 0, errVersion
}

func tooBig4(dst, pkt []byte, mtu int, src netip.Addr) (int, error) {
	h, err := check4(pkt)
	if err != nil {
		return 0, err
	}
	if h.frag&0x4000 == 0 {
		return 0, ErrFragment
	}
	if mtu < 68 || mtu > 65535 {
		return 0, errMTU
	}
	if h.total <= mtu {
		return 0, ErrNotTooBig
	}
	// Fragmentation Needed and DF set; next-hop MTU in the low 16 bits (RFC 1191).
	return write4(dst, pkt, &h, src, 3, 4, uint32(mtu))
}

// hdr4 is what an ICMP error needs of the IPv4 packet it answers.
type hdr4 struct {
	ihl, total       int
	frag             uint16
	tos              byte
	origSrc, origDst netip.Addr
}

// check4 validates the IPv4 packet pkt and applies the rules of RFC 1812
// §4.3.2.7 on which packets may get an ICMP error.
func check4(pkt []byte) (hdr4, error) {
	if len(pkt) < 20 {
		return hdr4{}, errShort
	}
	h := hdr4{ihl: int(pkt[0]&0x0f) * 4}
	if h.ihl < 20 || h.ihl > len(pkt) {
		return hdr4{}, errIHL
	}
	h.total = int(binary.BigEndian.Uint16(pkt[2:]))
	if h.total < h.ihl || h.total > len(pkt) {
		return hdr4{}, errTotLen
	}
	if inetsum.Checksum(0, pkt[:h.ihl]) != 0 {
		return hdr4{}, errHdrCsum
	}
	h.frag = binary.BigEndian.Uint16(pkt[6:])
	h.tos = pkt[1]
	h.origSrc = netip.AddrFrom4([4]byte(pkt[12:16]))
	h.origDst = netip.AddrFrom4([4]byte(pkt[16:20]))
	switch {
	case h.frag&0x1fff != 0: // only for the first fragment
		return hdr4{}, ErrNoError
	case h.origDst.IsMulticast() || h.origDst == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return hdr4{}, ErrNoError
	case !singleHost4(h.origSrc):
		return hdr4{}, ErrNoError
	case pkt[9] == protoICMP:
		if h.total < h.ihl+1 {
			return hdr4{}, errICMPHdr
		}
		if !icmpQuery(pkt[h.ihl]) {
			return hdr4{}, ErrNoError
		}
	}
	return h, nil
}

// write4 writes the ICMP error (typ, code, the 32 bits after the checksum)
// answering the checked packet pkt into dst; they may overlap.
func write4(dst, pkt []byte, h *hdr4, src netip.Addr, typ, code byte, rest uint32) (int, error) {
	if !src.IsValid() {
		src = h.origDst
	}
	src = src.Unmap()
	if !src.Is4() || !singleHost4(src) {
		return 0, errSrc
	}
	const hdr = 20 + 8
	quote := min(h.total, MaxLen4-hdr, len(dst)-hdr)
	if quote < min(h.total, h.ihl+8) {
		return 0, errDstBuffer
	}
	tos := h.tos&0x1c | 0xc0 // like Linux: TOS bits kept, precedence Internetwork Control
	// Everything read from pkt is in h now; pkt may be overwritten.
	copy(dst[hdr:hdr+quote], pkt[:quote])
	n := hdr + quote

	ip := dst[:20]
	ip[0] = 0x45
	ip[1] = tos
	binary.BigEndian.PutUint16(ip[2:], uint16(n))
	binary.BigEndian.PutUint32(ip[4:], 0x4000) // ID 0, DF: an atomic datagram (RFC 6864)
	ip[8] = 64
	ip[9] = protoICMP
	ip[10], ip[11] = 0, 0
	s, d := src.As4(), h.origSrc.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], inetsum.Checksum(0, ip))

	icmp := dst[20:n]
	icmp[0] = typ
	icmp[1] = code
	icmp[2], icmp[3] = 0, 0
	binary.BigEndian.PutUint32(icmp[4:], rest)
	binary.BigEndian.PutUint16(icmp[2:], inetsum.Checksum(0, icmp))
	return n, nil
}

func tooBig6(dst, pkt []byte, mtu int, src netip.Addr) (int, error) {
	total, err := check6(pkt)
	if err != nil {
		return 0, err
	}
	if mtu < 1280 || uint64(mtu) > 1<<32-1 {
		return 0, errMTU
	}
	if total <= mtu {
		return 0, ErrNotTooBig
	}
	return write6(dst, pkt, total, src, 2, 0, uint32(mtu)) // Packet Too Big
}

// check6 validates the IPv6 packet pkt, applies the rules of RFC 4443
// §2.4(e) on which packets may get an ICMPv6 error (multicast
// destinations are the caller's: only Packet Too Big may answer them) and
// returns its length.
func check6(pkt []byte) (int, error) {
	if len(pkt) < 40 {
		return 0, errShort
	}
	total := 40 + int(binary.BigEndian.Uint16(pkt[4:]))
	if total > len(pkt) || (total == 40 && len(pkt) > 40 && pkt[6] == 0) {
		// Payload length 0 with a hop-by-hop header is a jumbogram,
		// which a TUN with MTU <= 65535 cannot carry.
		return 0, errPayLen
	}
	origSrc := netip.AddrFrom16([16]byte(pkt[8:24]))
	if origSrc.IsUnspecified() || origSrc.IsLoopback() || origSrc.IsMulticast() || origSrc.Is4In6() {
		return 0, ErrNoError // RFC 4443 §2.4(e.6)
	}
	isErr, err := icmp6Error(pkt[:total])
	if err != nil {
		return 0, err
	}
	if isErr {
		return 0, ErrNoError
	}
	return total, nil
}

// write6 writes the ICMPv6 error (typ, code, the 32 bits after the
// checksum) answering the checked packet pkt[:total] into dst; they may
// overlap.
func write6(dst, pkt []byte, total int, src netip.Addr, typ, code byte, rest uint32) (int, error) {
	if !src.IsValid() {
		src = netip.AddrFrom16([16]byte(pkt[24:40]))
	}
	src = src.WithZone("")
	if !src.Is6() || src.Is4In6() || src.IsUnspecified() || src.IsMulticast() || src.IsLoopback() {
		return 0, errSrc
	}
	origSrc := netip.AddrFrom16([16]byte(pkt[8:24]))

	const hdr = 40 + 8
	quote := min(total, MaxLen6-hdr, len(dst)-hdr)
	if quote < min(total, 48) {
		return 0, errDstBuffer
	}
	copy(dst[hdr:hdr+quote], pkt[:quote])
	n := hdr + quote

	ip := dst[:40]
	binary.BigEndian.PutUint32(ip[0:], 6<<28) // traffic class 0, flow label 0
	binary.BigEndian.PutUint16(ip[4:], uint16(n-40))
	ip[6] = protoICMPv6
	ip[7] = 64
	s, d := src.As16(), origSrc.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])

	icmp := dst[40:n]
	icmp[0] = typ
	icmp[1] = code
	icmp[2], icmp[3] = 0, 0
	binary.BigEndian.PutUint32(icmp[4:], rest)
	// Pseudo-header (RFC 8200 §8.1): addresses, upper-layer length, next header.
	sum := inetsum.Add(0, ip[8:40]) + uint64(len(icmp)) + protoICMPv6
	binary.BigEndian.PutUint16(icmp[2:], inetsum.Checksum(sum, icmp))
	return n, nil
}

// Unreachable writes into dst the ICMP error telling pkt's sender that
// pkt's destination did not answer address resolution, as Linux does when
// ARP or ND fails (IPv4: Destination Unreachable, Host Unreachable, type 3
// code 1; IPv6: Destination Unreachable, Address Unreachable, type 1
// code 3, RFC 4443 §3.1), and returns its length. A TCP connect() that
// gets it fails with EHOSTUNREACH. Quoting, src, dst and the rules on which
// packets get no error (ErrNoError) are TooBig's, except that an IPv6
// packet to a multicast address gets none (RFC 4443 §2.4(e.3)) and DF
// does not matter. Unreachable never panics and does not allocate.
func Unreachable(dst, pkt []byte, src netip.Addr) (int, error) {
	if len(pkt) < 1 {
		return 0, errShort
	}
	switch pkt[0] >> 4 {
	case 4:
		h, err := check4(pkt)
		if err != nil {
			return 0, err
		}
		return write4(dst, pkt, &h, src, 3, 1, 0)
	case 6:
		total, err := check6(pkt)
		if err != nil {
			return 0, err
		}
		if pkt[24] == 0xff {
			return 0, ErrNoError
		}
		return write6(dst, pkt, total, src, 1, 3, 0)
	}
	return 0, errVersion
}

// icmp6Error walks the extension headers of the IPv6 packet p and reports
// whether it carries an ICMPv6 error message (types 0-127, RFC 4443 §2.1).
// An ESP payload or a non-first fragment cannot be looked into and counts
// as not an error.
func icmp6Error(p []byte) (bool, error) {
	next, off := p[6], 40
	for {
		switch next {
		case protoICMPv6:
			if off >= len(p) {
				return false, errICMPHdr
			}
			return p[off] < 128, nil
		case 0, 43, 60, 135, 139, 140: // hop-by-hop, routing, destination options, mobility, HIP, shim6
			if off+8 > len(p) {
				return false, errExtHdr
			}
			next, off = p[off], off+8+int(p[off+1])*8
		case 44: // fragment
			if off+8 > len(p) {
				return false, errExtHdr
			}
			if binary.BigEndian.Uint16(p[off+2:])&0xfff8 != 0 {
				return false, nil
			}
			next, off = p[off], off+8
		case 51: // AH: length in 4-octet units, minus 2
			if off+8 > len(p) {
				return false, errExtHdr
			}
			next, off = p[off], off+(int(p[off+1])+2)*4
		default: // upper layer, ESP or no next header
			return false, nil
		}
		if off > len(p) {
			return false, errExtHdr
		}
	}
}

// icmpQuery reports whether an ICMP (v4) type is a known query or reply,
// about which an error may be sent (RFC 1812 §4.3.2.7). Errors and types
// we do not know get none.
func icmpQuery(t byte) bool {
	switch t {
	case 0, 8, 9, 10, 13, 14, 15, 16, 17, 18, 42, 43:
		return true
	}
	return false
}

// singleHost4 reports whether a is an address of one host: not zero,
// loopback, multicast, class E or broadcast (RFC 1812 §4.3.2.7).
func singleHost4(a netip.Addr) bool {
	b := a.As4()
	return b[0] != 0 && b[0] != 127 && b[0] < 224
}
