package offload

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/inetsum"
)

// Segments cuts one TSO/USO super-packet read from the TUN into the
// packets the wire carries, as Linux's software GSO would: each is a copy
// of the IP and transport headers with its share of the payload, lengths,
// IPv4 ID and sequence number adjusted and every checksum complete. It is
// a value holding a slice of the super-packet, so cutting allocates
// nothing; the super-packet must stay unchanged while segments are put.
type Segments struct {
	pkt    []byte
	ipLen  int    // IP header
	hdrs   int    // IP and transport headers
	mss    int    // payload octets per segment
	n      int    // segments
	v6     bool   //
	udp    bool   // USO, else TSO
	pseudo uint64 // pseudo-header sum without the length
	id     uint16 // IPv4 ID of the first segment
	seq    uint32 // TCP sequence number of the first segment
}

// Split validates pkt, an IPv4 or IPv6 TCP or UDP packet read from the TUN
// with header h (gso_type TCPv4, TCPv6 or UDP_L4, TCP ones possibly with
// the ECN bit; gso_size > 0), and prepares its segments. A super-packet
// whose payload fits one segment gives one segment, its checksum finished.
// h.HdrLen is ignored: the headers' lengths come from the packet. IPv6
// extension headers, IPv4 fragments and UFO are refused.
func Split(h Hdr, pkt []byte) (Segments, error) {
	var proto uint8
	kind := h.GSOType &^ GSOECN
	switch kind {
	case GSOTCPv4, GSOTCPv6:
		proto = protoTCP
	case GSOUDPL4:
		if h.GSOType&GSOECN != 0 {
			return Segments{}, ib.ErrField(hdrFormat, "gso_type", "%#02x: the ECN bit is for TCP", h.GSOType)
		}
		proto = protoUDP
	case GSOUDP:
		return Segments{}, ib.ErrField(hdrFormat, "gso_type", "UFO (UDP by IP fragmentation) is not supported")
	case GSONone:
		return Segments{}, ib.ErrField(hdrFormat, "gso_type", "none: not a GSO packet")
	default:
		return Segments{}, ib.ErrField(hdrFormat, "gso_type", "%#02x unknown", h.GSOType)
	}
	if h.GSOSize == 0 {
		return Segments{}, ib.ErrField(hdrFormat, "gso_size", "0")
	}
	ipLen, v6, p, f := ipHeader(pkt)
	if f.why != "" {
		return Segments{}, f.err(pkt)
	}
	if kind == GSOTCPv4 && v6 || kind == GSOTCPv6 && !v6 {
		return Segments{}, ib.ErrField(hdrFormat, "gso_type", "%#02x does not match IP version %d", h.GSOType, pkt[0]>>4)
	}
	if p != proto {
		if v6 {
			return Segments{}, ib.ErrField("IPv6", "next header", "%d: want %d directly (no extension headers)", p, proto)
		}
		return Segments{}, ib.ErrField("IPv4", "protocol", "%d: want %d", p, proto)
	}
	s := Segments{pkt: pkt, ipLen: ipLen, mss: int(h.GSOSize), v6: v6, udp: proto == protoUDP}
	l4 := pkt[ipLen:]
	csumOffset := uint16(tcpCsumOffset)
	if s.udp {
		if len(l4) < 8 {
			return Segments{}, ib.ErrField("UDP", "header", "truncated: %d octets", len(l4))
		}
		if int(binary.BigEndian.Uint16(l4[4:])) != len(l4) {
			return Segments{}, ib.ErrField("UDP", "length", "%d, the IP packet carries %d", binary.BigEndian.Uint16(l4[4:]), len(l4))
		}
		s.hdrs = ipLen + 8
		csumOffset = udpCsumOffset
	} else {
		if len(l4) < 20 {
			return Segments{}, ib.ErrField("TCP", "header", "truncated: %d octets", len(l4))
		}
		thl := int(l4[12]>>4) * 4
		if thl < 20 || thl > len(l4) {
			return Segments{}, ib.ErrField("TCP", "data offset", "%d octets, the packet has %d", thl, len(l4))
		}
		s.hdrs = ipLen + thl
		s.seq = binary.BigEndian.Uint32(l4[4:])
	}
	if h.Flags&FlagNeedsCsum != 0 && (int(h.CsumStart) != ipLen || h.CsumOffset != csumOffset) {
		return Segments{}, ib.ErrField(hdrFormat, "csum_start", "%d+%d: want the transport checksum at %d+%d", h.CsumStart, h.CsumOffset, ipLen, csumOffset)
	}
	if !v6 {
		s.id = binary.BigEndian.Uint16(pkt[4:])
	}
	s.pseudo = pseudoSum(pkt, v6, proto)
	s.n = max(1, (len(pkt)-s.hdrs+s.mss-1)/s.mss)
	return s, nil
}

// Len is the number of segments.
func (s *Segments) Len() int { return s.n }

// MaxLen is the longest segment's length: the headers and gso_size octets
// of payload, or the whole packet when it is one segment.
func (s *Segments) MaxLen() int { return min(s.hdrs+s.mss, len(s.pkt)) }

// Put writes segment k (0 <= k < Len) into dst as a complete IP packet and
// returns its length. dst must hold MaxLen octets and must not overlap the
// super-packet.
func (s *Segments) Put(k int, dst []byte) int {
	if k < 0 || k >= s.n {
		panic("offload: segment index out of range")
	}
	off := s.hdrs + k*s.mss
	end := min(off+s.mss, len(s.pkt))
	n := s.hdrs + end - off
	dst = dst[:n]
	copy(dst, s.pkt[:s.hdrs])
	copy(dst[s.hdrs:], s.pkt[off:end])

	if s.v6 {
		binary.BigEndian.PutUint16(dst[4:], uint16(n-40))
	} else {
		binary.BigEndian.PutUint16(dst[2:], uint16(n))
		binary.BigEndian.PutUint16(dst[4:], s.id+uint16(k))
		ipv4Checksum(dst[:s.ipLen])
	}

	l4 := dst[s.ipLen:]
	sum := s.pseudo + uint64(len(l4))
	if s.udp {
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		l4[6], l4[7] = 0, 0
		c := inetsum.Checksum(sum, l4)
		if c == 0 {
			c = 0xffff // 0 would mean "no checksum"
		}
		binary.BigEndian.PutUint16(l4[6:], c)
		return n
	}
	binary.BigEndian.PutUint32(l4[4:], s.seq+uint32(k*s.mss))
	// CWR answers the peer once, on the first segment; FIN and PSH mark
	// the end of the data, on the last.
	if k > 0 {
		l4[13] &^= tcpCWR
	}
	if k < s.n-1 {
		l4[13] &^= tcpFIN | tcpPSH
	}
	l4[16], l4[17] = 0, 0
	binary.BigEndian.PutUint16(l4[16:], inetsum.Checksum(sum, l4))
	return n
}
