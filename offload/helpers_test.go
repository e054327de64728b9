package offload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// The tests build their packets and check checksums with the code below,
// written apart from the package's (no inetsum), so that a mistake shared
// by both cannot pass unseen.

// spec describes a packet to build.
type spec struct {
	v6, udp  bool
	src, dst string // default 10.0.0.1 → 10.0.0.2, fd00::1 → fd00::2
	sport    uint16
	dport    uint16
	tos      uint8 // IPv4 TOS, IPv6 traffic class
	ttl      uint8 // or hop limit; 64 when 0
	flow     uint32
	id       uint16
	noDF     bool
	ipOpts   []byte // IPv4 options, a multiple of 4 octets
	nextHdr  int    // IPv6 next header when not 0 (the protocol's otherwise)
	seq, ack uint32
	flags    uint8 // TCP flags
	win      uint16
	tcpOpts  []byte // a multiple of 4 octets
}

// tsOpts is a TCP timestamps option, padded as Linux sends it.
var tsOpts = []byte{1, 1, 8, 10, 0, 0, 0x12, 0x34, 0, 0, 0x56, 0x78}

func (s spec) addrs() (src, dst []byte) {
	a, b := s.src, s.dst
	if a == "" {
		a, b = "10.0.0.1", "10.0.0.2"
		if s.v6 {
			a, b = "fd00::1", "fd00::2"
		}
	}
	sa, da := netip.MustParseAddr(a), netip.MustParseAddr(b)
	return sa.AsSlice(), da.AsSlice()
}

func (s spec) ipLen() int {
	if s.v6 {
		return 40
	}
	return 20 + len(s.ipOpts)
}

func (s spec) l4Len() int {
	if s.udp {
		return 8
	}
	return 20 + len(s.tcpOpts)
}

// build returns the packet s describes with payload, every checksum valid.
func build(s spec, payload []byte) []byte {
	ipLen, l4Len := s.ipLen(), s.l4Len()
	pkt := make([]byte, ipLen+l4Len+len(payload))
	src, dst := s.addrs()
	proto := uint8(6)
	if s.udp {
		proto = 17
	}
	ttl := s.ttl
	if ttl == 0 {
		ttl = 64
	}
	if s.v6 {
		binary.BigEndian.PutUint32(pkt, 6<<28|uint32(s.tos)<<20|s.flow&0xfffff)
		binary.BigEndian.PutUint16(pkt[4:], uint16(len(pkt)-40))
		pkt[6] = proto
		if s.nextHdr != 0 {
			pkt[6] = uint8(s.nextHdr)
		}
		pkt[7] = ttl
		copy(pkt[8:], src)
		copy(pkt[24:], dst)
	} else {
		pkt[0] = 0x40 | uint8(ipLen/4)
		pkt[1] = s.tos
		binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
		binary.BigEndian.PutUint16(pkt[4:], s.id)
		if !s.noDF {
			pkt[6] = 0x40
		}
		pkt[8] = ttl
		pkt[9] = proto
		copy(pkt[12:], src)
		copy(pkt[16:], dst)
		copy(pkt[20:], s.ipOpts)
		binary.BigEndian.PutUint16(pkt[10:], ^refFold(pkt[:ipLen]))
	}
	l4 := pkt[ipLen:]
	binary.BigEndian.PutUint16(l4, s.sport)
	binary.BigEndian.PutUint16(l4[2:], s.dport)
	copy(l4[l4Len:], payload)
	if s.udp {
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		c := ^refFold(refPseudo(pkt), l4)
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(l4[6:], c)
		return pkt
	}
	binary.BigEndian.PutUint32(l4[4:], s.seq)
	binary.BigEndian.PutUint32(l4[8:], s.ack)
	l4[12] = uint8(l4Len/4) << 4
	l4[13] = s.flags
	binary.BigEndian.PutUint16(l4[14:], s.win)
	copy(l4[20:], s.tcpOpts)
	binary.BigEndian.PutUint16(l4[16:], ^refFold(refPseudo(pkt), l4))
	return pkt
}

// super returns the super-packet of s and payload as the kernel hands it
// over with gso_size mss: the transport checksum field holding only the
// pseudo-header sum, and its header.
func super(s spec, payload []byte, mss int) (Hdr, []byte) {
	pkt := build(s, payload)
	ipLen := s.ipLen()
	h := Hdr{Flags: FlagNeedsCsum, GSOType: GSOTCPv4, HdrLen: uint16(ipLen + s.l4Len()), GSOSize: uint16(mss),
		CsumStart: uint16(ipLen), CsumOffset: 16}
	switch {
	case s.udp:
		h.GSOType, h.CsumOffset = GSOUDPL4, 6
	case s.v6:
		h.GSOType = GSOTCPv6
	}
	if s.flags&tcpCWR != 0 && !s.udp {
		h.GSOType |= GSOECN
	}
	binary.BigEndian.PutUint16(pkt[ipLen+int(h.CsumOffset):], refFold(refPseudo(pkt)))
	return h, pkt
}

// refFold is the folded one's complement sum of big-endian 16-bit words,
// the parts padded apart; every part but the last has an even length.
func refFold(parts ...[]byte) uint16 {
	var s uint32
	for _, b := range parts {
		for i := 0; i < len(b); i += 2 {
			w := uint32(b[i]) << 8
			if i+1 < len(b) {
				w |= uint32(b[i+1])
			}
			s += w
			s = s&0xffff + s>>16
		}
	}
	return uint16(s)
}

// refPseudo is the pseudo-header of pkt's transport data.
func refPseudo(pkt []byte) []byte {
	if pkt[0]>>4 == 6 {
		p := make([]byte, 40)
		copy(p, pkt[8:40])
		binary.BigEndian.PutUint32(p[32:], uint32(len(pkt)-40))
		p[39] = pkt[6]
		return p
	}
	ipLen := int(pkt[0]&0xf) * 4
	p := make([]byte, 12)
	copy(p, pkt[12:20])
	p[9] = pkt[9]
	binary.BigEndian.PutUint16(p[10:], uint16(len(pkt)-ipLen))
	return p
}

// checkPacket reports what is wrong with pkt as the wire would see it:
// lengths, the IPv4 header checksum, the TCP or UDP checksum.
func checkPacket(pkt []byte) error {
	if len(pkt) < 20 {
		return errors.New("shorter than an IP header")
	}
	var ipLen int
	var proto byte
	switch pkt[0] >> 4 {
	case 4:
		ipLen = int(pkt[0]&0xf) * 4
		if n := int(binary.BigEndian.Uint16(pkt[2:])); n != len(pkt) {
			return fmt.Errorf("IPv4 total length %d, packet %d", n, len(pkt))
		}
		if s := refFold(pkt[:ipLen]); s != 0xffff {
			return fmt.Errorf("IPv4 header checksum: sum %#04x", s)
		}
		proto = pkt[9]
	case 6:
		ipLen = 40
		if n := int(binary.BigEndian.Uint16(pkt[4:])); n+40 != len(pkt) {
			return fmt.Errorf("IPv6 payload length %d, packet %d", n, len(pkt))
		}
		proto = pkt[6]
	default:
		return fmt.Errorf("IP version %d", pkt[0]>>4)
	}
	l4 := pkt[ipLen:]
	switch proto {
	case 6:
		if len(l4) < 20 {
			return errors.New("TCP header truncated")
		}
	case 17:
		if len(l4) < 8 {
			return errors.New("UDP header truncated")
		}
		if n := int(binary.BigEndian.Uint16(l4[4:])); n != len(l4) {
			return fmt.Errorf("UDP length %d, carried %d", n, len(l4))
		}
		if binary.BigEndian.Uint16(l4[6:]) == 0 {
			return errors.New("UDP checksum 0 (none)")
		}
	default:
		return fmt.Errorf("protocol %d", proto)
	}
	if s := refFold(refPseudo(pkt), l4); s != 0xffff {
		return fmt.Errorf("transport checksum: sum %#04x", s)
	}
	return nil
}

// payloadOf is pkt's transport payload.
func payloadOf(pkt []byte) []byte {
	ipLen := 40
	proto := pkt[6]
	if pkt[0]>>4 == 4 {
		ipLen, proto = int(pkt[0]&0xf)*4, pkt[9]
	}
	if proto == 17 {
		return pkt[ipLen+8:]
	}
	return pkt[ipLen+int(pkt[ipLen+12]>>4)*4:]
}

// pattern is n octets that differ from their neighbours.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed + byte(i>>8)
	}
	return b
}

// splitAll puts every segment of s into a buffer of its own.
func splitAll(s *Segments) [][]byte {
	var out [][]byte
	for k := range s.Len() {
		buf := make([]byte, s.MaxLen())
		out = append(out, buf[:s.Put(k, buf)])
	}
	return out
}

func concat(parts [][]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}
