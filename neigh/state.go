package neigh

import (
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// This file is the resolution state machine of one entry. The control
// goroutine feeds it events (a reply heard, a packet waiting, a tick, a
// connection refused) with the time, and does what the returned Action
// says: neigh sends nothing and knows no device.

// Resolution timing. An unanswered resolution gives up after 3 s, as the
// kernel's defaults do (3 requests, retrans_time 1 s), but asks again
// sooner at first: a lost request costs 200 ms, not 1 s. A peer that is
// slow to answer (a loaded host, a daemon just started) still has the
// whole 3 s; with 3 requests 300 ms apart a peer in the rxe test bed
// failed resolution while it was still starting.
const (
	// ProbeInterval is the wait after the first request; each later
	// request waits twice as long as the one before.
	ProbeInterval = 200 * time.Millisecond
	// MaxProbes requests without an answer fail the entry (or, probing
	// an old link address against a new claim, let the claim win), at
	// ProbeDeadline(MaxProbes).
	MaxProbes = 4
	// ReachableTime is how long a confirmation holds.
	ReachableTime = 30 * time.Second
	// FailedTime is how long a failed entry is kept (packets to it are
	// dropped at once) before it is forgotten.
	FailedTime = 5 * time.Minute
)

// Action tells the control goroutine what an event requires; several may
// be set at once.
type Action uint8

// Actions.
const (
	// ActProbe: send a request for the entry, unicast to e.Link unless the
	// entry is Incomplete (see Entry.ProbeUnicast).
	ActProbe Action = 1 << iota
	// ActResolved: e.Link is new; publish a path to it and send what
	// waits. The previous link address is returned beside it where it
	// matters (a connection to it must go).
	ActResolved
	// ActRefuted: the old link address answered while a claim for another
	// was being checked: the claim was false (an impostor).
	ActRefuted
	// ActFailPending: resolution failed; drop the packets that waited.
	ActFailPending
	// ActForget: remove the entry (Table.Delete) and its route.
	ActForget
	// ActConnect: the entry is resolved and a packet waits: set up a
	// connection or send over UD.
	ActConnect
)

// ProbeDeadline is how long after an entry's state began the request that
// follows n requests is due (or, for n = MaxProbes, the entry gives up):
// ProbeInterval × (2ⁿ − 1), so 0, 200, 600 and 1400 ms, and 3 s.
func ProbeDeadline(n int) time.Duration {
	return ProbeInterval * time.Duration(1<<n-1)
}

// Has reports whether a includes b.
func (a Action) Has(b Action) bool { return a&b != 0 }

// Resolved reports whether e has a link address to send to.
func (e *Entry) Resolved() bool { return e.State != Incomplete && e.State != Failed }

// ProbeUnicast reports whether e's next request goes unicast to e.Link
// (confirming a known address) rather than to the broadcast or
// solicited-node group: whether it is resolved.
func (e *Entry) ProbeUnicast() bool { return e.Resolved() }

// probe counts one more request in the current state.
func (e *Entry) probe() Action {
	e.Probes++
	return ActProbe
}

func (e *Entry) set(s State, now time.Time) {
	e.State, e.Probes, e.Updated = s, 0, now
}

// Heard applies a packet that says e's address is at link: a reply to our
// request, an announcement, or the source of a solicitation. A live entry
// is not redirected on the word of one packet: the old address is probed
// first, and only its silence lets the claim win (Tick).
func (e *Entry) Heard(link ib.LinkAddr, now time.Time) Action {
	switch {
	case e.State == Rail:
		return 0 // the bond's, not the fabric's
	case e.State == Incomplete || e.State == Failed:
		e.Link = link
		e.set(Reachable, now)
		return ActResolved
	case e.Link.SameNode(link):
		var a Action
		if e.State == Probing {
			a |= ActRefuted
		}
		e.set(Reachable, now)
		if e.Link.Flags != link.Flags {
			e.Link = link
			a |= ActResolved
		}
		return a
	case e.State == Probing && e.Claim.SameNode(link):
		return 0 // the same claim again; the probe decides
	default:
		e.set(Probing, now)
		e.Claim = link
		return e.probe()
	}
}

// Proven is called when a connection to link came up: the CM handshake,
// checked against its source address, showed link alive. A claim being
// checked for link wins at once if it is the same port (GID) as the old
// address with a new QPN: the peer restarted, and its old QPN, being gone,
// would only confirm that by staying silent for seconds. A claim from
// another port still waits for its probes.
func (e *Entry) Proven(link ib.LinkAddr, now time.Time) Action {
	if e.State != Probing || !e.Claim.SameNode(link) || e.Claim.GID != e.Link.GID {
		return 0
	}
	e.Link = e.Claim
	e.set(Reachable, now)
	return ActResolved
}

// Restarted is Heard for a claim that came from link itself (its UD
// source is link's port and QPN): when link is the port e is at (the same
// GID) with a new QPN, the peer restarted, or its P_Key child was made
// again, and announces itself. Its old QPN is gone: waiting for that QPN's
// silence would cost seconds of traffic, so the claim wins at once, as a
// connection proves it (Proven). Anything else is Heard.
func (e *Entry) Restarted(link ib.LinkAddr, now time.Time) Action {
	if !e.Resolved() || e.State == Rail || e.Link.GID != link.GID || e.Link.SameNode(link) {
		return e.Heard(link, now)
	}
	e.Link = link
	e.set(Reachable, now)
	return ActResolved
}

// MovedToSibling applies an announcement from link, e's Sibling, that it
// replaces e.Link: the node moved its address to its other port
// (failover), and the move wins at once; the port it left becomes the
// sibling. Anything else is heard as any claim.
func (e *Entry) MovedToSibling(link ib.LinkAddr, now time.Time) Action {
	if !e.Resolved() || e.State == Rail || e.Sibling == (ib.LinkAddr{}) || !e.Sibling.SameNode(link) {
		return e.Heard(link, now)
	}
	e.Link, e.Sibling = link, e.Link
	e.set(Reachable, now)
	return ActResolved
}

// Gone is called when the CM showed that e's QPN is gone (a REJ "invalid
// service ID" or "stale connection" from its port): a claim being checked
// for the same port wins at once. Otherwise it is Suspect.
func (e *Entry) Gone(now time.Time) Action {
	if e.State == Probing && e.Claim.GID == e.Link.GID && !e.Claim.SameNode(e.Link) {
		e.Link = e.Claim
		e.set(Reachable, now)
		return ActResolved
	}
	return e.Suspect(now)
}

// Wanted is called when a packet is queued on e: a failed entry is asked
// again, an unresolved one gets its first request, a resolved one wants a
// connection (or the UD path).
func (e *Entry) Wanted(now time.Time) Action {
	if e.State == Failed {
		e.set(Incomplete, now)
	}
	if e.State == Incomplete {
		if e.Probes == 0 {
			return e.probe()
		}
		return 0
	}
	return ActConnect
}

// Suspect is called when the peer refused or lost a connection: it may
// have restarted with a new link address, so a reachable entry is
// confirmed again by unicast.
func (e *Entry) Suspect(now time.Time) Action {
	if e.State != Reachable {
		return 0
	}
	e.set(Stale, now)
	return e.probe()
}

// Tick runs e's timers.
func (e *Entry) Tick(now time.Time) Action {
	age := now.Sub(e.Updated)
	switch e.State {
	case Incomplete, Probing:
		if age < ProbeDeadline(e.Probes) {
			return 0
		}
		if e.Probes < MaxProbes {
			return e.probe()
		}
		if e.State == Probing {
			// The old address is silent: the claim was right.
			e.Link = e.Claim
			e.set(Reachable, now)
			return ActResolved
		}
		e.State, e.Updated = Failed, now
		return ActFailPending
	case Reachable:
		if age > ReachableTime {
			// Confirm by unicast; silence means the peer is gone.
			e.set(Stale, now)
			return e.probe()
		}
	case Stale:
		// Stale entries are confirmed again by unicast requests while they
		// carry traffic; the probes time out like Incomplete's.
		if e.Probes > 0 && e.Probes < MaxProbes && age >= ProbeDeadline(e.Probes) {
			return e.probe()
		}
		if e.Probes >= MaxProbes && age >= ProbeDeadline(MaxProbes) {
			return ActForget
		}
	case Failed:
		if age > FailedTime {
			return ActForget
		}
	}
	return 0
}
