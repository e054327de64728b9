package wire

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
)

// UDPPort is the RoCEv2 destination port.
const UDPPort = 4791

// Underlay header sizes.
const (
	IPv4HeaderLen = 20 // no options: RoCEv2 senders use none
	IPv6HeaderLen = 40
	UDPHeaderLen  = 8
)

// lrhLen is the 0xFF stand-in for the LRH that starts the ICRC string.
const lrhLen = 8

// bthMaskedOctet is the BTH octet (FECN, BECN, reserved) hashed as 0xFF.
const bthMaskedOctet = 4

var maskedBTHOctet = [1]byte{0xff}

// maxShortPiece is the longest piece holding the masked octet that Update
// hashes from a masked copy: every header set softib sends.
const maxShortPiece = 64

// ICRCDigest accumulates the ICRC (spec §9) of a packet that is fed in
// pieces, e.g. headers, a payload in registered memory and the pad, so that
// a sender never copies a packet to checksum it. It masks BTH octet 4
// wherever the piece boundaries fall. The zero value is not usable: start
// one with StartICRC.
type ICRCDigest struct {
	crc uint32
	n   int // IB packet octets hashed so far
}

// StartICRC begins an ICRC with the IP header (IPv4 without options, or
// IPv6) and the UDP header the packet travels behind, hashing them with
// their variant fields masked. The headers are not retained.
func StartICRC(ipHeader, udpHeader []byte) (ICRCDigest, error) {
	// The masked copy is hashed byte by byte because handing a stack array
	// to crc32.Update moves it to the heap (the IEEE path is called through
	// a function value), and that would be an allocation per packet.
	var s [lrhLen + IPv6HeaderLen + UDPHeaderLen]byte
	for i := range lrhLen {
		s[i] = 0xff
	}
	n := lrhLen
	switch {
	case len(ipHeader) == IPv4HeaderLen && ipHeader[0] == 0x45:
		ip := s[n : n+IPv4HeaderLen]
		copy(ip, ipHeader)
		ip[1] = 0xff                // TOS
		ip[8] = 0xff                // TTL
		ip[10], ip[11] = 0xff, 0xff // header checksum
		n += IPv4HeaderLen
	case len(ipHeader) == IPv6HeaderLen && ipHeader[0]>>4 == 6:
		ip := s[n : n+IPv6HeaderLen]
		copy(ip, ipHeader)
		ip[0] |= 0x0f                          // traffic class, high nibble
		ip[1], ip[2], ip[3] = 0xff, 0xff, 0xff // traffic class, flow label
		ip[7] = 0xff                           // hop limit
		n += IPv6HeaderLen
	case len(ipHeader) > 0 && ipHeader[0]>>4 == 4:
		return ICRCDigest{}, ib.ErrField("ICRC", "IP header", "IPv4 header of %d octets, IHL %d: want 20 octets without options", len(ipHeader), ipHeader[0]&0x0f)
	default:
		return ICRCDigest{}, ib.ErrField("ICRC", "IP header", "%d octets: want a 20-octet IPv4 or a 40-octet IPv6 header", len(ipHeader))
	}
	if len(udpHeader) != UDPHeaderLen {
		return ICRCDigest{}, ib.ErrField("ICRC", "UDP header", "%d octets, want %d", len(udpHeader), UDPHeaderLen)
	}
	udp := s[n : n+UDPHeaderLen]
	copy(udp, udpHeader)
	udp[6], udp[7] = 0xff, 0xff // checksum
	n += UDPHeaderLen
	return ICRCDigest{crc: crcBytes(0, s[:n])}, nil
}

// Update hashes the next octets of the IB packet (BTH onwards, ICRC
// excluded).
func (d *ICRCDigest) Update(p []byte) {
	if d.n <= bthMaskedOctet && d.n+len(p) > bthMaskedOctet && len(p) <= maxShortPiece {
		// The headers of a packet (BTH and the rest, or an ACK whole):
		// one pass over a masked copy, not three calls.
		var h [maxShortPiece]byte
		copy(h[:], p)
		h[bthMaskedOctet-d.n] = 0xff
		d.crc = crcBytes(d.crc, h[:len(p)])
		d.n += len(p)
		return
	}
	if d.n <= bthMaskedOctet && d.n+len(p) > bthMaskedOctet {
		i := bthMaskedOctet - d.n
		d.crc = crc32.Update(d.crc, crc32.IEEETable, p[:i])
		d.crc = crcBytes(d.crc, maskedBTHOctet[:])
		p = p[i+1:]
		d.n += i + 1
	}
	d.crc = crc32.Update(d.crc, crc32.IEEETable, p)
	d.n += len(p)
}

// Sum32 returns the ICRC of what was hashed.
func (d *ICRCDigest) Sum32() uint32 { return d.crc }

// crcBytes is crc32.Update over IEEETable, written out so that p does not
// escape: slicing by 8 (as hash/crc32 does for short inputs), since the
// pseudo header is hashed for every packet sent and received.
func crcBytes(crc uint32, p []byte) uint32 {
	t := &crcSlicing8
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xff] ^ t[6][crc>>8&0xff] ^ t[7][crc&0xff]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// crcSlicing8 holds the IEEE table and the seven derived from it for
// slicing by 8 (8 KiB).
var crcSlicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for j := 1; j < 8; j++ {
			c = t[0][c&0xff] ^ c>>8
			t[j][i] = c
		}
	}
	return t
}()

// ICRC computes the invariant CRC of an IB packet from the IP header
// (20-octet IPv4 or 40-octet IPv6), the UDP header and the IB packet from
// the BTH up to, not including, the ICRC. It works on any opcode. It does
// not allocate.
func ICRC(ipHeader, udpHeader, ibPacket []byte) (uint32, error) {
	if err := ib.NeedLen("ICRC", "BTH", ibPacket, BTHLen); err != nil {
		return 0, err
	}
	d, err := StartICRC(ipHeader, udpHeader)
	if err != nil {
		return 0, err
	}
	d.Update(ibPacket)
	return d.Sum32(), nil
}

// PutICRC writes crc into b[:4] least-significant octet first, the one
// little-endian field of RoCEv2.
func PutICRC(b []byte, crc uint32) { binary.LittleEndian.PutUint32(b, crc) }

// GetICRC reads an ICRC written by PutICRC from b[:4].
func GetICRC(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// AppendIPUDPHeaders appends the IP and UDP headers of a RoCEv2 packet of
// ibLen octets (BTH to ICRC inclusive) from src to dst, as Linux writes them
// for an unconnected UDP socket with DF: IPv4 (when both addresses are IPv4
// or IPv4-mapped) with TOS 0, ID 0, DF, the given TTL and a correct header
// checksum; or IPv6 with traffic class and flow label 0 and the TTL as hop
// limit. The UDP checksum is 0, as rxe sends it. A softib receiver rebuilds
// the IP header this way from the socket addresses to check the ICRC, since
// a UDP socket never sees the real one.
func AppendIPUDPHeaders(b []byte, src, dst netip.Addr, srcPort, dstPort uint16, ttl uint8, ibLen int) ([]byte, error) {
	src, dst = src.Unmap(), dst.Unmap()
	switch {
	case !src.IsValid():
		return b, ib.ErrField("IP header", "source", "no address")
	case !dst.IsValid():
		return b, ib.ErrField("IP header", "destination", "no address")
	case src.Is4() != dst.Is4():
		return b, ib.ErrField("IP header", "destination", "%v and source %v are of different families", dst, src)
	}
	udpLen := UDPHeaderLen + ibLen
	if src.Is4() {
		if ibLen < 0 || IPv4HeaderLen+udpLen > 0xffff {
			return b, ib.ErrField("IP header", "total length", "%d octets of IB packet do not fit in an IPv4 datagram", ibLen)
		}
		n := len(b)
		b = append(b, make([]byte, IPv4HeaderLen+UDPHeaderLen)...)
		ip := b[n : n+IPv4HeaderLen]
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:4], uint16(IPv4HeaderLen+udpLen))
		ip[6] = 0x40 // DF; ID and fragment offset 0
		ip[8], ip[9] = ttl, 17
		s, d := src.As4(), dst.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.BigEndian.PutUint16(ip[10:12], ipv4Checksum(ip))
		putUDP(b[n+IPv4HeaderLen:], srcPort, dstPort, udpLen)
		return b, nil
	}
	if ibLen < 0 || udpLen > 0xffff {
		return b, ib.ErrField("IP header", "payload length", "%d octets of IB packet do not fit in an IPv6 datagram", ibLen)
	}
	n := len(b)
	b = append(b, make([]byte, IPv6HeaderLen+UDPHeaderLen)...)
	ip := b[n : n+IPv6HeaderLen]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:6], uint16(udpLen))
	ip[6], ip[7] = 17, ttl
	s, d := src.As16(), dst.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	putUDP(b[n+IPv6HeaderLen:], srcPort, dstPort, udpLen)
	return b, nil
}

func putUDP(b []byte, srcPort, dstPort uint16, udpLen int) {
	binary.BigEndian.PutUint16(b[0:2], srcPort)
	binary.BigEndian.PutUint16(b[2:4], dstPort)
	binary.BigEndian.PutUint16(b[4:6], uint16(udpLen))
	b[6], b[7] = 0, 0
}

// ipv4Checksum is the Internet checksum of a header whose checksum field
// is zero.
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
