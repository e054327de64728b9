package ipoib

import (
	"net/netip"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/neigh"
)

// Packets the datapath could not send on its own: the next hop, the queue
// on its neighbor, and sending what waits once a path exists.

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
	if hop != p.dst && !c.noViaCache && !i.neigh.SetVia(p.dst, e) {
		i.drop(p.slot, txDropNoNeigh)
		return
	}
	if c.failedRecently(e) {
		c.unreachable(p.slot, p.n)
		return
	}
	if act != 0 {
		// Made from what a solicitation taught: now it costs a route. The
		// packet waits on the entry while that is applied, so that it
		// leaves first: resolved sends what waits, then installs the
		// route (netlink round trips the packet need not wait for).
		i.ctr.inc(learnUsed)
		if !i.neigh.Queue(e, neigh.Pending{Slot: p.slot, Len: p.n}) {
			i.drop(p.slot, txDropQueueFull)
			return
		}
		c.apply(e, act, ib.LinkAddr{})
		if e.Path() == nil {
			c.apply(e, e.Wanted(c.now), e.Link) // no path was made: resolve
		}
		return
	}
	if path := e.Path(); path != nil {
		// Published since the datapath looked (or just now, from a
		// candidate): send it now if it can go. Over UD it asks for the
		// connection, as the datapath's own UD sends do, or a peer that
		// gets one packet from us stays on UD.
		if c.send(p.slot, p.n, e, path) {
			c.i.postBatch(&c.sends)
			if path.QP == nil {
				i.wantConnection(e, path)
			}
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

// nextHop returns the neighbor a packet to dst goes to: dst itself when it
// is in one of our subnets, else the gateway of the kernel's route, which
// must be a neighbor on this interface.
func (c *control) nextHop(dst netip.Addr) (netip.Addr, bool) {
	if _, ok := c.onLink(dst); ok {
		return dst, true
	}
	gw, ok := c.i.netdev.Gateway(dst)
	if !ok {
		return netip.Addr{}, false
	}
	if _, ok := c.onLink(gw); !ok {
		return netip.Addr{}, false
	}
	return gw, true
}

// send queues a packet waiting on e in c.sends on path if it fits; false
// leaves it waiting.
func (c *control) send(slot uint32, n int, e *neigh.Entry, path *neigh.Path) bool {
	i := c.i
	ipLen := n - encap.HeaderLen
	switch {
	case path.QP != nil && ipLen <= path.MTU:
		i.sendConnected(&c.sends, slot, n, path)
		return true
	case ipLen <= i.port.udMTU:
		i.unicastUD(&c.sends, slot, n, e, path)
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
		case c.send(p.Slot, p.Len, e, path):
		case waiting:
			kept = append(kept, p)
		default:
			c.i.tooBig(p.Slot, p.Len-encap.HeaderLen, path.MTU)
		}
	}
	c.i.postBatch(&c.sends)
	e.Pending = kept
}
