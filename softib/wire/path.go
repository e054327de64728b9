package wire

import (
	"hash/crc32"
	"net/netip"
)

// DatagramPath starts ICRCs between two underlay endpoints without
// hashing their headers for every packet. The ICRC is a CRC, so it is
// linear over GF(2): the pseudo-header hashed once with its per-packet
// fields (IP and UDP lengths, IPv4 Identification) zero, plus one table
// entry per octet of those fields, is the pseudo-header hashed whole. The
// zero value starts nothing: make one with NewDatagramPath.
type DatagramPath struct {
	crc uint32 // the masked LRH, IP and UDP headers, lengths and ID zero
	v4  bool
	ok  bool
}

// NewDatagramPath hashes the pseudo-header from src:srcPort to
// dst:dstPort; ok is false for mixed address families.
func NewDatagramPath(src, dst netip.Addr, srcPort, dstPort uint16) (p DatagramPath, ok bool) {
	var h [IPv6HeaderLen + UDPHeaderLen]byte
	hdr, err := AppendIPUDPHeaders(h[:0], src, dst, srcPort, dstPort, 64, 0)
	if err != nil {
		return DatagramPath{}, false
	}
	ipLen := len(hdr) - UDPHeaderLen
	p.v4 = ipLen == IPv4HeaderLen
	if p.v4 {
		hdr[2], hdr[3] = 0, 0 // total length; the ID is 0 already and the checksum masked
	} else {
		hdr[4], hdr[5] = 0, 0 // payload length
	}
	hdr[ipLen+4], hdr[ipLen+5] = 0, 0 // UDP length
	d, err := StartICRC(hdr[:ipLen], hdr[ipLen:])
	if err != nil {
		return DatagramPath{}, false
	}
	p.crc, p.ok = d.crc, true
	return p, true
}

// Start begins the ICRC of an IB packet of ibLen octets (headers to ICRC
// inclusive) sent with IPv4 Identification id (ignored on IPv6). ok is
// false when the path is not valid or the packet does not fit in a
// datagram.
func (p *DatagramPath) Start(id uint16, ibLen int) (d ICRCDigest, ok bool) {
	udpLen := UDPHeaderLen + ibLen
	crc, t := p.crc, &pathTables
	switch {
	case !p.ok || ibLen < 0:
		return ICRCDigest{}, false
	case p.v4:
		total := IPv4HeaderLen + udpLen
		if total > 0xffff {
			return ICRCDigest{}, false
		}
		crc ^= t.v4Length[0][total>>8] ^ t.v4Length[1][total&0xff] ^ t.v4ID[0][id>>8] ^ t.v4ID[1][id&0xff]
	case udpLen > 0xffff:
		return ICRCDigest{}, false
	default:
		crc ^= t.v6Length[0][udpLen>>8] ^ t.v6Length[1][udpLen&0xff]
	}
	crc ^= t.udpLength[0][udpLen>>8] ^ t.udpLength[1][udpLen&0xff]
	return ICRCDigest{crc: crc}, true
}

// Check verifies the ICRC of a received packet (ICRC slot included in b)
// that came over the path, as CheckDatagramICRC does.
func (p *DatagramPath) Check(b []byte, hint uint16) (id uint16, ok bool) {
	if len(b) < BTHLen+ICRCLen {
		return 0, false
	}
	d, ok := p.Start(hint, len(b))
	if !ok {
		return 0, false
	}
	d.Update(b[:len(b)-ICRCLen])
	diff := d.Sum32() ^ GetICRC(b[len(b)-ICRCLen:])
	if diff == 0 {
		return hint, true
	}
	if !p.v4 {
		return 0, false
	}
	x, ok := solveIPv4ID(diff, len(b))
	return hint ^ x, ok
}

// pathTables hold, for each octet of the per-packet header fields, what
// each of its 256 values adds to the CRC register at the pseudo-header's
// end ([0] the high octet, [1] the low one).
var pathTables struct {
	v4Length, v4ID, v6Length, udpLength [2][256]uint32
}

func init() {
	// Offsets in the pseudo-header: the 8-octet LRH stand-in, then IP
	// (total length at 2, ID at 4 in IPv4; payload length at 4 in IPv6),
	// then UDP (length at 4); the UDP header ends both.
	const v4End, v6End = lrhLen + IPv4HeaderLen + UDPHeaderLen, lrhLen + IPv6HeaderLen + UDPHeaderLen
	fill := func(t *[2][256]uint32, at, end int) {
		for k := range 2 {
			t[k] = octetTable(end - (at + k) - 1)
		}
	}
	t := &pathTables
	fill(&t.v4Length, lrhLen+2, v4End)
	fill(&t.v4ID, lrhLen+4, v4End)
	fill(&t.v6Length, lrhLen+4, v6End)
	fill(&t.udpLength, v4End-UDPHeaderLen+4, v4End)
}

// octetTable returns what an octet followed by n zero octets adds to a
// CRC register: the register after hashing them from zero, without the
// CRC's pre- and post-inversion, which cancel in the difference.
func octetTable(n int) (t [256]uint32) {
	b := make([]byte, 1+n)
	for v := range 256 {
		b[0] = byte(v)
		t[v] = ^crc32.Update(^uint32(0), crc32.IEEETable, b)
	}
	return t
}
