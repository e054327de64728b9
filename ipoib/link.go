package ipoib

import (
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/netdev"
)

// This file follows the interface's link as an operator changes it, and its
// carrier as the port comes and goes:
//   - a new MTU (`ip link set ib0 mtu 9000`) caps every per-destination MTU;
//   - down and up: the kernel removed the link's IPv6 addresses and every
//     route through it, so the --addr addresses, the link-local address and
//     our host routes are put back;
//   - LOWER_UP follows the port (softib: its underlay interface).

// followLink applies one change Netdev.Watch reports. When a kind of
// change is no longer reported: addresses are read on every tick instead,
// next hops are no longer cached, and the MTU and up/down no longer
// followed.
func (c *control) followLink(u LinkEvent) {
	i := c.i
	switch u.Change {
	case AddrsChanged:
		c.refreshAddrs()
		c.keepLinkLocal()
	case LinkState:
		c.linkChanged(u)
	case LinkGone:
		i.markLost(errLinkDeleted)
	case RoutesChanged:
		i.neigh.ClearVia()
	case AddrsUnwatched:
		i.log.Warn("address changes are not followed; polling addresses", "err", u.Err)
		c.pollAddrs = true
	case LinkUnwatched:
		i.log.Warn("link changes (MTU, down/up) are not followed", "err", u.Err)
	case RoutesUnwatched:
		i.log.Warn("route changes are not followed; next hops are looked up per packet", "err", u.Err)
		c.noViaCache = true
		i.neigh.ClearVia()
	}
}

// linkChanged applies a change of the link's MTU or up/down state.
func (c *control) linkChanged(u LinkEvent) {
	i := c.i
	if u.Name != "" && u.Name != i.Name() {
		old := i.Name()
		i.name.Store(&u.Name)
		i.log.Info("interface renamed", "from", old)
		if i.cfg.Renamed != nil {
			i.cfg.Renamed(old, u.Name)
		}
	}
	republish, ipv6Back := false, false
	if u.MTU > 0 && u.MTU != i.mtu {
		i.log.Info("link MTU changed: per-destination MTUs follow", "from", i.mtu, "to", u.MTU)
		ipv6Back = c.ipv6Follows(i.mtu, u.MTU)
		i.mtu = u.MTU
		republish = true
	}
	up := u.Up
	if up && ipv6Back && c.linkUp {
		c.restoreOwnAddrs("IPv6 on again: the MTU is " + strconv.Itoa(u.MTU))
	}
	if up && !c.linkUp {
		c.restoreOwnAddrs("link up again")
		republish = true
	}
	c.linkUp = up
	if republish && up {
		c.republish()
	}
}

// ipv6Follows says what a new link MTU does to our IPv6 addresses: the
// kernel takes IPv6 off a link below 1280 octets (said here, once) and
// makes it afresh above, when back reports that ours must be put back
// (restoreOwnAddrs). Every MTU change goes through it: the operator's and
// a mode switch's.
func (c *control) ipv6Follows(from, to int) (back bool) {
	i := c.i
	if !hasIPv6(i.cfg.Addrs) && !i.port.linkLocal.IsValid() {
		return false
	}
	switch {
	case to < netdev.IPv6MinMTU && from >= netdev.IPv6MinMTU:
		i.log.Warn("IPv6 off on this link until its MTU is at least 1280: its IPv6 addresses come back then", "mtu", to)
	case to >= netdev.IPv6MinMTU && from < netdev.IPv6MinMTU:
		return true
	}
	return false
}

// restoreOwnAddrs puts back those of our own addresses the interface lost
// (the kernel drops IPv6 addresses when a link goes down); why says when.
func (c *control) restoreOwnAddrs(why string) {
	i := c.i
	n, err := i.netdev.EnsureAddrs(i.ownAddrs())
	if err != nil {
		i.log.Warn("restoring addresses", "when", why, "err", err)
	}
	if n > 0 {
		i.log.Info("addresses restored", "when", why, "added", n)
	}
}

// linkLocalKept is how long after start our link-local address is put
// back when something removes it. systemd-networkd, configuring a new
// link, may find its addr_gen_mode not yet the one its .network asks for
// (it read the link before we set it), set it, and then drop the
// link-local addresses the link has: ours, made a moment before (seen in
// about one in six test bed boots, with no down and up of the link to
// follow). Later, a removal is an operator's or a network manager's
// choice, and stands: NetworkManager puts its own in place of ours.
const linkLocalKept = 5 * time.Second

// keepLinkLocal puts our link-local address back if it is gone while the
// link is new (linkLocalKept).
func (c *control) keepLinkLocal() {
	i := c.i
	ll := i.port.linkLocal
	if !ll.IsValid() || !c.linkUp || i.mtu < netdev.IPv6MinMTU || !c.now.Before(c.llKeptUntil) || slices.Contains(c.addrs, ll) {
		return
	}
	n, err := i.netdev.EnsureAddrs([]netip.Prefix{ll})
	if err != nil {
		i.log.Warn("putting back the link-local address", "addr", ll, "err", err)
		return
	}
	if n > 0 {
		i.log.Info("link-local address put back: removed while the link was new (a network manager configuring it)", "addr", ll)
		c.refreshAddrs()
	}
}

// ownAddrs are the addresses the daemon gave the interface: its link-local
// one and --addr.
func (i *Interface) ownAddrs() []netip.Prefix {
	out := append([]netip.Prefix(nil), i.cfg.Addrs...)
	if i.port.linkLocal.IsValid() {
		out = append(out, i.port.linkLocal)
	}
	return out
}

// republish sets every resolved neighbor's host route again: tun.Routes
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

// readyUDAgain makes the UD QP ready again when the port comes back and
// finds it in ERROR: a send while the port was down failed, and rxe moves
// a QP to ERROR on any failed send (the kernel's ipoib puts a UD QP the
// adapter stopped back to RTS too, ipoib_qp_state_validate_work). It goes
// through RESET to RTS, keeping its number (our link address), before the
// carrier comes on: over several ports, the carrier is what a fail-back
// to this port waits for, and its announcements leave by this QP.
func (c *control) readyUDAgain() {
	i := c.i
	if i.udQP.State() != ib.StateError {
		return
	}
	i.log.Warn("the port is active again with the UD QP in error: making it ready again")
	if err := c.reinitUD(i.qKey()); err != nil {
		i.log.Error("making the UD QP ready again after the port came back failed; restart the interface", "err", err)
	}
}

// followPort sets the carrier from the port's state, when the provider can
// tell it.
func (c *control) followPort() {
	i := c.i
	ps := i.caps.PortState
	if ps == nil {
		return
	}
	active := ps.PortActive()
	if active == c.carrier {
		return
	}
	if active {
		c.readyUDAgain()
	}
	if err := i.netdev.SetCarrier(active); err != nil {
		i.log.Warn("setting the carrier", "err", err)
		return
	}
	c.carrier = active
	if !active {
		i.log.Warn("port down: carrier off")
		c.portWasDown = true
		return
	}
	i.log.Info("port active: carrier on")
	if c.portWasDown {
		// The SM may have dropped our memberships while the port was
		// down, and raise no client reregister: the kernel's ipoib
		// flushes and joins again on PORT_ACTIVE too.
		c.portWasDown = false
		c.askSubnetAgain("the port is active again")
	}
}
