package ipoib

import (
	"log/slog"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/mtu"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/ud"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Timers of the control goroutine (resolution's own are neigh's).
const (
	tickInterval = 100 * time.Millisecond
	// groupSyncInterval is how often the kernel's multicast memberships are
	// read: TUN devices get no notice when a socket joins a group.
	groupSyncInterval = time.Second
	// dropReportInterval rate-limits the log lines about dropped packets:
	// one line per cause and interval, with the count.
	dropReportInterval = 10 * time.Second
	connectBackoff     = time.Second
	// cmRearm is how often at most the connection service's next deadline
	// is asked for (armCM).
	cmRearm    = 20 * time.Millisecond
	maxBackoff = 30 * time.Second
	// connCheckInterval is how often live connections' QPs are checked
	// for the error state (an idle connection posts nothing that could
	// fail), at most connCheckBatch of them each time.
	connCheckInterval = time.Second
	connCheckBatch    = 256
	// maxUrgent bounds the urgent events served before one solicitation,
	// so that our own traffic cannot starve the answers others wait for.
	maxUrgent = 64
)

// control is the state the control goroutine owns.
type control struct {
	i          *Interface
	addrs      []netip.Prefix
	broadcasts atomic.Pointer[[]netip.Addr] // read by the datapath
	groups     map[ib.GID]netip.Addr        // IP multicast groups the UD QP joined, by MGID
	groupsAt   time.Time                    // when the kernel's groups were last read
	ahs        map[ib.GID]*unicastAH        // unicast address handles
	connsAt    time.Time                    // when connections' QPs were last checked
	connsEvery time.Duration                // connCheckInterval (tests change it)
	backoff    map[ib.LinkAddr]backoff      // peers that refused or failed a connection
	wr         [1]ib.SendWR
	wc         [rxBatch]ib.Completion
	now        time.Time
	cmAsked    time.Time           // when armCM last asked the manager for its deadline
	unreach    tokenBucket         // limits the ICMP unreachable errors (unreach.go)
	dropsSeen  [numCounters]uint64 // counter values at the last drop report
	dropsAt    time.Time
	pollAddrs  bool // the address subscription failed: read them each tick
	linkUp     bool // the TUN is administratively up (linkChanged)
	carrier    bool // the TUN's carrier is on (followPort)
	noViaCache bool // the route subscription failed: do not cache next hops
}

type backoff struct {
	until time.Time
	wait  time.Duration
}

func (c *control) init(i *Interface) {
	c.i = i
	c.groups = map[ib.GID]netip.Addr{}
	c.ahs = map[ib.GID]*unicastAH{}
	c.backoff = map[ib.LinkAddr]backoff{}
	c.connsEvery = connCheckInterval
	empty := []netip.Addr{}
	c.broadcasts.Store(&empty)
	c.now = time.Now()
	c.linkUp, c.carrier = true, true // as tun.Open leaves the device
	c.refreshAddrs()
}

func (i *Interface) controlLoop() {
	c := &i.ctl
	tick := time.NewTicker(tickInterval)
	defer tick.Stop()
	addrUpdates := make(chan netlink.AddrUpdate, 16)
	linkUpdates := make(chan netlink.LinkUpdate, 16)
	routeUpdates := make(chan netlink.RouteUpdate, 64)
	stop := make(chan struct{})
	defer close(stop)
	// Subscriptions in the TUN's namespace, whatever thread runs this.
	// Without --netns it is the daemon's own, and entering it (setns)
	// would need CAP_SYS_ADMIN, which the service unit does not grant.
	var ns *netns.NsHandle
	if i.cfg.Netns != "" {
		ns = &i.netns
	}
	if err := netlink.AddrSubscribeWithOptions(addrUpdates, stop, netlink.AddrSubscribeOptions{Namespace: ns}); err != nil {
		i.log.Warn("address changes will not be followed", "err", err)
	}
	if err := netlink.LinkSubscribeWithOptions(linkUpdates, stop, netlink.LinkSubscribeOptions{Namespace: ns}); err != nil {
		i.log.Warn("link changes (MTU, down/up) will not be followed", "err", err)
	}
	if err := netlink.RouteSubscribeWithOptions(routeUpdates, stop, netlink.RouteSubscribeOptions{Namespace: ns}); err != nil {
		i.log.Warn("route changes will not be followed", "err", err)
	}
	// The connection service: its input (MADs, the kernel CM's events)
	// wakes the loop, and its timers run when its Next says.
	var cmWake <-chan struct{}
	cmTimer := time.NewTimer(time.Hour)
	cmTimer.Stop()
	defer cmTimer.Stop()
	var cmAt time.Time // when cmTimer fires; zero: stopped
	if i.mgr != nil {
		cmWake = i.mgr.Wake()
	}
	for {
		if i.mgr != nil {
			c.armCM(cmTimer, &cmAt)
		}
		select {
		case <-i.done:
			return
		case f := <-i.requests:
			c.now = time.Now()
			f()
		case p := <-i.pending:
			c.now = time.Now()
			c.handlePending(p)
		case e := <-i.wantConn:
			c.now = time.Now()
			e.WantConn.Store(false)
			c.connect(e)
		case m := <-i.rxReply:
			c.now = time.Now()
			c.handleControlPacket(&m)
		case m := <-i.rxSolicit:
			// Learning waits for what resolution of traffic needs.
			c.urgent()
			c.now = time.Now()
			c.handleControlPacket(&m)
		case f := <-i.sendFail:
			c.now = time.Now()
			c.sendFailed(f)
		case <-cmWake:
			c.now = time.Now()
			i.mgr.Poll(c.now)
		case now := <-cmTimer.C:
			c.now, cmAt = now, time.Time{}
			i.mgr.Expire(c.now)
		case u, ok := <-addrUpdates:
			if !ok {
				// netlink gave up on the subscription: read the
				// addresses on every tick instead.
				i.log.Warn("address subscription ended; polling addresses")
				addrUpdates, c.pollAddrs = nil, true
				continue
			}
			if u.LinkIndex == i.tun.Index() {
				c.refreshAddrs()
			}
		case u, ok := <-linkUpdates:
			if !ok {
				i.log.Warn("link subscription ended; MTU and down/up are no longer followed")
				linkUpdates = nil
				continue
			}
			c.now = time.Now()
			c.linkChanged(u)
		case u, ok := <-routeUpdates:
			// Our own MTU host routes change nothing about next hops. If
			// the subscription ends, next hops are no longer cached.
			if !ok {
				i.log.Warn("route subscription ended; next hops are looked up per packet")
				routeUpdates, c.noViaCache = nil, true
				continue
			}
			if u.Protocol != mtu.Protocol {
				i.neigh.ClearVia()
			}
		case now := <-tick.C:
			c.now = now
			c.tick()
		}
	}
}

// urgent serves, without waiting, what goes before a solicitation: the
// control socket's requests, packets waiting for resolution, replies to our
// requests, failed sends and wanted connections.
func (c *control) urgent() {
	i := c.i
	for range maxUrgent {
		select {
		case f := <-i.requests:
			c.now = time.Now()
			f()
		case p := <-i.pending:
			c.now = time.Now()
			c.handlePending(p)
		case m := <-i.rxReply:
			c.now = time.Now()
			c.handleControlPacket(&m)
		case f := <-i.sendFail:
			c.now = time.Now()
			c.sendFailed(f)
		case e := <-i.wantConn:
			c.now = time.Now()
			e.WantConn.Store(false)
			c.connect(e)
		default:
			return
		}
	}
}

// armCM sets the timer to the connection service's next deadline (the
// manager's idle reaping included) when it changed. Next costs a pass over
// the connections, so it is asked at most once per cmRearm: in between,
// the timer is only brought forward to the end of that period, when the
// deadline is asked again (a burst of MADs at 10,000 connections must not
// cost a pass each).
func (c *control) armCM(t *time.Timer, at *time.Time) {
	now := time.Now()
	if now.Sub(c.cmAsked) < cmRearm {
		if soon := c.cmAsked.Add(cmRearm); at.IsZero() || at.After(soon) {
			*at = soon
			t.Reset(soon.Sub(now))
		}
		return
	}
	c.cmAsked = now
	next := c.i.mgr.Next()
	if next.Equal(*at) {
		return
	}
	*at = next
	if next.IsZero() {
		t.Stop()
		return
	}
	t.Reset(next.Sub(now))
}

// refreshAddrs reads our addresses from the kernel (the operator may add
// some with `ip addr`), joins the IPv6 groups they need and announces the
// new ones.
func (c *control) refreshAddrs() {
	i := c.i
	addrs, err := i.tun.Addrs()
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
		if mgid, err := ud.MulticastMGID(group, i.pkey, ud.LinkLocal); err == nil {
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
	kernel, err := i.kernelGroups()
	if err != nil {
		i.log.Warn("reading the kernel's multicast groups", "err", err)
	}
	for _, g := range kernel {
		add(g)
	}
	for mgid, group := range want {
		if _, ok := c.groups[mgid]; ok {
			continue
		}
		if err := i.dev.AttachMulticast(i.udQP, mgid); err != nil {
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

// handlePending takes a packet the datapath could not send: it is queued on
// its neighbor, and resolution or a connection is started.
func (c *control) handlePending(p pendingPacket) {
	i := c.i
	hop, ok := c.nextHop(p.dst)
	if !ok {
		i.drop(p.slot, txDropNoRoute)
		return
	}
	e, act := i.neigh.Create(hop, c.now)
	if e == nil {
		i.drop(p.slot, txDropNoNeigh)
		return
	}
	if act != 0 {
		// Made from what a solicitation taught: now it costs a route.
		i.ctr.inc(learnUsed)
		c.apply(e, act, ib.LinkAddr{})
	}
	if hop != p.dst && !c.noViaCache && !i.neigh.SetVia(p.dst, e) {
		i.drop(p.slot, txDropNoNeigh)
		return
	}
	if c.failedRecently(e) {
		c.unreachable(p.slot, p.n)
		return
	}
	if path := e.Path(); path != nil {
		// Published since the datapath looked: send it now if it can go.
		if c.send(p.slot, p.n, path) {
			return
		}
	}
	if !i.neigh.Queue(e, neigh.Pending{Slot: p.slot, Len: p.n}) {
		i.drop(p.slot, txDropQueueFull)
		return
	}
	i.ctr.inc(txQueued)
	c.apply(e, e.Wanted(c.now), e.Link)
}

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
		c.forget(e)
	}
}

// nextHop returns the neighbor a packet to dst goes to: dst itself when it
// is in one of our subnets, else the gateway of the kernel's route, which
// must be a neighbor on this interface.
func (c *control) nextHop(dst netip.Addr) (netip.Addr, bool) {
	if _, ok := c.onLink(dst); ok {
		return dst, true
	}
	routes, err := c.i.tun.Netlink().RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 {
		return netip.Addr{}, false
	}
	r := routes[0]
	gw, ok := netip.AddrFromSlice(r.Gw)
	if !ok || r.LinkIndex != c.i.tun.Index() {
		return netip.Addr{}, false
	}
	gw = gw.Unmap()
	if _, ok := c.onLink(gw); !ok {
		return netip.Addr{}, false
	}
	return gw, true
}

// send posts a queued packet on path if it fits; false leaves it queued.
func (c *control) send(slot uint32, n int, path *neigh.Path) bool {
	i := c.i
	ipLen := n - ud.HeaderLen
	switch {
	case path.QP != nil && ipLen <= path.MTU:
		i.ctr.inc(txConnected)
		path.Packets.Add(1)
		c.wr[0] = ib.SendWR{ID: uint64(slot), SGE: i.slots.sge(slot, n)}
		if _, err := path.QP.PostSend(c.wr[:]); err != nil {
			i.drop(slot, txDropPost)
			i.connSendFailed(path.QP.Num(), ib.WCSuccess, false)
		}
		return true
	case ipLen <= i.udMTU:
		i.ctr.inc(txUD)
		i.postUD(slot, n, path.AH, path.Link.QPN, &c.wr)
		return true
	}
	return false
}

// flush sends what waits on e, keeping only what waits for a connection
// that is still coming.
func (c *control) flush(e *neigh.Entry) { c.sendPending(e, c.connecting(e)) }

// sendPending sends what waits on e and fits its path; the rest waits (a
// connection is coming) or is answered "too big".
func (c *control) sendPending(e *neigh.Entry, waiting bool) {
	path := e.Path()
	if path == nil {
		return
	}
	kept := e.Pending[:0]
	for _, p := range e.Pending {
		switch {
		case c.send(p.Slot, p.Len, path):
		case waiting:
			kept = append(kept, p)
		default:
			c.i.tooBig(p.Slot, p.Len-ud.HeaderLen, path.MTU)
		}
	}
	e.Pending = kept
}

// connecting reports whether a connection to e's peer is being set up.
func (c *control) connecting(e *neigh.Entry) bool {
	return c.i.mgr != nil && c.i.mgr.Connecting(e.Link)
}

// connect starts a connection to a resolved neighbor, unless the interface
// is in datagram mode, the peer has no connected mode, or it recently
// refused one.
func (c *control) connect(e *neigh.Entry) {
	i := c.i
	if !e.Resolved() {
		return
	}
	if i.mgr == nil || i.datagram.Load() {
		c.flush(e) // no connection will come: what waits goes over UD
		return
	}
	if b, ok := c.backoff[ib.LinkAddr{QPN: e.Link.QPN, GID: e.Link.GID}]; ok && c.now.Before(b.until) {
		c.flush(e)
		return
	}
	// What fits UD goes ahead of the REQ: the first packet to a peer does
	// not wait for connection setup.
	c.sendPending(e, true)
	if _, err := i.mgr.Connect(c.now, e.Link); err != nil {
		// No QP, the connection limit or the service failing: ours to fix.
		i.log.Warn("connecting", "peer", e.Link, "peer_ip", e.IP, "err", err)
	}
	c.flush(e)
}

// connUp publishes a connection as the path of every neighbor on its peer.
func (i *Interface) connUp(conn *cm.Connection) {
	c := &i.ctl
	delete(c.backoff, ib.LinkAddr{QPN: conn.Peer.QPN, GID: conn.Peer.GID})
	for _, e := range i.neigh.ByClaim(conn.Peer) {
		old := e.Link
		c.apply(e, e.Proven(conn.Peer, c.now), old)
	}
	es := i.neigh.ByLink(conn.Peer)
	for _, e := range es {
		p := c.udPath(e.Link)
		if p == nil || i.datagram.Load() { // datagram mode: a peer's connection carries only its sends
			continue
		}
		p.QP, p.MTU, p.Packets = conn.QP, conn.MTU, &conn.Packets
		c.publish(e, p)
		c.flush(e)
	}
	i.log.Info("connection up", "peer", conn.Peer, "peer_ip", ipList(es), "qpn", conn.QP.Num(), "mtu", conn.MTU)
}

// connDown puts the neighbors of a lost connection back on UD.
func (i *Interface) connDown(conn *cm.Connection, reason string) {
	c := &i.ctl
	es := i.neigh.ByLink(conn.Peer)
	for _, e := range es {
		if p := e.Path(); p != nil && p.QP == conn.QP {
			c.publish(e, c.udPath(e.Link))
		}
	}
	i.log.Info("connection down", "peer", conn.Peer, "peer_ip", ipList(es), "qpn", conn.QP.Num(), "reason", reason)
}

// connRefused backs off from a peer that refused or lost a connection and
// checks its neighbors again: it may have restarted with a new address.
func (i *Interface) connRefused(peer ib.LinkAddr, reason string) {
	c := &i.ctl
	key := ib.LinkAddr{QPN: peer.QPN, GID: peer.GID}
	b := c.backoff[key]
	b.wait = min(max(2*b.wait, connectBackoff), maxBackoff)
	b.until = c.now.Add(b.wait)
	c.backoff[key] = b
	es := i.neigh.ByLink(peer)
	for _, e := range es {
		c.apply(e, e.Suspect(c.now), e.Link)
		c.flush(e)
	}
	// A REJ or a timeout is the peer's doing: routine, counted by cm.
	i.log.Info("connection refused", "peer", peer, "peer_ip", ipList(es), "reason", reason, "retry_in", b.wait)
}

// udPath makes the UD path to a link address.
func (c *control) udPath(link ib.LinkAddr) *neigh.Path {
	ah := c.ah(link.GID)
	if ah == nil {
		return nil
	}
	return &neigh.Path{Link: link, AH: ah, MTU: c.i.udMTU}
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

// ah returns the address handle for gid, making it on first use.
func (c *control) ah(gid ib.GID) ib.AH {
	u := c.ahs[gid]
	if u == nil {
		ah, err := c.i.dev.CreateAH(ib.AHAttr{DestGID: gid})
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

// heard applies a reply or an announcement for ip to its entry, if it has
// one (neigh.Entry.Heard: a live entry is not redirected by one packet).
func (c *control) heard(ip netip.Addr, link ib.LinkAddr) {
	if e := c.i.neigh.Get(ip); e != nil {
		old := e.Link
		c.apply(e, e.Heard(link, c.now), old)
	}
}

// learnFrom takes what a solicitation for one of our addresses tells: its
// sender ip is at link. An entry in use hears it; otherwise it becomes a
// candidate, bounded and rate-limited per node (neigh/learn.go), which costs
// no route and no log line until our traffic uses it.
func (c *control) learnFrom(ip netip.Addr, link, from ib.LinkAddr) {
	i := c.i
	if e := i.neigh.Get(ip); e != nil {
		old := e.Link
		c.apply(e, e.Heard(link, c.now), old)
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
	p := c.udPath(link)
	if p == nil {
		return
	}
	if c.i.mgr != nil && !c.i.datagram.Load() {
		if conn := c.i.mgr.SendConnection(link); conn != nil {
			p.QP, p.MTU, p.Packets = conn.QP, conn.MTU, &conn.Packets
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
	switch {
	case err != nil:
		c.i.log.Warn("per-destination MTU route", "dst", e.IP, "mtu", p.MTU, "err", err)
	case !installed:
		c.i.log.Debug("operator route left alone", "dst", e.IP)
	}
}

// tick runs the neighbor timers (the connection service has its own timer).
func (c *control) tick() {
	i := c.i
	// Completions of an idle interface (its TUN reader sleeps in read):
	// failures must not wait for the next packet.
	i.reapSends(&c.wc)
	if c.now.Sub(c.dropsAt) >= dropReportInterval {
		c.reportDrops()
	}
	if c.now.Sub(c.groupsAt) >= groupSyncInterval {
		if c.pollAddrs {
			c.refreshAddrs()
		}
		c.syncGroups()
		c.reapAHs()
		c.followPort()
	}
	if c.now.Sub(c.connsAt) >= c.connsEvery {
		c.checkConns(connCheckBatch)
	}
	for _, e := range i.neigh.All() {
		old := e.Link
		if a := e.Tick(c.now); a != 0 {
			c.apply(e, a, old)
		}
	}
	i.logs.flush(c.now)
}

// reportDrops logs, once per interval, every drop and error counter that
// grew, so bad input shows in the log without flooding it: routine drops
// at INFO, those an operator must look into (dropLevel) in a WARN line
// of their own.
func (c *control) reportDrops() {
	c.dropsAt = c.now
	var routine, serious []any
	for k := range numCounters {
		v := c.i.ctr[k].Load()
		if d := v - c.dropsSeen[k]; d > 0 && isDropCounter(k) {
			if c.dropLevel(k) >= slog.LevelWarn {
				serious = append(serious, counterNames[k], d)
			} else {
				routine = append(routine, counterNames[k], d)
			}
		}
		c.dropsSeen[k] = v
	}
	if len(routine) > 0 {
		c.i.log.Info("packets dropped", append([]any{"in", dropReportInterval}, routine...)...)
	}
	if len(serious) > 0 {
		c.i.log.Warn("packets lost: resources exhausted or a device failing", append([]any{"in", dropReportInterval}, serious...)...)
	}
}

// dropLevel is how loud a drop cause is in the report. Most are what peers,
// the kernel and the fabric do (no neighbor, no route, too big, a queue
// bounded on purpose, forged or malformed input, a connection that died)
// and are routine. Those left mean the daemon ran short or a device
// failed: the control goroutine's inbox or slots full, receive
// completions in error, TUN writes failing while the link is up (down,
// the kernel refuses them: the operator's doing).
func (c *control) dropLevel(k counter) slog.Level {
	switch k {
	case ctlDropBusy, rxErrors:
		return slog.LevelWarn
	case rxDropTUN:
		if c.linkUp {
			return slog.LevelWarn
		}
	}
	return slog.LevelInfo
}

// forget removes a neighbor and its connections.
func (c *control) forget(e *neigh.Entry) {
	for _, p := range c.i.neigh.Delete(e) {
		c.i.drop(p.Slot, txDropNoNeigh)
	}
	if err := c.i.routes.Remove(e.IP); err != nil {
		c.i.log.Warn("removing a route", "dst", e.IP, "err", err)
	}
	if c.i.mgr != nil && e.Link.GID != (ib.GID{}) && len(c.i.neigh.ByLink(e.Link)) == 0 {
		c.i.mgr.Disconnect(c.now, e.Link, "neighbor expired")
	}
}

// shutdown disconnects every connection before the interface closes.
func (c *control) shutdown() {
	if c.i.mgr != nil {
		c.i.mgr.Close(time.Now())
	}
	_ = c.i.routes.Flush()
}
