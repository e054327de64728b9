package ipoib

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
)

// Packet memory. A slot is named by its index everywhere (work request
// IDs, pending queues), so no packet is ever copied into a Go buffer.
// The port (portpool.go) owns one registered slab: its shared receive
// pool, the SRQ's slots every connected QP of every interface on the port
// receives into, and the rings of the first interface on the port. Each
// interface has its rings, laid out [tx | control | UD receive]: the first
// interface's in the port's slab, at today's sizes; every other's
// (P_Key children, pods' children) small, in memory of its own (ring).

const (
	// slotSize holds the largest IPoIB message (4 + 65520) with room
	// behind it for an ICMP error, rounded up to whole pages.
	slotSize = 68 << 10
	// udSlotSize holds a UD receive: the 40-octet GRH and a 4096-octet IB
	// MTU.
	udSlotSize = 8 << 10
)

// Slot counts of the first interface on a port. The SRQ is shared by
// every connection of every interface on the port, so memory does not
// grow with the number of peers or partitions. UD has no flow control:
// its ring must absorb a TCP burst while the receive loop writes to the
// TUN.
const (
	numTx      = 256
	numNeighTx = 32
	numSRQRx   = 256
	numUDRx    = 2048
	// connSendDepth is the send queue depth a connection's QP asks for:
	// one send a transmit slot of the first interface, as before slots
	// were shared. On verbs each work request is device memory, reserved
	// per connection whether it sends or idles, so the segments packed
	// into shared slots (sendPacked) do not deepen it: they take from it
	// (slots.budget).
	connSendDepth = numTx
)

// layout is how many slots of each kind an interface's rings hold.
type layout struct {
	tx, neigh, udRx uint32
}

// primaryLayout is the first interface's on a port: what every interface
// had before the port's resources were shared, so ib0 keeps its
// throughput.
var primaryLayout = layout{tx: numTx, neigh: numNeighTx, udRx: numUDRx}

// childLayout is every other interface's on the port: a P_Key child or a
// pod's. Its connected QPs receive from the port's SRQ, so it needs
// receive slots only for its UD QP: ARP, ND, multicast, and unicast to
// peers without a connection (datagram mode). 128 of them take a burst of
// 128 datagrams (the kernel's ipoib has 256 UD receives, at 4 KiB); 32
// transmit slots of 68 KiB keep 2 MiB of 64 KiB segments in flight on a
// connection, and packed smaller segments up to the send queue's depth
// (slots.budget), so one TCP flow is not held to 32 segments; 4 for ARP
// and ND, which the control goroutine sends one at a time. 2.4 MiB of
// 68 KiB slots and 1 MiB of UD slots registered, which a quiet child does
// not touch.
var childLayout = layout{tx: 32, neigh: 4, udRx: childUDRx}

// childUDRx is the UD receive slots of an interface after the first.
const childUDRx = 128

func (l layout) firstNeigh() uint32 { return l.tx }
func (l layout) firstUDRx() uint32  { return l.tx + l.neigh }
func (l layout) slots() uint32      { return l.tx + l.neigh + l.udRx }

func (l layout) String() string {
	return fmt.Sprintf("tx %d, control %d, ud rx %d", l.tx, l.neigh, l.udRx)
}

// size is the octets the rings take.
func (l layout) size() int {
	return int(l.tx+l.neigh)*slotSize + int(l.udRx)*udSlotSize
}

// ring is an interface's packet memory: its slots at base in mr.
type ring struct {
	lay  layout
	mr   ib.MR
	base int
	// own is the ring's own slab, registered as mr, which it closes:
	// nil for the first interface's, which is in the port's slab.
	own *ib.Slab
}

type slots struct {
	ring
	mem   []byte // the ring's octets
	tx    []pool // one per TUN queue: its reader takes only from its own
	txPer uint32 // slots in each
	neigh pool   // ARP and ND sends of the control goroutine
	// extra counts the sends beyond the first that share a transmit slot
	// (share), one for each: the slot goes back to its pool with its last
	// completion.
	extra []atomic.Int32
	// inflight counts the sends the transmit slots may make: one for each
	// slot taken (in a TUN read, pending, or posted) and one for each
	// send packed beyond the first into a shared slot. It never exceeds
	// budget, the smallest send queue depth a QP these sends go to was
	// granted (bound), so that no QP's send queue can overflow. The
	// budget is the interface's, not a reader's: one busy TCP flow may
	// keep all of it in flight.
	inflight atomic.Int32
	budget   atomic.Int32
}

// newSlots makes the interface's slots on ring r, the transmit slots
// split among queues.
func newSlots(r ring, queues int) *slots {
	s := &slots{ring: r}
	if r.mr != nil {
		s.mem = r.mr.Slab().Bytes()[r.base : r.base+r.lay.size()]
	}
	s.init(queues)
	return s
}

// init splits the transmit slots among queues, with the budget of
// connSendDepth sends until a QP says it got fewer (bound).
func (s *slots) init(queues int) {
	l := s.lay
	s.tx, s.txPer = make([]pool, queues), l.tx/uint32(queues)
	for q := range s.tx {
		s.tx[q].init(uint32(q)*s.txPer, s.txPer)
	}
	s.extra = make([]atomic.Int32, l.tx)
	s.neigh.init(l.firstNeigh(), l.neigh)
	s.budget.Store(connSendDepth)
}

// bound lowers the budget of sends in flight to depth, the send queue
// depth a QP the transmit slots send on was granted. Sends already in
// flight above it drain; new ones wait for them. The budget stays above
// one slot a reader: each may hold a super-packet's slot while it waits
// for room to cut it, and a device that grants fewer work requests than
// that (none known does) gets refused posts (tx_drop_post), not a hang.
func (s *slots) bound(depth int) {
	d := int32(max(len(s.tx)+1, min(depth, connSendDepth)))
	for {
		b := s.budget.Load()
		if d >= b || s.budget.CompareAndSwap(b, d) {
			return
		}
	}
}

// get takes a free transmit slot of p, if p has one and a send more
// fits the budget; the slot counts as one send until it is freed.
func (s *slots) get(p *pool) (uint32, bool) {
	for {
		n := s.inflight.Load()
		if n >= s.budget.Load() {
			return 0, false
		}
		if s.inflight.CompareAndSwap(n, n+1) {
			break
		}
	}
	i, ok := p.tryGet()
	if !ok {
		s.release()
	}
	return i, ok
}

// release gives back one send of the budget. When the budget was spent,
// every reader is told (its pool's refilled): the one that waits for
// room may not be the one that reaped the completion.
func (s *slots) release() {
	if s.inflight.Add(-1) == s.budget.Load()-1 {
		for k := range s.tx {
			s.tx[k].signal()
		}
	}
}

// place returns where slot i starts in the ring and how long it is.
func (s *slots) place(i uint32) (off, size int) {
	first := s.lay.firstUDRx()
	if i < first {
		return int(i) * slotSize, slotSize
	}
	return int(first)*slotSize + int(i-first)*udSlotSize, udSlotSize
}

// bytes returns the whole slot.
func (s *slots) bytes(i uint32) []byte {
	off, size := s.place(i)
	return s.mem[off : off+size]
}

// isUDRx reports whether i is one of the UD QP's receive slots.
func (s *slots) isUDRx(i uint32) bool {
	return i >= s.lay.firstUDRx() && i < s.lay.slots()
}

// sge names the first n octets of slot i.
func (s *slots) sge(i uint32, n int) ib.SGE {
	return s.sgeAt(i, 0, n)
}

// sgeAt names n octets at offset at in slot i.
func (s *slots) sgeAt(i uint32, at, n int) ib.SGE {
	off, _ := s.place(i)
	return ib.SGE{MR: s.mr, Offset: s.base + off + at, Length: n}
}

// share makes transmit slot i (taken with get) the buffer of up to n
// sends (n >= 1), each of which frees it once, and returns how many it
// may carry: the sends beyond the first take from the budget, and with
// none left the slot carries one. Called by the slot's reader before the
// first of the sends is posted.
func (s *slots) share(i uint32, n int) int {
	k := int32(0)
	for n > 1 {
		cur := s.inflight.Load()
		k = max(0, min(int32(n-1), s.budget.Load()-cur))
		if k == 0 || s.inflight.CompareAndSwap(cur, cur+k) {
			break
		}
	}
	s.extra[i].Store(k)
	return int(k) + 1
}

// poolOf returns the pool transmit slot i belongs to.
func (s *slots) poolOf(i uint32) *pool {
	return &s.tx[min(i/s.txPer, uint32(len(s.tx)-1))]
}

// recvSGE names all of slot i, for a receive.
func (s *slots) recvSGE(i uint32) ib.SGE {
	off, size := s.place(i)
	return ib.SGE{MR: s.mr, Offset: s.base + off, Length: size}
}

// free returns a sent, dropped or unused transmit slot to its pool (a
// shared one, share, with the last of its sends) and its send to the
// budget.
func (s *slots) free(i uint32) {
	if i < s.lay.firstNeigh() {
		// Always the one atomic add: completions of a shared slot race.
		if s.extra[i].Add(-1) < 0 {
			s.extra[i].Store(0)
			s.poolOf(i).put(i)
		}
		s.release()
	} else if i < s.lay.firstUDRx() {
		s.neigh.put(i)
	}
}

// pool is a stack of free slot indices.
type pool struct {
	mu   sync.Mutex
	free []uint32
	// refilled is signalled when an empty pool gets a slot back: whoever
	// reaped the completion (another reader, the control goroutine) may
	// not be the one waiting for a slot.
	refilled chan struct{}
}

func (p *pool) init(first, n uint32) {
	p.refilled = make(chan struct{}, 1)
	p.free = make([]uint32, 0, n)
	for i := first + n; i > first; i-- {
		p.free = append(p.free, i-1)
	}
}

// tryGet returns a slot if one is free.
func (p *pool) tryGet() (uint32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == 0 {
		return 0, false
	}
	i := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return i, true
}

func (p *pool) put(i uint32) {
	p.mu.Lock()
	p.free = append(p.free, i)
	wasEmpty := len(p.free) == 1
	p.mu.Unlock()
	if wasEmpty {
		p.signal()
	}
}

// signal wakes p's reader if it waits for a slot or for the budget.
func (p *pool) signal() {
	select {
	case p.refilled <- struct{}{}:
	default:
	}
}
