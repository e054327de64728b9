package ipoib

import (
	"net"
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/vishvananda/netlink"
)

// This file follows the interface's link as an operator changes it, and its
// carrier as the port comes and goes:
//   - a new MTU (`ip link set ib0 mtu 9000`) caps every per-destination MTU;
//   - down and up: the kernel removed the link's IPv6 addresses and every
//     route through it, so the --addr addresses, the link-local address and
//     our host routes are put back;
//   - LOWER_UP follows the port (softib: its underlay interface).

// linkChanged applies a link notification for the TUN.
func (c *control) linkChanged(u netlink.LinkUpdate) {
	i := c.i
	a := u.Link.Attrs()
	if a == nil || a.Index != i.tun.Index() {
		return
	}
	republish := false
	if a.MTU > 0 && a.MTU != i.mtu {
		i.log.Info("link MTU changed: per-destination MTUs follow", "from", i.mtu, "to", a.MTU)
		i.mtu = a.MTU
		republish = true
	}
	up := a.Flags&net.FlagUp != 0
	if up && !c.linkUp {
		n, err := i.tun.EnsureAddrs(i.ownAddrs())
		if err != nil {
			i.log.Warn("restoring addresses after link up", "err", err)
		}
		if n > 0 {
			i.log.Info("link up again: addresses restored", "added", n)
		}
		republish = true
	}
	c.linkUp = up
	if republish && up {
		c.republish()
	}
}

// ownAddrs are the addresses the daemon gave the interface: its link-local
// one and --addr.
func (i *Interface) ownAddrs() []netip.Prefix {
	out := append([]netip.Prefix(nil), i.cfg.Addrs...)
	if i.linkLocal.IsValid() {
		out = append(out, i.linkLocal)
	}
	return out
}

// republish sets every resolved neighbor's host route again: mtu.Routes
// compares its MTU with the link's now and takes its source from our
// addresses now.
func (c *control) republish() {
	var es []*neigh.Entry
	var ps []*neigh.Path
	for _, e := range c.i.neigh.All() {
		if p := e.Path(); p != nil {
			es, ps = append(es, e), append(ps, p)
		}
	}
	c.publishAll(es, ps)
}

// followPort sets the carrier from the port's state, when the provider can
// tell it.
func (c *control) followPort() {
	i := c.i
	ps, ok := i.dev.(ib.PortStater)
	if !ok {
		return
	}
	active := ps.PortActive()
	if active == c.carrier {
		return
	}
	if err := i.tun.SetCarrier(active); err != nil {
		i.log.Warn("setting the carrier", "err", err)
		return
	}
	c.carrier = active
	if active {
		i.log.Info("port active: carrier on")
	} else {
		i.log.Warn("port down: carrier off")
	}
}
