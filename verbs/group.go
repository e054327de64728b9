package verbs

import "github.com/ipoibd/ipoibd/ib"

// wireGID is the GID a datagram to g is actually sent to or received on.
// A RoCEv2 port with an IPv4 GID sends IPv4 packets and reads the
// destination address from the GID's last four octets, so an IB-style MGID
// (IPoIB's ff12:401b:..., ff12:601b:...) would go to a meaningless
// address: it is mapped into 239/8 the way softib maps it on an IPv4
// underlay (ib.IPv4Group). Unicast GIDs and groups already IPv4-mapped
// pass unchanged.
func wireGID(port, g ib.GID) ib.GID {
	if port.IsIPv4Mapped() && g.IsMulticast() {
		return ib.IPv4Group(g)
	}
	return g
}
