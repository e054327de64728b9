package ipoib

import "github.com/ipoibd/ipoibd/ib"

// A port can be up and still reach nobody: a switch that forwards
// nothing, routes the subnet manager never programmed, an underlay that
// lost its path but not its carrier. Then every connection on it fails.
// The interface counts the failures that say nothing reached a peer that
// was there (a REQ never answered, a send out of transport retries, a
// neighbor that answered before and stopped answering our probes) in a
// row, with no connection coming up between them, and the nodes they were
// to; an address never resolved does not count (a typo, a scan). With
// unreachableAfter of them to unreachablePeers nodes or more the port is
// unreachable (Unreachable), until a connection comes up on it or the bond
// lets it try again (ForgetUnreachable). One dead peer is not the port's
// fault: failures to a single node never count as the port's.
const (
	unreachableAfter = 3
	unreachablePeers = 2
)

// reachState is the run of failures so far (control goroutine).
type reachState struct {
	failures int
	nodes    map[ib.GID]bool
}

// reachFailed notes a connection to peer that failed without reaching it.
// Failures while the port is down are not counted: the port being down
// explains them (the sends in flight when it went down run out of retries
// after the failover), and they would hold the port back as unreachable
// when it comes back.
func (c *control) reachFailed(peer ib.GID) {
	if !c.i.cfg.Bonded {
		return // with one port there is nowhere else to go
	}
	if !c.carrier {
		return
	}
	r := &c.reach
	r.failures++
	if r.nodes == nil {
		r.nodes = map[ib.GID]bool{}
	}
	if len(r.nodes) < unreachablePeers {
		r.nodes[peer] = true
	}
	if r.failures >= unreachableAfter && len(r.nodes) >= unreachablePeers && !c.i.unreachable.Load() {
		c.i.unreachable.Store(true)
		c.i.log.Warn("every connection on the port fails", "port", c.i.DeviceName(), "failures", r.failures)
	}
}

// reached ends the run: a connection came up (or the bond lets the port
// try again).
func (c *control) reached() {
	c.reach = reachState{}
	c.i.unreachable.Store(false)
}

// Unreachable reports whether every connection on the port failed lately
// (reach.go).
func (i *Interface) Unreachable() bool { return i.unreachable.Load() }

// ForgetUnreachable lets the port be tried again.
func (i *Interface) ForgetUnreachable() { i.do(i.ctl.reached) }
