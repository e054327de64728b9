package ipoib

import (
	"net/netip"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/mtu"
	"github.com/ipoibd/ipoibd/neigh"
)

// What the neighbor state machine asks for, and the paths the datapath
// reads: UD address handles, published paths and their host routes.

// apply carries out what the neighbor state machine asked for e; old is
// e's link address before the event.
func (c *control) apply(e *neigh.Entry, a neigh.Action, old ib.LinkAddr) {
	i := c.i
	if a.Has(neigh.ActRefuted) {
		i.ctr.inc(impostors)
	}
	if a.Has(neigh.ActResolved) {
		c.resolved(e, old)
	}
	if a.Has(neigh.ActProbe) {
		c.solicit(e)
	}
	if a.Has(neigh.ActFailPending) {
		// Routine (a host down, a typo): counted, answered with ICMP.
		i.log.Debug("neighbor did not answer", "peer_ip", e.IP, "dropped", len(e.Pending))
		for _, p := range e.Pending {
			c.unreachable(p.Slot, p.Len)
		}
		e.Pending = nil
	}
	if a.Has(neigh.ActConnect) {
		c.connect(e)
	}
	if a.Has(neigh.ActForget) {
		if e.State == neigh.Stale && e.Probes >= neigh.MaxProbes {
			c.reachFailed(e.Link.GID) // a live neighbor fell silent
		}
		c.forget(e)
	}
}

// udPath makes the UD path to e's link address.
func (c *control) udPath(e *neigh.Entry) *neigh.Path {
	ah := c.ah(e.Link.GID)
	if ah == nil {
		return nil
	}
	return &neigh.Path{Link: e.Link, AH: ah, MTU: c.i.port.udMTU, Rail: e.State == neigh.Rail}
}

// unicastAH is an address handle and when the control goroutine last
// sent with it.
type unicastAH struct {
	ah   ib.AH
	used time.Time
}

// Address handles of nodes no neighbor is at (those we only answered)
// are closed when unused for ahIdle, once there are more than ahKeep.
const (
	ahKeep = 256
	ahIdle = 5 * time.Second // far beyond any send's completion
)

// ah returns the address handle for gid, making it on first use; on
// InfiniBand (a Subnet) that waits for the SA's path: nil until then.
func (c *control) ah(gid ib.GID) ib.AH {
	u := c.ahs[gid]
	if u == nil {
		attr := ib.AHAttr{DestGID: gid}
		if c.subnet != nil {
			p, ok := c.unicastPath(gid)
			if !ok {
				return nil
			}
			attr.Path = p.AH
		}
		ah, err := c.i.dev.CreateAH(attr)
		if err != nil {
			c.i.log.Warn("address handle", "gid", gid, "err", err)
			return nil
		}
		u = &unicastAH{ah: ah}
		c.ahs[gid] = u
	}
	u.used = c.now
	return u.ah
}

// reapAHs closes the idle address handles no neighbor's path holds: the
// nodes we only answered (whose underlay address a sender may forge).
func (c *control) reapAHs() {
	kept := c.retired[:0]
	for _, u := range c.retired {
		if c.now.Sub(u.used) >= ahIdle {
			_ = u.ah.Close()
		} else {
			kept = append(kept, u)
		}
	}
	c.retired = kept
	if len(c.ahs) <= ahKeep {
		return
	}
	held := map[ib.GID]bool{}
	for _, e := range c.i.neigh.All() {
		if p := e.Path(); p != nil {
			held[p.Link.GID] = true
		}
		held[e.Link.GID] = true
	}
	for gid, u := range c.ahs {
		if held[gid] {
			u.used = c.now // idle counts from when no path holds it
			continue
		}
		if c.now.Sub(u.used) >= ahIdle {
			_ = u.ah.Close()
			delete(c.ahs, gid)
		}
	}
}

// heard applies a reply or an announcement for ip, which came from the
// UD source from, to its entry, if it has one (neigh.Entry.Heard: a live
// entry is not redirected by one packet, unless the packet came from the
// claimed QPN on the entry's own port: a restart, Entry.Restarted).
func (c *control) heard(ip netip.Addr, link, from ib.LinkAddr) {
	if e := c.i.neigh.Get(ip); e != nil {
		c.hear(e, link, from)
	}
}

// hear applies a claim of link for e that came from from. Where ports
// carry several interfaces (Config.SharedGIDs), a claim from another QPN
// of e's port is another interface's, not a restart: it is checked as any.
func (c *control) hear(e *neigh.Entry, link, from ib.LinkAddr) {
	old := e.Link
	if from.GID != (ib.GID{}) && from.SameNode(link) && !c.i.cfg.SharedGIDs {
		c.apply(e, e.Restarted(link, c.now), old)
		return
	}
	c.apply(e, e.Heard(link, c.now), old)
}

// heardReplacing applies an announcement of ip at link, from link itself,
// that names the link address it replaces (Config.Replaces: its daemon
// restarted). When that is exactly e's, on link's port, the peer
// restarted and the claim wins at once (Entry.Restarted), where ports
// carry several interfaces too: another interface on the port could not
// name e's QPN, which only e's daemon knew. Otherwise it is heard as any.
func (c *control) heardReplacing(ip netip.Addr, link, from, replaced ib.LinkAddr) {
	e := c.i.neigh.Get(ip)
	if e == nil {
		return
	}
	if from.GID != (ib.GID{}) && from.SameNode(link) && replaced.SameNode(e.Link) {
		old := e.Link
		switch {
		case replaced.GID == link.GID:
			c.apply(e, e.Restarted(link, c.now), old)
			return
		case e.Sibling.SameNode(link):
			// The peer moved to the other port it had named (failover).
			c.i.ctr.inc(neighMovedToSibling)
			c.apply(e, e.MovedToSibling(link, c.now), old)
			return
		}
	}
	c.hear(e, link, from)
}

// heardSibling notes what a packet from ip's node at link said of its
// other port (neigh.Entry.Sibling; zero when it named none: it has no
// other port up): only when the packet came from link itself (its UD
// source), so that no one but the node names where it may move.
func (c *control) heardSibling(ip netip.Addr, link, from, sibling ib.LinkAddr) {
	if from.GID != (ib.GID{}) && from.SameNode(link) {
		c.i.neigh.NoteSibling(ip, link, sibling)
	}
}

// learnFrom takes what a solicitation for one of our addresses tells: its
// sender ip is at link. An entry in use hears it; otherwise it becomes a
// candidate, bounded and rate-limited per node (neigh/learn.go), which costs
// no route and no log line until our traffic uses it.
func (c *control) learnFrom(ip netip.Addr, link, from ib.LinkAddr) {
	i := c.i
	if e := i.neigh.Get(ip); e != nil {
		c.hear(e, link, from)
		return
	}
	switch i.neigh.Learn(ip, link, from.GID, c.now) {
	case neigh.LearnedNew:
		i.ctr.inc(learnCandidates)
	case neigh.LearnedEvicted:
		i.ctr.inc(learnCandidates)
		i.ctr.inc(learnEvicted)
	case neigh.LearnedLimited:
		i.ctr.inc(learnLimited)
	}
}

// resolved publishes the path to e's new link address (old: the one
// before) and sends what waited for it.
func (c *control) resolved(e *neigh.Entry, old ib.LinkAddr) {
	link := e.Link
	if old.GID != (ib.GID{}) && !old.SameNode(link) && c.i.mgr != nil {
		c.i.mgr.Disconnect(c.now, old, "neighbor moved")
	}
	p := c.udPath(e)
	if p == nil {
		return
	}
	if c.i.mgr != nil && !c.i.datagram.Load() {
		if conn := c.i.mgr.SendConnection(link); conn != nil {
			p.QP, p.MTU, p.Packets, p.Bytes = conn.QP, conn.MTU, &conn.Traffic.TxPackets, &conn.Traffic.TxBytes
		}
	}
	// What waits goes first: the host route publish installs costs a
	// netlink round trip.
	e.SetPath(p)
	if len(e.Pending) > 0 {
		c.connect(e)
	}
	c.publish(e, p)
}

// publish gives the datapath a new path to e and installs the host route
// that tells the kernel its MTU (unless the operator set one by hand).
func (c *control) publish(e *neigh.Entry, p *neigh.Path) {
	e.SetPath(p)
	if p == nil {
		return
	}
	// Set drops the route where p.MTU is not below the link's MTU, which
	// it reads from the kernel: a smaller link MTU set by the operator
	// caps every path.
	installed, err := c.i.routes.Set(e.IP, p.MTU)
	c.routeSet(e.IP, p.MTU, installed, err)
}

// publishAll is publish for many neighbors with one look at the routing
// table: thousands at once (a peer with many addresses left, our
// addresses or the link MTU changed) cost seconds with a look each.
func (c *control) publishAll(es []*neigh.Entry, ps []*neigh.Path) {
	var dests []mtu.Dest
	var ips []netip.Addr
	for k, e := range es {
		e.SetPath(ps[k])
		if ps[k] != nil {
			dests = append(dests, mtu.Dest{Addr: e.IP, MTU: ps[k].MTU})
			ips = append(ips, e.IP)
		}
	}
	if len(dests) == 0 {
		return
	}
	installed, errs := c.i.routes.SetMany(dests)
	for k, d := range dests {
		c.routeSet(ips[k], d.MTU, installed[k], errs[k])
	}
}

func (c *control) routeSet(dst netip.Addr, mtu int, installed bool, err error) {
	switch {
	case err != nil:
		c.i.log.Warn("per-destination MTU route", "dst", dst, "mtu", mtu, "err", err)
	case !installed:
		c.i.log.Debug("operator route left alone", "dst", dst)
	}
}

// forget removes a neighbor and its connections.
func (c *control) forget(e *neigh.Entry) {
	for _, p := range c.i.neigh.Delete(e) {
		c.i.drop(p.Slot, txDropNoNeigh)
	}
	// A Rail entry installed no route: the active port's entry did.
	if err := c.i.routes.Remove(e.IP); e.State != neigh.Rail && err != nil {
		c.i.log.Warn("removing a route", "dst", e.IP, "err", err)
	}
	if c.i.mgr != nil && e.Link.GID != (ib.GID{}) && len(c.i.neigh.ByLink(e.Link)) == 0 {
		c.i.mgr.Disconnect(c.now, e.Link, "neighbor expired")
	}
}

// FlushNeighbors forgets the neighbor ip, or every neighbor when ip is
// not valid, as `ip neigh flush` does: the next packet resolves it again
// (its connection goes, what waited for it is dropped and counted). It
// reports how many were forgotten.
func (i *Interface) FlushNeighbors(ip netip.Addr) int {
	n := 0
	i.do(func() {
		c := &i.ctl
		for _, e := range i.neigh.All() {
			if !ip.IsValid() || e.IP == ip {
				c.forget(e)
				n++
			}
		}
		if n > 0 {
			i.log.Info("neighbors flushed", "count", n, "ip", ipOrAll(ip))
		}
	})
	return n
}

func ipOrAll(ip netip.Addr) string {
	if !ip.IsValid() {
		return "all"
	}
	return ip.String()
}
