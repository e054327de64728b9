package ipoib

import (
	"net/netip"

	"github.com/ipoibd/ipoibd/encap"
)

// IP header facts the datapath needs; it reads them straight from the slot.
const (
	ipv4HeaderLen  = 20
	ipv6HeaderLen  = 40
	protoTCP       = 6
	protoUDP       = 17
	protoICMPv6    = 58
	icmpv6RS       = 133 // router solicitation: first of the ND types
	icmpv6NA       = 136
	icmpv6Redirect = 137 // last of the ND types
	arpOpOffset    = 6   // the ARP operation, after hardware and protocol types and lengths
	arpOpReply     = 2
)

// ipDest returns the EtherType and destination of the IP packet in p, or
// ok=false when p is not a whole IPv4/IPv6 header.
func ipDest(p []byte) (etherType uint16, dst netip.Addr, ok bool) {
	if len(p) == 0 {
		return 0, netip.Addr{}, false
	}
	switch p[0] >> 4 {
	case 4:
		if len(p) < ipv4HeaderLen {
			return 0, netip.Addr{}, false
		}
		return encap.EtherTypeIPv4, netip.AddrFrom4([4]byte(p[16:20])), true
	case 6:
		if len(p) < ipv6HeaderLen {
			return 0, netip.Addr{}, false
		}
		return encap.EtherTypeIPv6, netip.AddrFrom16([16]byte(p[24:40])), true
	}
	return 0, netip.Addr{}, false
}

// isND reports whether the IPv6 packet p is ICMPv6 neighbor discovery
// (types 133-137) without extension headers, as ND packets always are.
func isND(p []byte) bool {
	return len(p) > ipv6HeaderLen && p[0]>>4 == 6 && p[6] == protoICMPv6 &&
		p[ipv6HeaderLen] >= icmpv6RS && p[ipv6HeaderLen] <= icmpv6Redirect
}

// isReply reports whether the ARP or ND packet p answers a request (an
// ARP reply, a neighbor advertisement): what resolution of our own traffic
// waits for, handled before solicitations.
func isReply(etherType uint16, p []byte) bool {
	if etherType == encap.EtherTypeARP {
		return len(p) > arpOpOffset+1 && p[arpOpOffset] == 0 && p[arpOpOffset+1] == arpOpReply
	}
	return len(p) > ipv6HeaderLen && p[ipv6HeaderLen] == icmpv6NA
}
