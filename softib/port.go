package softib

import (
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// PortActive reports whether the port is up: the underlay interface is up,
// has a carrier and still has the underlay address, as an InfiniBand port
// is ACTIVE only with its link (without its address, nothing the port
// sends leaves). On the loopback interface the address may be any of a
// prefix configured there (127.0.0.21 under 127.0.0.1/8): the kernel's
// local route makes the whole prefix local. An InfiniBand-link port is
// also down while its owner says the SM holds it not ACTIVE
// (SetPortActive).
func (d *Device) PortActive() bool {
	if d.ibp != nil && d.ibp.down.Load() {
		return false
	}
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
	loopback := a.Flags&net.FlagLoopback != 0
	for _, ad := range addrs {
		if ip, ok := netip.AddrFromSlice(ad.IP); ok && ip.Unmap() == d.fab.local {
			return true
		}
		if loopback && ad.IPNet != nil && ad.IPNet.Contains(d.fab.local.AsSlice()) {
			return true
		}
	}
	return false
}

// SetPortActive tells an InfiniBand-link port its state on the subnet, as
// its owner reads it from the port's SMA: not ACTIVE (the link cut, or the
// SM has not made it ACTIVE yet) makes PortActive false, as a ConnectX
// port raises PORT_ERR, and ACTIVE again gives PortActive back to the
// underlay, as PORT_ACTIVE. It raises no subnet event: a port that comes
// back carries a client reregister only if the SM set one (SetSubnet).
func (d *Device) SetPortActive(active bool) error {
	if d.ibp == nil {
		return ErrNotIB
	}
	d.ibp.down.Store(!active)
	return nil
}
