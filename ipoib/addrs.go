package ipoib

import (
	"net/netip"
	"slices"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/sa"
)

// Our addresses and the multicast groups the kernel joined: what we answer
// for, what is on link, and the groups the UD QP must be in.

// refreshAddrs reads our addresses from the kernel (the operator may add
// some with `ip addr`), joins the IPv6 groups they need and announces the
// new ones.
func (c *control) refreshAddrs() {
	i := c.i
	addrs, err := i.netdev.Addrs()
	if err != nil {
		i.log.Warn("reading addresses", "err", err)
		return
	}
	var bcasts []netip.Addr
	for _, p := range addrs {
		if p.Addr().Is4() && p.Bits() < 31 {
			bcasts = append(bcasts, lastAddr(p))
		}
	}
	c.broadcasts.Store(&bcasts)
	old := c.addrs
	c.addrs = addrs
	c.syncGroups()
	for _, p := range addrs {
		if !slices.Contains(old, p) {
			c.announce(p.Addr())
		}
	}
	if !slices.Equal(old, addrs) {
		// Host routes' source addresses follow ours.
		c.republish()
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// syncGroups makes the UD QP a member of exactly the groups the interface
// needs: IPv6 all-nodes and our solicited-node groups, and every group the
// kernel joined on the interface for its sockets (read from /proc).
func (c *control) syncGroups() {
	i := c.i
	c.groupsAt = c.now
	want := map[ib.GID]netip.Addr{}
	add := func(group netip.Addr) {
		if mgid, err := encap.MulticastMGID(group, i.port.pkey, encap.LinkLocal); err == nil {
			want[mgid] = group
		}
	}
	if hasIPv6(c.addrs) {
		add(allNodes)
	}
	for _, p := range c.addrs {
		if p.Addr().Is6() {
			add(neigh.SolicitedNode(p.Addr()))
		}
	}
	kernel, err := i.netdev.Groups()
	if err != nil {
		i.log.Warn("reading the kernel's multicast groups", "err", err)
	}
	for _, g := range kernel {
		add(g)
	}
	c.wantGroups = want
	for mgid, group := range want {
		if _, ok := c.groups[mgid]; ok {
			continue
		}
		if s := c.subnet; s != nil {
			// On InfiniBand the SA's join comes first; joined attaches.
			s.ask(groupJob{group: group, mgid: mgid, state: sa.FullMember})
			continue
		}
		if err := i.dev.AttachMulticast(i.udQP, mgid, 0); err != nil {
			i.log.Warn("joining a multicast group", "group", group, "err", err)
			continue
		}
		c.groups[mgid] = group
	}
	for mgid, group := range c.groups {
		if _, ok := want[mgid]; !ok {
			if err := i.dev.DetachMulticast(i.udQP, mgid); err != nil {
				i.log.Warn("leaving a multicast group", "group", group, "err", err)
			}
			delete(c.groups, mgid)
			if s := c.subnet; s != nil {
				delete(c.groupRecs, mgid)
				s.ask(groupJob{group: group, mgid: mgid, state: sa.FullMember, leave: true})
			}
		}
	}
}

// isLocal reports whether ip is one of our addresses.
func (c *control) isLocal(ip netip.Addr) bool {
	for _, p := range c.addrs {
		if p.Addr() == ip {
			return true
		}
	}
	return false
}

// onLink reports whether ip is in one of our subnets, and the address of
// ours to speak from.
func (c *control) onLink(ip netip.Addr) (netip.Addr, bool) {
	for _, p := range c.addrs {
		if p.Contains(ip) {
			return p.Addr(), true
		}
	}
	return netip.Addr{}, false
}
