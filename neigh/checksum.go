package neigh

import (
	"net/netip"

	"github.com/ipoibd/ipoibd/inetsum"
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
		s = inetsum.Add(s, msg[:2])
	} else {
		s = inetsum.Add(s, msg)
	}
	if len(msg) > 4 {
		s = inetsum.Add(s, msg[4:]) // starts on a 16-bit boundary
	}
	return ^inetsum.Fold(s)
}

// checksumOK reports whether msg's own checksum is right: the sum over
// everything, checksum included, is 0xFFFF. This accepts both encodings of
// a zero checksum (0x0000 and 0xFFFF), as receivers must.
func checksumOK(src, dst netip.Addr, msg []byte) bool {
	return inetsum.Fold(inetsum.Add(pseudoSum(src, dst, len(msg)), msg)) == 0xffff
}

func pseudoSum(src, dst netip.Addr, n int) uint64 {
	return inetsum.PseudoIPv6(src, dst, n, protoICMPv6)
}
