package offload

import (
	"bytes"
	"encoding/binary"

	"github.com/ipoibd/ipoibd/inetsum"
)

// MaxParts is the most packets a Coalescer merges into one.
const MaxParts = 64

// Coalescer merges consecutive in-order TCP segments of one flow, received
// from the fabric, into one super-packet that the TUN takes with a
// virtio-net header (GRO), so that a train of segments costs one write.
// The kernel cuts the super-packet again wherever it has to, so only what
// it can cut back into the same segments is merged, by the rules of
// Linux's tcp_gro_receive.
//
// It holds slices of the caller's packets, not copies: a held packet's
// buffer must stay untouched until Flush has returned it and the write is
// done. The caller flushes at the end of every batch it receives, so that
// a held train never waits for traffic that may not come. The zero value
// is ready; nothing allocates.
type Coalescer struct {
	pkts  [MaxParts][]byte // held packets, whole
	parts [MaxParts][]byte // what Flush returns
	train
}

// train is the state of the held packets, reset apart from the arrays.
type train struct {
	n     int
	ipLen int // the held packets' IP header length
	hdrs  int // and IP plus TCP header length
	mss   int // payload of the first: every other carries as much, the last at most
	total int // IP length of the merged packet
	max   int // and its limit
	next  uint32
	id    uint16 // IPv4 ID the next one must carry, unless DF
	v6    bool
	psh   bool // the last held one has PSH
	shut  bool // nothing more may join: PSH, a short segment or full
}

// Add offers pkt, a complete IP packet. It reports whether pkt is now held:
// it joined the held train, or nothing was held and pkt starts one. false
// means either that pkt cannot join the held train (the caller then calls
// Flush, writes that, and offers pkt again) or that pkt is no candidate at
// all (not TCP, IPv4 options, IPv6 extension headers, a fragment,
// SYN/FIN/RST/URG/CWR/ECE, no payload, a bad checksum, ...): with nothing
// held, it is to be written alone.
func (c *Coalescer) Add(pkt []byte) bool {
	if c.shut {
		return false
	}
	ipLen, thl, v6, ok := candidate(pkt)
	if !ok {
		return false
	}
	t := pkt[ipLen:]
	payload := len(pkt) - ipLen - thl
	seq := binary.BigEndian.Uint32(t[4:])
	if c.n > 0 {
		first := c.pkts[0]
		if v6 != c.v6 || ipLen+thl != c.hdrs || payload > c.mss || seq != c.next ||
			c.total+payload > c.max || !sameFlow(first, pkt, ipLen, thl, v6) {
			return false
		}
		// Without DF the IDs must count up, for the kernel's segmentation
		// to give them back; with DF they mean nothing (RFC 6864).
		if !v6 && pkt[6]&0x40 == 0 && binary.BigEndian.Uint16(pkt[4:]) != c.id {
			return false
		}
	} else if t[13]&tcpPSH != 0 || len(pkt)+payload > maxMerged(v6) {
		// Nothing could follow it (a 64 KiB RC packet, the end of a
		// write): alone it goes, and the kernel checks it as usual.
		return false
	}
	// Checked last, being the costly part. A segment is merged only when
	// its checksum holds: the merged packet goes up with a checksum the
	// kernel finishes and no longer checks.
	if inetsum.Fold(inetsum.Add(pseudoSum(pkt, v6, protoTCP)+uint64(len(t)), t)) != 0xffff {
		return false
	}
	if c.n == 0 {
		c.ipLen, c.hdrs, c.mss, c.total, c.v6 = ipLen, ipLen+thl, payload, len(pkt), v6
		c.max = maxMerged(v6)
	} else {
		c.total += payload
	}
	c.pkts[c.n] = pkt
	c.n++
	c.next = seq + uint32(payload)
	if !v6 {
		c.id = binary.BigEndian.Uint16(pkt[4:]) + 1
	}
	c.psh = t[13]&tcpPSH != 0
	c.shut = c.psh || payload < c.mss || c.n == MaxParts
	return true
}

// maxMerged is the longest merged packet: the largest IPv4 total length,
// or IPv6 payload length plus the fixed header.
func maxMerged(v6 bool) int {
	if v6 {
		return 0xffff + 40
	}
	return 0xffff
}

// candidate reports whether pkt may be merged at all, with its IP and TCP
// header lengths.
func candidate(pkt []byte) (ipLen, thl int, v6, ok bool) {
	ipLen, v6, proto, f := ipHeader(pkt)
	if f.why != "" || proto != protoTCP {
		return 0, 0, false, false
	}
	// IPv4 options would have to match too; and a header with a bad
	// checksum is left to the kernel to drop.
	if !v6 && (ipLen != 20 || inetsum.Checksum(0, pkt[:20]) != 0) {
		return 0, 0, false, false
	}
	t := pkt[ipLen:]
	if len(t) < 20 {
		return 0, 0, false, false
	}
	thl = int(t[12]>>4) * 4
	if thl < 20 || thl >= len(t) { // no payload, nothing to merge
		return 0, 0, false, false
	}
	// ACK, perhaps PSH; nothing else, not even the reserved bits.
	if t[12]&0x0f != 0 || t[13]&^tcpPSH != tcpACK {
		return 0, 0, false, false
	}
	return ipLen, thl, v6, true
}

// sameFlow reports whether pkt belongs to the train first starts: the
// same addresses and ports, the IP fields that must not change within a
// flow, the same acknowledgment and TCP options. Both are candidates with
// the same header lengths.
func sameFlow(first, pkt []byte, ipLen, thl int, v6 bool) bool {
	if v6 {
		// Version, traffic class and flow label; hop limit; addresses.
		if binary.BigEndian.Uint32(first) != binary.BigEndian.Uint32(pkt) || first[7] != pkt[7] ||
			!bytes.Equal(first[8:40], pkt[8:40]) {
			return false
		}
	} else {
		// TOS, DF, TTL, addresses.
		if first[1] != pkt[1] || (first[6]^pkt[6])&0x40 != 0 || first[8] != pkt[8] ||
			binary.BigEndian.Uint64(first[12:]) != binary.BigEndian.Uint64(pkt[12:]) {
			return false
		}
	}
	a, b := first[ipLen:ipLen+thl], pkt[ipLen:ipLen+thl]
	return binary.BigEndian.Uint32(a) == binary.BigEndian.Uint32(b) && // ports
		binary.BigEndian.Uint32(a[8:]) == binary.BigEndian.Uint32(b[8:]) && // ACK
		bytes.Equal(a[20:], b[20:]) // options
}

// Held is the number of packets held.
func (c *Coalescer) Held() int { return c.n }

// Flush ends the train and empties the coalescer. For one packet it
// returns a zero Hdr and parts = [that packet], unchanged. For more it
// rewrites the first packet's headers in place into those of the merged
// packet (IP length, IPv4 header checksum, PSH if the last segment had
// it, the TCP checksum field holding the pseudo-header sum for the whole
// length) and returns the header the TUN needs with parts = [first packet,
// payload of the second, of the third, ...], to write with writev. parts
// stays valid until the next Add or Flush. With nothing held it returns a
// zero Hdr and no parts.
func (c *Coalescer) Flush() (Hdr, [][]byte) {
	n := c.n
	if n == 0 {
		return Hdr{}, nil
	}
	first := c.pkts[0]
	c.parts[0] = first
	if n == 1 {
		c.reset()
		return Hdr{}, c.parts[:1]
	}
	for i := 1; i < n; i++ {
		c.parts[i] = c.pkts[i][c.hdrs:]
	}
	h := Hdr{Flags: FlagNeedsCsum, GSOType: GSOTCPv4, HdrLen: uint16(c.hdrs), GSOSize: uint16(c.mss),
		CsumStart: uint16(c.ipLen), CsumOffset: tcpCsumOffset}
	if c.v6 {
		h.GSOType = GSOTCPv6
		binary.BigEndian.PutUint16(first[4:], uint16(c.total-40))
	} else {
		binary.BigEndian.PutUint16(first[2:], uint16(c.total))
		ipv4Checksum(first[:c.ipLen])
	}
	t := first[c.ipLen:]
	if c.psh {
		t[13] |= tcpPSH
	}
	binary.BigEndian.PutUint16(t[16:], inetsum.Fold(pseudoSum(first, c.v6, protoTCP)+uint64(c.total-c.ipLen)))
	c.reset()
	return h, c.parts[:n]
}

func (c *Coalescer) reset() {
	clear(c.pkts[:c.n]) // let go of the caller's buffers
	c.train = train{}
}
