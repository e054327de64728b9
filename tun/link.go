package tun

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ipoibd/ipoibd/netdev"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// SetCarrier turns the interface's carrier (LOWER_UP) on or off, as a NIC
// driver does when its link comes and goes: routing daemons, NetworkManager
// and `ip link` then see the port's state instead of a link that is always
// up.
func (d *Device) SetCarrier(on bool) error {
	v := 0
	if on {
		v = 1
	}
	var ioErr error
	// Control, unlike Fd, leaves the descriptor non-blocking.
	err := d.queues[0].rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetPointerInt(int(fd), unix.TUNSETCARRIER, v)
	})
	if err == nil {
		err = ioErr
	}
	if err != nil {
		return fmt.Errorf("tun: %s carrier %v: %w", d.Name(), on, err)
	}
	return nil
}

// stopAddrGen keeps the kernel from making a link-local address of its own
// (a TUN has no hardware address, so it would pick a random one each time):
// the interface's is the one the daemon adds, derived from the port.
func (d *Device) stopAddrGen() error {
	if err := d.nl.LinkSetIP6AddrGenMode(d.link, nl.IN6_ADDR_GEN_MODE_NONE); err != nil {
		return fmt.Errorf("tun: %s addrgenmode none: %w", d.Name(), err)
	}
	return nil
}

// setNoQueue gives the device the noqueue root qdisc before it goes up,
// which otherwise attaches mq with a pfifo_fast for each of a multiqueue
// TUN's 256 transmit queues, each with three rings of txqueuelen pointers
// (80,000 octets at ours, 128 KiB allocated): 96 MiB of kernel memory per
// interface, zeroed under the RTNL lock (a quarter second of CPU each),
// and never used, as the TUN never stops a queue (it drops when its own
// ring, of txqueuelen packets per queue, is full). Opening or taking back
// a TUN replaces whatever qdisc it had.
func (d *Device) setNoQueue() error {
	q := &netlink.GenericQdisc{QdiscType: "noqueue",
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: d.index, Parent: netlink.HANDLE_ROOT}}
	if err := d.nl.QdiscReplace(q); err != nil {
		return fmt.Errorf("tun: %s qdisc noqueue: %w", d.Name(), err)
	}
	return nil
}

// IPv6MinMTU is the smallest link MTU IPv6 runs on (RFC 8200 §5): below
// it the kernel turns IPv6 off on the link, and on again above.
const IPv6MinMTU = netdev.IPv6MinMTU

// withoutIPv6 is ps's IPv4 prefixes.
func withoutIPv6(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is4() {
			out = append(out, p)
		}
	}
	return out
}

// EnsureAddrs adds those of ps the interface does not have (the kernel
// drops IPv6 addresses when the link goes down, and IPv6 altogether while
// its MTU is below 1280) and reports how many it added. IPv6 ones wait
// while the MTU is below 1280; when IPv6 came back, the kernel made it
// afresh, with an addrgenmode and a random link-local of its own, which
// go again: ps's link-local is the only one.
func (d *Device) EnsureAddrs(ps []netip.Prefix) (int, error) {
	link, err := d.nl.LinkByIndex(d.index)
	if err != nil {
		return 0, fmt.Errorf("tun: %s: %w", d.Name(), err)
	}
	if link.Attrs().MTU < IPv6MinMTU {
		ps = withoutIPv6(ps)
	} else if slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Addr().Is6() }) {
		if err := d.stopAddrGen(); err != nil {
			return 0, err
		}
		if err := d.dropForeignLinkLocals(ps); err != nil {
			return 0, err
		}
	}
	have, err := d.Addrs()
	if err != nil {
		return 0, err
	}
	added := 0
	var errs []error
	for _, p := range ps {
		if slices.Contains(have, p) {
			continue
		}
		if err := d.AddAddr(p); err != nil {
			if !errors.Is(err, unix.EEXIST) {
				errs = append(errs, err)
			}
			continue
		}
		added++
	}
	return added, errors.Join(errs...)
}

// dropForeignLinkLocals removes the IPv6 link-local addresses that are not
// in ps: those the kernel made while its addrgenmode was its own.
func (d *Device) dropForeignLinkLocals(ps []netip.Prefix) error {
	have, err := d.Addrs()
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range have {
		if !p.Addr().Is6() || !p.Addr().IsLinkLocalUnicast() || slices.Contains(ps, p) {
			continue
		}
		if err := d.nl.AddrDel(d.link, &netlink.Addr{IPNet: prefixNet(p)}); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			errs = append(errs, fmt.Errorf("tun: %s removing %v: %w", d.Name(), p, err))
		}
	}
	return errors.Join(errs...)
}
