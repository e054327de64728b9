package ipoib

import (
	"net/netip"
	"sync"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/offload"
)

// An interface over several ports (package bond) may spread flows over
// its ports: each port that is up reads some of the TUN's queues, and the
// kernel keeps a flow on one queue, so on one port. A port that is not
// the active one, a rail, sends over its own port only to peers that have
// a second port too, at that port's link address: its Rail entries, which
// the bond pins from what the active port's neighbors said of their
// siblings. Every other packet it reads it hands to the active port's
// interface (Carry), which sends it as its own: peers with one port and
// kernel peers see only the active port, as with active-backup.

// carrier is where an interface sends packets other ports of its bond
// read and hand it (Carry): a transmit reader of its own, with its share
// of the transmit slots (Config.Bonded), taken by one port at a time.
type carrier struct {
	mu sync.Mutex
	r  txReader
}

// SetRail makes the interface a rail that hands what it cannot send on
// its own port to active; nil ends that: it sends everything it reads
// itself (it is the active port, or it reads nothing).
func (i *Interface) SetRail(active *Interface) { i.handoff.Store(active) }

// Rail reports whether the interface is a rail now.
func (i *Interface) Rail() bool { return i.handoff.Load() != nil }

// RailNeighbors are the neighbors whose other port is known, reachable or
// stale: IP → the link address of that port, where a rail may reach them.
func (i *Interface) RailNeighbors() map[netip.Addr]ib.LinkAddr {
	m := map[netip.Addr]ib.LinkAddr{}
	i.do(func() {
		for _, e := range i.neigh.All() {
			if (e.State == neigh.Reachable || e.State == neigh.Stale) && e.Sibling != (ib.LinkAddr{}) {
				m[e.IP] = e.Sibling
			}
		}
	})
	return m
}

// SetRailNeighbors makes the interface's Rail entries m: new ones are
// pinned (their connections come when traffic wants them), moved ones
// follow, the others are forgotten. A peer port that refused or lost a
// connection lately (the backoff) is left out: its flows go through the
// active port until it is asked again.
func (i *Interface) SetRailNeighbors(m map[netip.Addr]ib.LinkAddr) {
	i.do(func() {
		c := &i.ctl
		for _, e := range i.neigh.All() {
			if l, ok := m[e.IP]; e.State == neigh.Rail && (!ok || c.backedOff(l)) {
				c.forget(e)
			}
		}
		for ip, l := range m {
			if c.backedOff(l) {
				continue
			}
			if e, a, old := i.neigh.Pin(ip, l, c.now); e != nil {
				c.apply(e, a, old)
			}
		}
	})
}

// handedOff gives the n-octet packet in slot, read from the TUN, to the
// active port's interface when this one is a rail without a Rail entry
// for its destination; it reports whether it did (slot is then free).
func (i *Interface) handedOff(slot uint32, n int, h *offload.Hdr) bool {
	to := i.handoff.Load()
	if to == nil {
		return false
	}
	pkt := i.slots.bytes(slot)[encap.HeaderLen : encap.HeaderLen+n]
	if i.onRail(pkt) {
		return false
	}
	if to.Carry(pkt, h) {
		i.ctr.inc(txHandoffs)
		i.slots.free(slot)
	} else {
		i.drop(slot, txDropHandoff)
	}
	return true
}

// onRail reports whether pkt goes to a Rail entry: unicast to a peer the
// bond pinned, whose path is published.
func (i *Interface) onRail(pkt []byte) bool {
	_, dst, ok := ipDest(pkt)
	if !ok {
		return false
	}
	e := i.neigh.Lookup(dst)
	if e == nil {
		return false
	}
	p := e.Path()
	return p != nil && p.Rail
}

// Carry sends pkt, which another port of the interface's bond read from
// the TUN with header h, as if this interface had read it: copied into a
// transmit slot of its own. It waits for a slot as a TUN reader does;
// false when the interface is closing or was not made Bonded.
func (i *Interface) Carry(pkt []byte, h *offload.Hdr) bool {
	c := i.carrier
	if c == nil || len(pkt) > maxSuperPacket {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &c.r
	i.reapSends(&r.wc)
	slot, ok := i.txSlot(r)
	if !ok {
		return false
	}
	n := copy(i.slots.bytes(slot)[encap.HeaderLen:], pkt)
	r.hdr = *h
	i.sendRead(r, slot, n)
	i.postBatch(&r.sends)
	return true
}
