package neigh

import (
	"encoding/binary"
	"net/netip"
)

// protoICMPv6 is the IPv6 next-header value of ICMPv6.
const protoICMPv6 = 58

// ICMPv6Checksum returns the checksum to put in octets 2-3 of the ICMPv6
// message msg sent from src to dst (RFC 4443 §2.3): the one's complement of
// the one's complement sum over the IPv6 pseudo-header (source, destination,
// upper-layer length, next header 58) and msg. Whatever msg's checksum
// field holds is taken as zero, so the same call builds and checks a
// message.
func ICMPv6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	s := pseudoSum(src, dst, len(msg))
	if len(msg) >= 2 {
		s = sum(s, msg[:2])
	} else {
		s = sum(s, msg)
	}
	if len(msg) > 4 {
		s = sum(s, msg[4:]) // starts on a 16-bit boundary
	}
	return ^fold(s)
}

// checksumOK reports whether msg's own checksum is right: the sum over
// everything, checksum included, is 0xFFFF. This accepts both encodings of
// a zero checksum (0x0000 and 0xFFFF), as receivers must.
func checksumOK(src, dst netip.Addr, msg []byte) bool {
	return fold(sum(pseudoSum(src, dst, len(msg)), msg)) == 0xffff
}

func pseudoSum(src, dst netip.Addr, n int) uint64 {
	s, d := src.As16(), dst.As16()
	// The 32-bit length and the 24 zero bits before the next header add
	// the same as their values do: 2^16 ≡ 1 in one's complement.
	return sum(sum(uint64(n)+protoICMPv6, s[:]), d[:])
}

// sum adds b to the running sum s as big-endian 16-bit words, an odd last
// octet padded with zero. 32-bit words into a 64-bit accumulator give the
// same result after folding and halve the loop.
func sum(s uint64, b []byte) uint64 {
	for len(b) >= 4 {
		s += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

// fold reduces s to 16 bits with end-around carry. It is never 0 for a
// non-zero s, and the pseudo-header's next header makes s non-zero.
func fold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
