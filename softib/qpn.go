package softib

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// qpnQuarantine is how many recently freed QPNs are not handed out again:
// a late packet for a closed connection must not land on a new one.
const qpnQuarantine = 4096

// qpnAllocator hands out QP numbers that a third host cannot predict from
// the ones it sees (a connection QP was once the UD QPN + 1, and guessing
// it is half of forging a packet for it): each one is drawn from
// crypto/rand, skipping 0, 1, the multicast QPN, live numbers and
// recently freed ones. With at most tens of thousands of QPs in 2^24
// numbers a draw almost never repeats. Guarded by Device.mu.
type qpnAllocator struct {
	rnd  [512]byte // randomness drawn in bulk: one getrandom per 128 QPNs
	used int

	freed  [qpnQuarantine]ib.QPN // ring of the most recently freed
	head   int
	n      int
	isFree map[ib.QPN]struct{} // the ring's members
}

// draw returns 24 random bits.
func (a *qpnAllocator) draw() ib.QPN {
	if a.used == 0 || a.used+4 > len(a.rnd) {
		if _, err := rand.Read(a.rnd[:]); err != nil {
			panic("softib: crypto/rand: " + err.Error()) // crypto/rand does not fail on Linux
		}
		a.used = 0
	}
	v := binary.BigEndian.Uint32(a.rnd[a.used:])
	a.used += 4
	return ib.QPN(v) & ib.QPNMask
}

// alloc returns a number no live QP holds.
func (a *qpnAllocator) alloc(live func(ib.QPN) bool) ib.QPN {
	for {
		n := a.draw()
		if n < 2 || n == ib.MulticastQPN {
			continue
		}
		if live(n) {
			continue
		}
		if _, ok := a.isFree[n]; ok {
			continue
		}
		return n
	}
}

// release quarantines a freed number.
func (a *qpnAllocator) release(n ib.QPN) {
	if a.isFree == nil {
		a.isFree = make(map[ib.QPN]struct{})
	}
	if a.n == len(a.freed) {
		delete(a.isFree, a.freed[a.head])
		a.n--
		a.head = (a.head + 1) % len(a.freed)
	}
	a.freed[(a.head+a.n)%len(a.freed)] = n
	a.n++
	a.isFree[n] = struct{}{}
}
