package verbs

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
)

// The adapter returns a 64-bit wr_id with every completion. The provider
// posts its own, not the caller's: the registry slot of the table that
// remembers the request (16 bits), the slot's generation (16 bits) and the
// entry in that table (32 bits). A completion then finds the caller's ID and
// the receive buffer (whose first 40 octets hold the GRH) by indexing, with
// no map and no allocation, and a completion of a table that was retired
// (its QP closed or reset) is recognised as stale instead of being taken
// for the request that reuses the entry.

const (
	regChunkLen = 256
	regChunks   = 256
	maxTables   = regChunks * regChunkLen
)

func makeWRID(slot uint32, gen uint16, entry uint32) uint64 {
	return uint64(slot)<<48 | uint64(gen)<<32 | uint64(entry)
}

func splitWRID(id uint64) (slot uint32, gen uint16, entry uint32) {
	return uint32(id >> 48), uint16(id >> 32), uint32(id)
}

// queueStats count one work queue's requests for QP.Counters.
type queueStats struct {
	posted, completed, errors, flushed atomic.Uint64
}

// wrEntry is what the provider remembers of one posted request.
type wrEntry struct {
	id   uint64 // the caller's ID
	buf  []byte // receives: the posted buffer, to read the GRH from
	used bool
}

// wrOwner describes the work queue a table belongs to.
type wrOwner struct {
	recv  bool           // a receive queue: completions are WCRecv
	ud    bool           // UD receives: a GRH precedes every datagram
	qpn   ib.QPN         // the QP of a send or receive queue (0 for an SRQ)
	stats *queueStats    // outlives the table when a QP is reset
	pkey  *atomic.Uint32 // UD: the QP's P_Key, reported with receives
}

// wrTable maps the entries of one work queue (a QP's send or receive queue,
// or an SRQ) to the caller's requests. Its depth is the queue's, so a free
// entry means the queue has room.
type wrTable struct {
	wrOwner
	slot uint32 // set by registry.add before the table is published
	gen  uint16

	mu      sync.Mutex
	entries []wrEntry
	free    []uint32 // stack of free entry indices
	dead    bool     // retired: every completion still to come is stale
}

func newWRTable(depth int, owner wrOwner) *wrTable {
	depth = max(depth, 1)
	if owner.stats == nil {
		owner.stats = new(queueStats)
	}
	t := &wrTable{wrOwner: owner, entries: make([]wrEntry, depth), free: make([]uint32, depth)}
	for i := range t.free {
		t.free[i] = uint32(depth - 1 - i) // pop hands out 0, 1, 2, ...
	}
	return t
}

// allocLocked takes an entry for a request and returns the wr_id to post;
// false when the queue is full or the table retired. t.mu is held.
func (t *wrTable) allocLocked(id uint64, buf []byte) (uint64, bool) {
	if t.dead || len(t.free) == 0 {
		return 0, false
	}
	i := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	t.entries[i] = wrEntry{id: id, buf: buf, used: true}
	return makeWRID(t.slot, t.gen, i), true
}

// releaseLocked gives back the entry of a request the adapter refused.
func (t *wrTable) releaseLocked(wrid uint64) {
	_, _, i := splitWRID(wrid)
	if int(i) < len(t.entries) && t.entries[i].used {
		t.entries[i] = wrEntry{}
		t.free = append(t.free, i)
	}
}

// takeLocked returns the request of a completed entry and frees the entry;
// false for a completion that names no posted request (stale).
func (t *wrTable) takeLocked(entry uint32) (wrEntry, bool) {
	if t.dead || int(entry) >= len(t.entries) || !t.entries[entry].used {
		return wrEntry{}, false
	}
	e := t.entries[entry]
	t.entries[entry] = wrEntry{}
	t.free = append(t.free, entry)
	return e, true
}

// retireLocked marks the table dead and hands every outstanding request to
// flush, oldest entry index first.
func (t *wrTable) retireLocked(flush func(e wrEntry)) {
	if t.dead {
		return
	}
	t.dead = true
	for i := range t.entries {
		if t.entries[i].used {
			flush(t.entries[i])
			t.entries[i] = wrEntry{}
		}
	}
	t.free = t.free[:0]
}

// outstanding returns how many requests are posted and not yet completed.
func (t *wrTable) outstanding() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dead {
		return 0
	}
	return len(t.entries) - len(t.free)
}

var errTooManyQueues = errors.New("verbs: too many work queues open on this device (65536)")

// registry publishes a device's tables by slot. Lookups (one per
// completion) are lock-free; adding and removing take the mutex.
type registry struct {
	mu     sync.Mutex
	chunks [regChunks]atomic.Pointer[regChunk]
	free   []uint32 // slots given back
	next   uint32   // first slot never used
}

type regChunk struct {
	tables [regChunkLen]atomic.Pointer[wrTable]
	gens   [regChunkLen]uint16 // last generation handed out; guarded by registry.mu
}

// add gives t a slot and a generation and publishes it.
func (r *registry) add(t *wrTable) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var slot uint32
	switch {
	case len(r.free) > 0:
		slot = r.free[len(r.free)-1]
		r.free = r.free[:len(r.free)-1]
	case r.next < maxTables:
		slot = r.next
		r.next++
	default:
		return errTooManyQueues
	}
	c := r.chunks[slot/regChunkLen].Load()
	if c == nil {
		c = new(regChunk)
		r.chunks[slot/regChunkLen].Store(c)
	}
	c.gens[slot%regChunkLen]++
	t.slot, t.gen = slot, c.gens[slot%regChunkLen]
	c.tables[slot%regChunkLen].Store(t)
	return nil
}

// remove unpublishes t; completions that still name it become stale.
func (r *registry) remove(t *wrTable) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.chunks[t.slot/regChunkLen].Load()
	if c == nil || c.tables[t.slot%regChunkLen].Load() != t {
		return
	}
	c.tables[t.slot%regChunkLen].Store(nil)
	r.free = append(r.free, t.slot)
}

// lookup returns the table a wr_id names and the entry in it, or nil when
// the table is gone.
func (r *registry) lookup(wrid uint64) (*wrTable, uint32) {
	slot, gen, entry := splitWRID(wrid)
	c := r.chunks[slot/regChunkLen].Load()
	if c == nil {
		return nil, 0
	}
	t := c.tables[slot%regChunkLen].Load()
	if t == nil || t.gen != gen {
		return nil, 0
	}
	return t, entry
}
