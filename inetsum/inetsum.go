// Package inetsum is the Internet checksum (RFC 1071) that IPv4 headers,
// ICMP and ICMPv6 share: a one's complement sum of big-endian 16-bit words.
// It is on the datapath (offload's segmentation and coalescing, the ICMP
// errors of mtu, ND in neigh), so it allocates nothing and sums 64 bits at
// a time. It imports nothing of ours; its users hold the pseudo-headers.
package inetsum

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// Add adds b to the running sum as big-endian 16-bit words, an odd last
// octet padded with zero. b must start on an even offset of the summed
// data. 64-bit words into a 64-bit accumulator (each half added apart, so
// nothing carries out) give the same result after folding in a quarter of
// the steps.
func Add(sum uint64, b []byte) uint64 {
	if len(b) >= 128 {
		n := len(b) &^ 31
		sum += uint64(bulk(b[:n]))
		b = b[n:]
	}
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		sum += v>>32 + v&0xffffffff
		b = b[8:]
	}
	if len(b) >= 4 {
		sum += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		sum += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint64(b[0]) << 8
	}
	return sum
}

// Fold reduces a sum to 16 bits with end-around carry (not complemented).
func Fold(sum uint64) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

// bulk is the folded sum of b (a multiple of 32 octets) as big-endian
// words, for the packet payloads the datapath sums. The one's complement
// sum does not depend on byte order (RFC 1071 §2(B)), so it adds native
// little-endian 64-bit words with carry, four per step, and swaps the
// folded result: about twice as fast as Add's loop.
func bulk(b []byte) uint16 {
	// Two carry chains, interleaved: each add waits only for its own
	// chain's carry, so the CPU runs both at once.
	var a0, c0, a1, c1 uint64
	for len(b) >= 64 {
		a0, c0 = bits.Add64(a0, binary.LittleEndian.Uint64(b), c0)
		a1, c1 = bits.Add64(a1, binary.LittleEndian.Uint64(b[8:]), c1)
		a0, c0 = bits.Add64(a0, binary.LittleEndian.Uint64(b[16:]), c0)
		a1, c1 = bits.Add64(a1, binary.LittleEndian.Uint64(b[24:]), c1)
		a0, c0 = bits.Add64(a0, binary.LittleEndian.Uint64(b[32:]), c0)
		a1, c1 = bits.Add64(a1, binary.LittleEndian.Uint64(b[40:]), c1)
		a0, c0 = bits.Add64(a0, binary.LittleEndian.Uint64(b[48:]), c0)
		a1, c1 = bits.Add64(a1, binary.LittleEndian.Uint64(b[56:]), c1)
		b = b[64:]
	}
	if len(b) >= 32 {
		a0, c0 = bits.Add64(a0, binary.LittleEndian.Uint64(b), c0)
		a1, c1 = bits.Add64(a1, binary.LittleEndian.Uint64(b[8:]), c1)
		a0, c0 = bits.Add64(a0, binary.LittleEndian.Uint64(b[16:]), c0)
		a1, c1 = bits.Add64(a1, binary.LittleEndian.Uint64(b[24:]), c1)
	}
	// Fold the chains and their carries into one end-around sum.
	acc, c := bits.Add64(a0, a1, 0)
	acc, c = bits.Add64(acc, c0+c1, c)
	acc += c // end-around carry; cannot carry again
	return bits.ReverseBytes16(Fold(acc>>32 + acc&0xffffffff))
}

// Checksum is the checksum of b after the running sum: the complement of
// the folded sum.
func Checksum(sum uint64, b []byte) uint16 { return ^Fold(Add(sum, b)) }

// PseudoIPv6 is the sum of the IPv6 pseudo-header (RFC 8200 §8.1): source,
// destination, upper-layer length and next header. The 32-bit length and
// the 24 zero bits before the next header add as their values do, since
// 2^16 ≡ 1 in one's complement.
func PseudoIPv6(src, dst netip.Addr, length int, nextHeader uint8) uint64 {
	s, d := src.As16(), dst.As16()
	return Add(Add(uint64(length)+uint64(nextHeader), s[:]), d[:])
}
