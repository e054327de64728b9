// Package madqueue is the admission rule of a provider's bounded queue of
// received MADs (QP1 to the CM engine): each fabric source gets a fair
// share of the queue, so that one flooding source cannot fill it and have
// another host's MADs dropped there, which that host would send again only
// after its CM response timeout (seconds).
//
// The queue is a channel the engine reads; the provider cannot see a MAD
// leave it without a goroutine hop. So a source's share is counted as the
// MADs it put in since the queue was last seen empty: while the queue is
// at most half full every MAD goes in; above that, a source that has
// already put in a quarter of the queue's capacity is refused (and the
// provider counts the refusal under its own cause). A single source can
// then hold little more than half the queue, and any other source finds
// room. Sources are counted in a fixed table: more distinct sources than
// it holds between two empty moments share one overflow count, so memory
// stays bounded whatever a flood forges, and nothing allocates per MAD.
package madqueue

import (
	"hash/maphash"

	"github.com/ipoibd/ipoibd/ib"
)

// Source is a MAD's sender as the fabric shows it: its LID on an
// InfiniBand link (ib.MADAddr's Path.DLID on receive), else its GID.
type Source struct {
	LID uint16
	GID ib.GID
}

// SourceOf returns the source of a received MAD from from.
func SourceOf(from ib.MADAddr) Source {
	if from.LIDRouted() {
		return Source{LID: from.Path.DLID}
	}
	return Source{GID: from.GID}
}

// slotsPerMAD sizes the table: twice the queue's capacity, so that the
// sources of a full queue's worth of MADs fit at half load.
const slotsPerMAD = 2

type slot struct {
	src  Source
	gen  uint32 // the table's generation the slot was filled in; older is free
	sent uint32 // MADs admitted since the generation began
}

// Shares admits MADs to one bounded queue. It is not safe for concurrent
// use: a provider calls it from its receive goroutine, or under the lock
// that already orders its sends to the queue.
type Shares struct {
	capacity int // of the queue
	share    uint32
	seed     maphash.Seed
	gen      uint32
	live     int // slots of this generation
	slots    []slot
	overflow uint32 // MADs of sources that found the table full
}

// New returns the rule for a queue of capacity MADs.
func New(capacity int) *Shares {
	n := 1
	for n < slotsPerMAD*capacity {
		n <<= 1
	}
	return &Shares{capacity: capacity, share: uint32(max(1, capacity/4)), seed: maphash.MakeSeed(), gen: 1, slots: make([]slot, n)}
}

// Admit reports whether a MAD from from may join the queue, which now
// holds queued MADs, and counts it to its source if so. When it says no,
// the caller drops the MAD and counts it as refused by share. A MAD
// admitted that then finds the queue full stays counted to its source.
func (s *Shares) Admit(from ib.MADAddr, queued int) bool {
	if queued == 0 && (s.live > 0 || s.overflow > 0) {
		s.reset()
	}
	sent := s.count(SourceOf(from))
	if queued > s.capacity/2 && *sent >= s.share {
		return false
	}
	if *sent < ^uint32(0) {
		*sent++
	}
	return true
}

// reset forgets every source's count: the queue was seen empty, so none
// holds anything in it. Slots of older generations read as free.
func (s *Shares) reset() {
	s.gen++
	if s.gen == 0 { // wrapped: no slot may look current by accident
		clear(s.slots)
		s.gen = 1
	}
	s.live, s.overflow = 0, 0
}

// count returns the count of src in this generation, taking a free slot
// for a new source, or the overflow count when the table is three
// quarters full (which bounds every probe).
func (s *Shares) count(src Source) *uint32 {
	mask := uint64(len(s.slots) - 1)
	for k := maphash.Comparable(s.seed, src) & mask; ; k = (k + 1) & mask {
		e := &s.slots[k]
		if e.gen != s.gen {
			if s.live >= len(s.slots)*3/4 {
				return &s.overflow
			}
			*e = slot{src: src, gen: s.gen}
			s.live++
			return &e.sent
		}
		if e.src == src {
			return &e.sent
		}
	}
}
