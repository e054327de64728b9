package wire

import "net/netip"

// A RoCEv2 packet travels as a UDP datagram, and its ICRC covers the IP
// and UDP headers in front of it (icrc.go). A receiver that reads it from
// a UDP socket sees the two endpoints, not those headers: these rebuild
// them from the endpoints to start, check or compute the ICRC. Each call
// hashes the headers; a sender or receiver that keeps a DatagramPath per
// peer (path.go) does that once.

// StartDatagramICRC begins the ICRC of an IB packet of ibLen octets
// (headers to ICRC inclusive) between two underlay endpoints. It rebuilds
// the IP header from the socket addresses, with the given IPv4
// Identification and DF (as Linux sends unconnected DF datagrams),
// because a UDP socket does not see the one the kernel wrote; the TTL is
// masked, so any value does. ok is false for mixed address families.
func StartDatagramICRC(src, dst netip.Addr, srcPort, dstPort, id uint16, ibLen int) (d ICRCDigest, ok bool) {
	p, ok := NewDatagramPath(src, dst, srcPort, dstPort)
	if !ok {
		return ICRCDigest{}, false
	}
	return p.Start(id, ibLen)
}

// CheckDatagramICRC verifies the ICRC of a received packet (ICRC slot
// included in b) from src to dst on port dstPort. On IPv4 the Identification the
// sender used is unknown: hint is tried first, and if the ICRC does not
// match it, the one ID that makes it match is solved for (solveIPv4ID).
// It returns the ID that matched.
func CheckDatagramICRC(b []byte, src netip.AddrPort, dst netip.Addr, dstPort, hint uint16) (id uint16, ok bool) {
	p, ok := NewDatagramPath(src.Addr(), dst, src.Port(), dstPort)
	if !ok {
		return 0, false
	}
	return p.Check(b, hint)
}

// DatagramICRC computes the ICRC a packet (ICRC slot included in b)
// sent as one datagram (IPv4 ID 0) must carry.
func DatagramICRC(b []byte, src netip.AddrPort, dst netip.Addr, dstPort uint16) uint32 {
	d, _ := StartDatagramICRC(src.Addr(), dst, src.Port(), dstPort, 0, len(b))
	d.Update(b[:len(b)-ICRCLen])
	return d.Sum32()
}
