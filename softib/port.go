package softib

import (
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// PortActive reports whether the port is up: the underlay interface is up,
// has a carrier and still has the underlay address, as an InfiniBand port
// is ACTIVE only with its link (without its address, nothing the port
// sends leaves).
func (d *Device) PortActive() bool {
	l, err := d.nl.LinkByIndex(d.fab.ifindex)
	if err != nil {
		return false
	}
	a := l.Attrs()
	if a.Flags&net.FlagUp == 0 || a.RawFlags&unix.IFF_LOWER_UP == 0 {
		return false
	}
	family := unix.AF_INET6
	if d.fab.v4 {
		family = unix.AF_INET
	}
	addrs, err := d.nl.AddrList(l, family)
	if err != nil {
		return false
	}
	for _, ad := range addrs {
		if ip, ok := netip.AddrFromSlice(ad.IP); ok && ip.Unmap() == d.fab.local {
			return true
		}
	}
	return false
}
