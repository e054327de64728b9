package neigh

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// This file is the neighbor table: IP address → IPoIB link address, with
// the resolution state, a bounded queue of packets waiting for it, and the
// path the datapath sends on. The control goroutine owns the table; the
// datapath reads a published snapshot and each entry's path without locks.

// State is where an entry is in resolution.
type State uint8

// Entry states.
const (
	// Incomplete: a request is out, no answer yet.
	Incomplete State = iota
	// Reachable: the link address was confirmed recently.
	Reachable
	// Stale: confirmed long ago, or its connection failed; still used, and
	// probed again on the next use.
	Stale
	// Probing: a reply claimed another link address for a live entry; the
	// old one is asked first (an impostor must not redirect traffic).
	Probing
	// Failed: no answer; packets to it are dropped until it is asked again.
	Failed
	// Rail: set by the interface's bond (Table.Pin): the neighbor's other
	// port, reached over this port's rail while the active port knows the
	// neighbor. Never asked for: this port is silent, and the bond moves
	// or removes the entry as the active port's knowledge changes.
	Rail
)

var stateNames = []string{"INCOMPLETE", "REACHABLE", "STALE", "PROBING", "FAILED", "RAIL"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "UNKNOWN"
}

// Path is how the datapath reaches a neighbor: over UD with an address
// handle, or over a connected QP when QP is set. Paths are immutable once
// published; a change publishes a new one.
type Path struct {
	Link ib.LinkAddr
	AH   ib.AH // UD address handle for Link.GID
	QP   ib.QP // connected QP that may carry sends, or nil
	// MTU is the largest IP packet this path carries.
	MTU int
	// Packets and Bytes count the IP packets and octets sent on the
	// connection (its figures, idle detection); nil for UD.
	Packets, Bytes *atomic.Uint64
	// Rail: the path of a Rail entry, which a port that is not the
	// active one may send on.
	Rail bool
}

// Pending is a packet waiting for resolution or a connection: the
// datapath's buffer slot and the packet's length.
type Pending struct {
	Slot uint32
	Len  int
}

// Entry is one neighbor.
type Entry struct {
	IP   netip.Addr
	path atomic.Pointer[Path]
	// WantConn is set by the datapath when it sent over UD to a peer that
	// could be connected; the control goroutine clears it when it acts.
	WantConn atomic.Bool
	// UDFallbacks counts the unicast packets the datapath sent to the
	// neighbor over UD although it could have a connection: none was up
	// yet, or it was refused or failed.
	UDFallbacks atomic.Uint64

	// Control goroutine only:
	State State
	Link  ib.LinkAddr // valid unless Incomplete/Failed
	Claim ib.LinkAddr // Probing: the address a reply claimed
	// Sibling is the link address of the node's other port, as the node
	// itself said (an interface over two ports): an announcement that
	// moves Link there wins at once (MovedToSibling).
	Sibling ib.LinkAddr
	Updated time.Time // last state change or confirmation
	Probes  int       // requests sent in this state
	Pending []Pending
}

// Path returns the published path, or nil while unresolved.
func (e *Entry) Path() *Path { return e.path.Load() }

// SetPath publishes a new path (nil: unresolved).
func (e *Entry) SetPath(p *Path) { e.path.Store(p) }

// Table holds the neighbors of one interface.
type Table struct {
	// MaxPending bounds each entry's queue; beyond it packets are dropped
	// (and the caller counts them).
	MaxPending int
	// MaxEntries bounds the entries our traffic made; new destinations
	// beyond it are refused.
	MaxEntries int
	// MaxCandidates bounds what solicitations taught (learn.go).
	MaxCandidates int
	entries       map[netip.Addr]*Entry
	// via maps off-link destinations to the entry of their next hop (a
	// cache of route lookups, cleared when routes change).
	via      map[netip.Addr]*Entry
	snapshot atomic.Pointer[map[netip.Addr]*Entry]

	cands     []candidate // ring, oldest at candNext once full
	candNext  int
	candIndex map[netip.Addr]int32
	budgets   map[ib.GID]budget // learning budget per node
}

// NewTable makes an empty table with DefaultMaxCandidates.
func NewTable(maxPending, maxEntries int) *Table {
	t := &Table{MaxPending: maxPending, MaxEntries: maxEntries, MaxCandidates: DefaultMaxCandidates,
		entries: map[netip.Addr]*Entry{}, via: map[netip.Addr]*Entry{},
		candIndex: map[netip.Addr]int32{}, budgets: map[ib.GID]budget{}}
	t.publish()
	return t
}

// Lookup finds ip's entry; safe from any goroutine, no allocation.
func (t *Table) Lookup(ip netip.Addr) *Entry { return (*t.snapshot.Load())[ip] }

// Get returns ip's entry (control goroutine).
func (t *Table) Get(ip netip.Addr) *Entry { return t.entries[ip] }

// Create returns ip's entry for our traffic, making one if there is none:
// from ip's candidate, Stale at the link address it claimed (ActResolved:
// publish it; ActProbe: confirm it by unicast), else Incomplete. It
// returns nil when the table is full.
func (t *Table) Create(ip netip.Addr, now time.Time) (*Entry, Action) {
	if e := t.entries[ip]; e != nil {
		return e, 0
	}
	if len(t.entries) >= t.MaxEntries {
		return nil, 0
	}
	e := &Entry{IP: ip, State: Incomplete, Updated: now}
	var a Action
	if c, ok := t.takeCandidate(ip, now); ok {
		e.Link, e.Sibling, e.State = c.link, c.sibling, Stale
		a = ActResolved | e.probe()
	}
	t.entries[ip] = e
	t.publish()
	return e, a
}

// Pin makes ip's entry a Rail entry at link, making one if there is none
// (nil when the table is full). ActResolved: link is new for it; the
// previous link address is returned beside it.
func (t *Table) Pin(ip netip.Addr, link ib.LinkAddr, now time.Time) (*Entry, Action, ib.LinkAddr) {
	e, _ := t.Create(ip, now)
	if e == nil {
		return nil, 0, ib.LinkAddr{}
	}
	old, was := e.Link, e.State
	e.Link, e.Claim, e.Sibling = link, ib.LinkAddr{}, ib.LinkAddr{}
	e.set(Rail, now)
	if was == Rail && old == link {
		return e, 0, old
	}
	return e, ActResolved, old
}

// Delete removes an entry and returns its pending packets to the caller.
func (t *Table) Delete(e *Entry) []Pending {
	if t.entries[e.IP] != e {
		return nil
	}
	delete(t.entries, e.IP)
	for dst, hop := range t.via {
		if hop == e {
			delete(t.via, dst)
		}
	}
	e.SetPath(nil)
	t.publish()
	p := e.Pending
	e.Pending = nil
	return p
}

// SetVia makes the datapath send packets for the off-link dst through the
// next hop e. The cache is bounded like the table.
func (t *Table) SetVia(dst netip.Addr, e *Entry) bool {
	if len(t.via) >= t.MaxEntries {
		return false
	}
	t.via[dst] = e
	t.publish()
	return true
}

// ClearVia forgets every cached next hop (the routes changed).
func (t *Table) ClearVia() {
	if len(t.via) == 0 {
		return
	}
	clear(t.via)
	t.publish()
}

// All returns every entry (control goroutine; for display and timers).
func (t *Table) All() []*Entry {
	all := make([]*Entry, 0, len(t.entries))
	for _, e := range t.entries {
		all = append(all, e)
	}
	return all
}

// ByLink returns the entries whose link address is a's node (flags ignored).
func (t *Table) ByLink(a ib.LinkAddr) []*Entry {
	var out []*Entry
	for _, e := range t.entries {
		if (e.State == Reachable || e.State == Stale || e.State == Probing || e.State == Rail) && e.Link.SameNode(a) {
			out = append(out, e)
		}
	}
	return out
}

// ByClaim returns the entries checking a claim that they moved to a.
func (t *Table) ByClaim(a ib.LinkAddr) []*Entry {
	var out []*Entry
	for _, e := range t.entries {
		if e.State == Probing && e.Claim.SameNode(a) {
			out = append(out, e)
		}
	}
	return out
}

// Queue adds a packet to e's pending queue; false when the queue is full.
func (t *Table) Queue(e *Entry, p Pending) bool {
	if len(e.Pending) >= t.MaxPending {
		return false
	}
	e.Pending = append(e.Pending, p)
	return true
}

// publish copies the map for the datapath: entries are added and removed
// rarely, looked up on every packet.
func (t *Table) publish() {
	m := make(map[netip.Addr]*Entry, len(t.entries)+len(t.via))
	for k, v := range t.via {
		m[k] = v
	}
	for k, v := range t.entries {
		m[k] = v
	}
	t.snapshot.Store(&m)
}
