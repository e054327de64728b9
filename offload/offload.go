// Package offload is the packet work that a TUN device opened with
// IFF_VNET_HDR and TUNSETOFFLOAD (TUN_F_CSUM, TSO4/6, USO4/6) leaves to
// userspace: the virtio-net header in front of every packet (Hdr), the
// transport checksum the kernel did not finish (Complete), the cutting of
// a TSO/USO super-packet into wire-sized segments (Segments) and, the other
// way, the merging of in-order TCP segments into one super-packet (GRO,
// Coalescer).
//
// Why: with offloads the kernel hands over and takes up to 64 KiB per
// read or write instead of one MTU-sized packet, so the datapath makes a
// fraction of the TUN syscalls. The fabric and the peers still see only
// standard IP packets with valid checksums: every segment Split produces
// is complete, and Coalescer merges only segments whose checksums verify.
//
// Seams: it works on byte slices the caller owns (package ipoib's slots)
// and knows neither the TUN (package tun opens it with these offloads) nor
// the fabric. Nothing here allocates on the per-packet path; errors are
// *ib.FieldError naming the offending field. The facts (header layout,
// segmentation and merge rules) follow Linux's virtio_net.h, its software
// GSO and tcp_gro_receive.
package offload

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/inetsum"
)

// HdrLen is the length of struct virtio_net_hdr, the header a TUN with
// IFF_VNET_HDR puts in front of every packet (without
// VIRTIO_NET_F_MRG_RXBUF, so no num_buffers field).
const HdrLen = 10

// Hdr.Flags.
const (
	// FlagNeedsCsum: the transport checksum at CsumStart+CsumOffset holds
	// only the pseudo-header sum; the checksum over CsumStart to the end of
	// the packet is still to be folded in.
	FlagNeedsCsum = 1
	// FlagDataValid: the checksums were verified (receive side only).
	FlagDataValid = 2
)

// Hdr.GSOType.
const (
	GSONone  = 0
	GSOTCPv4 = 1
	GSOUDP   = 3 // UFO: IP fragmentation of UDP, which we never accept
	GSOTCPv6 = 4
	GSOUDPL4 = 5 // USO: UDP segmentation, a datagram per segment
	GSOECN   = 0x80
)

// Hdr is struct virtio_net_hdr. The tun driver writes and reads it in the
// host's byte order (we never set TUNSETVNETLE/BE).
type Hdr struct {
	Flags      uint8
	GSOType    uint8
	HdrLen     uint16 // headers' length; from the kernel a hint only
	GSOSize    uint16 // payload octets per segment
	CsumStart  uint16 // where the checksummed data starts
	CsumOffset uint16 // where, from CsumStart, the checksum field is
}

const hdrFormat = "virtio_net_hdr"

// Decode reads h from the first HdrLen octets of b.
func (h *Hdr) Decode(b []byte) error {
	if len(b) < HdrLen {
		return ib.NeedLen(hdrFormat, "header", b, HdrLen)
	}
	h.Flags = b[0]
	h.GSOType = b[1]
	h.HdrLen = binary.NativeEndian.Uint16(b[2:])
	h.GSOSize = binary.NativeEndian.Uint16(b[4:])
	h.CsumStart = binary.NativeEndian.Uint16(b[6:])
	h.CsumOffset = binary.NativeEndian.Uint16(b[8:])
	return nil
}

// Encode writes h into the first HdrLen octets of b, which must have them.
func (h Hdr) Encode(b []byte) {
	_ = b[HdrLen-1]
	b[0] = h.Flags
	b[1] = h.GSOType
	binary.NativeEndian.PutUint16(b[2:], h.HdrLen)
	binary.NativeEndian.PutUint16(b[4:], h.GSOSize)
	binary.NativeEndian.PutUint16(b[6:], h.CsumStart)
	binary.NativeEndian.PutUint16(b[8:], h.CsumOffset)
}

// Complete finishes, in place, the transport checksum of a packet read
// without GSO but with FlagNeedsCsum: the kernel left the pseudo-header
// sum in the field, so the checksum of CsumStart to the end, field
// included, is the one the wire needs. Without the flag there is nothing
// to do. Offsets that do not fit the packet are an error, as is a GSO
// packet: Split finishes those, segment by segment.
func Complete(h Hdr, pkt []byte) error {
	if h.Flags&FlagNeedsCsum == 0 {
		return nil
	}
	if h.GSOType != GSONone {
		return ib.ErrField(hdrFormat, "gso_type", "%#02x: a GSO packet is finished by Split", h.GSOType)
	}
	start, field := int(h.CsumStart), int(h.CsumStart)+int(h.CsumOffset)
	if field+2 > len(pkt) {
		return ib.ErrField(hdrFormat, "csum_start", "checksum field at %d+%d is beyond the packet's %d octets", start, h.CsumOffset, len(pkt))
	}
	// The field must be a 16-bit word of the summed data, or the sum
	// would take it byte-swapped.
	if h.CsumOffset&1 != 0 {
		return ib.ErrField(hdrFormat, "csum_offset", "%d is odd", h.CsumOffset)
	}
	c := inetsum.Checksum(0, pkt[start:])
	if c == 0 {
		c = 0xffff // UDP reads 0 as "no checksum"; the same in one's complement
	}
	binary.BigEndian.PutUint16(pkt[field:], c)
	return nil
}

// IP protocol numbers and TCP flags.
const (
	protoTCP = 6
	protoUDP = 17

	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpPSH = 0x08
	tcpACK = 0x10
	tcpURG = 0x20
	tcpECE = 0x40
	tcpCWR = 0x80

	tcpCsumOffset = 16
	udpCsumOffset = 6
)

// fault names what is wrong with a packet in constant strings, so that
// finding it allocates nothing: Coalescer only needs to know there is one,
// Split turns it into an error.
type fault struct{ format, field, why string }

func (f fault) err(pkt []byte) error {
	return ib.ErrField(f.format, f.field, "%s (packet of %d octets)", f.why, len(pkt))
}

// ipHeader checks pkt's IP header: version 4 or 6, the header present, the
// IP length equal to len(pkt), not a fragment. proto is the protocol or,
// for IPv6, the next header: an extension header is not TCP or UDP, so
// callers that want those turn it away. ipLen is the header's length.
func ipHeader(pkt []byte) (ipLen int, v6 bool, proto uint8, f fault) {
	if len(pkt) < 1 {
		return 0, false, 0, fault{"IP", "version", "empty packet"}
	}
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 {
			return 0, false, 0, fault{"IPv4", "header", "truncated"}
		}
		ipLen = int(pkt[0]&0x0f) * 4
		if ipLen < 20 {
			return 0, false, 0, fault{"IPv4", "IHL", "less than 5"}
		}
		if len(pkt) < ipLen {
			return 0, false, 0, fault{"IPv4", "options", "truncated"}
		}
		if int(binary.BigEndian.Uint16(pkt[2:])) != len(pkt) {
			return 0, false, 0, fault{"IPv4", "total length", "differs from the packet's length"}
		}
		if binary.BigEndian.Uint16(pkt[6:])&0x3fff != 0 {
			return 0, false, 0, fault{"IPv4", "flags", "a fragment (MF or fragment offset)"}
		}
		return ipLen, false, pkt[9], fault{}
	case 6:
		if len(pkt) < 40 {
			return 0, false, 0, fault{"IPv6", "header", "truncated"}
		}
		if int(binary.BigEndian.Uint16(pkt[4:]))+40 != len(pkt) {
			return 0, false, 0, fault{"IPv6", "payload length", "differs from the packet's length"}
		}
		return 40, true, pkt[6], fault{}
	}
	return 0, false, 0, fault{"IP", "version", "neither 4 nor 6"}
}

// pseudoSum is the sum of the transport pseudo-header of pkt (RFC 9293
// §3.1, RFC 768, RFC 8200 §8.1) without the transport length: source and
// destination address and the protocol. The length adds on as a plain
// number, since the 32-bit upper-layer length of IPv6 sums the same.
func pseudoSum(pkt []byte, v6 bool, proto uint8) uint64 {
	if v6 {
		return inetsum.Add(uint64(proto), pkt[8:40])
	}
	return inetsum.Add(uint64(proto), pkt[12:20])
}

// ipv4Checksum fills in the checksum of the IPv4 header h.
func ipv4Checksum(h []byte) {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], inetsum.Checksum(0, h))
}
