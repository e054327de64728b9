package ipoib

import (
	"errors"
	"strings"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
	"github.com/ipoibd/ipoibd/neigh"
)

// Connections to neighbors: starting them, and the connection manager's
// callbacks that move neighbors between UD and a connection.

// backoff is when a peer that refused or lost a connection may be asked
// again, and how long the next wait is.
type backoff struct {
	until time.Time
	wait  time.Duration
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
	if c.backedOff(e.Link) {
		c.flush(e)
		return
	}
	// What fits UD goes ahead of the REQ: the first packet to a peer does
	// not wait for connection setup.
	c.sendPending(e, true)
	if _, err := i.mgr.Connect(c.now, e.Link); errors.Is(err, ipoibcm.ErrNoPath) {
		// On InfiniBand: connected once the SA's path came (pathAnswered).
		i.log.Debug("connecting: no path record yet", "peer", e.Link, "peer_ip", e.IP)
	} else if err != nil {
		// No QP, the connection limit or the service failing: ours to fix.
		i.log.Warn("connecting", "peer", e.Link, "peer_ip", e.IP, "err", err)
	}
	c.flush(e)
}

// backedOff reports whether connecting to link waits after a refusal.
func (c *control) backedOff(link ib.LinkAddr) bool {
	b, ok := c.backoff[ib.LinkAddr{QPN: link.QPN, GID: link.GID}]
	return ok && c.now.Before(b.until)
}

// connUp publishes a connection as the path of every neighbor on its peer.
func (i *Interface) connUp(conn *ipoibcm.Connection) {
	c := &i.ctl
	c.reached()
	delete(c.backoff, ib.LinkAddr{QPN: conn.Peer.QPN, GID: conn.Peer.GID})
	// A connection proves the claimed port's new QPN alive, not its old
	// one gone, unless one port is one interface (no SharedGIDs).
	for _, e := range i.neigh.ByClaim(conn.Peer) {
		if i.cfg.SharedGIDs {
			break
		}
		old := e.Link
		c.apply(e, e.Proven(conn.Peer, c.now), old)
	}
	es := i.neigh.ByLink(conn.Peer)
	for _, e := range es {
		p := c.udPath(e)
		if p == nil || i.datagram.Load() { // datagram mode: a peer's connection carries only its sends
			continue
		}
		p.QP, p.MTU, p.Packets, p.Bytes = conn.QP, conn.MTU, &conn.Traffic.TxPackets, &conn.Traffic.TxBytes
		c.publish(e, p)
		c.flush(e)
	}
	i.log.Info("connection up", "peer", conn.Peer, "peer_ip", ipList(es), "qpn", conn.QP.Num(), "mtu", conn.MTU)
}

// connDown puts the neighbors of a lost connection back on UD.
func (i *Interface) connDown(conn *ipoibcm.Connection, reason string) {
	c := &i.ctl
	es := i.neigh.ByLink(conn.Peer)
	var moved []*neigh.Entry
	var ps []*neigh.Path
	for _, e := range es {
		if p := e.Path(); p != nil && p.QP == conn.QP {
			moved, ps = append(moved, e), append(ps, c.udPath(e))
		}
	}
	c.publishAll(moved, ps)
	i.log.Info("connection down", "peer", conn.Peer, "peer_ip", ipList(es), "qpn", conn.QP.Num(), "reason", reason)
}

// connRefused backs off from a peer that refused or lost a connection and
// checks its neighbors again: it may have restarted with a new address.
func (i *Interface) connRefused(peer ib.LinkAddr, reason string) {
	c := &i.ctl
	if reason == "timeout" {
		c.reachFailed(peer.GID) // the REQ was never answered
	}
	key := ib.LinkAddr{QPN: peer.QPN, GID: peer.GID}
	b := c.backoff[key]
	b.wait = min(max(2*b.wait, connectBackoff), maxBackoff)
	b.until = c.now.Add(b.wait)
	c.backoff[key] = b
	es := i.neigh.ByLink(peer)
	// The peer's port said the QPN is no more (it restarted, or its child
	// was made again): a claim of a new one need not wait for silence.
	gone := strings.HasSuffix(reason, cm.RejInvalidServiceID.String()) || strings.HasSuffix(reason, cm.RejStaleConnection.String())
	for _, e := range es {
		if e.State == neigh.Rail {
			c.forget(e) // its flows go through the active port (SetRailNeighbors)
			continue
		}
		if old := e.Link; gone {
			c.apply(e, e.Gone(c.now), old)
		} else {
			c.apply(e, e.Suspect(c.now), e.Link)
		}
		c.flush(e)
	}
	// A REJ or a timeout is the peer's doing: routine, counted by cm.
	i.log.Info(refusalMessage(reason), "peer", peer, "peer_ip", ipList(es), "reason", reason, "retry_in", b.wait)
}

// refusalMessage names what happened to a connection the manager gave up
// on: only a REJ is a refusal.
func refusalMessage(reason string) string {
	switch {
	case reason == "timeout":
		return "connection attempt unanswered"
	case strings.HasPrefix(reason, "send failed"):
		return "connection lost: a send failed"
	}
	return "connection refused"
}
