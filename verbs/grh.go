package verbs

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// srcGIDFromGRH returns the sender's GID from the 40 octets verbs writes in
// front of a UD datagram. On InfiniBand and RoCEv2 over IPv6 they are the
// GRH (or IPv6 header), whose source GID sits at octets 8-23. On RoCEv2
// over IPv4 the first 20 octets are undefined and the last 20 hold the IPv4
// header; the source GID is its source address, IPv4-mapped. The two are
// told apart as the kernel does: the last 20 octets count as IPv4 only if
// they are a 20-octet IPv4 header with a valid checksum. ok is false when
// neither form is present.
func srcGIDFromGRH(grh []byte) (gid ib.GID, ok bool) {
	if len(grh) < ib.GRHLen {
		return ib.GID{}, false
	}
	if ip := grh[20:40]; isIPv4Header(ip) {
		gid[10], gid[11] = 0xff, 0xff
		copy(gid[12:], ip[12:16])
		return gid, true
	}
	if grh[0]>>4 == 6 {
		copy(gid[:], grh[8:24])
		return gid, true
	}
	return ib.GID{}, false
}

// isIPv4Header reports whether h is an IPv4 header without options whose
// checksum is right.
func isIPv4Header(h []byte) bool {
	if len(h) != 20 || h[0] != 0x45 {
		return false
	}
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
}
