package bond

import (
	"slices"

	"github.com/ipoibd/ipoibd/netdev"
)

// Spreading flows (Config.Spread): the TUN's queues are dealt to the
// ports that are up, the active one first; a port that reads queues and
// is not the active one is a rail (ipoib's rail.go).

// assign deals the TUN's queues: all to the active leg, or, spreading,
// to every leg that is up in turn. Legs that lose a queue give it back
// (their blocked reads are interrupted; at most one packet each may still
// leave through them); rails hand what they cannot send to the active
// leg, and a leg that stops being one forgets its Rail entries. Bond
// goroutine (and Start).
func (b *Bond) assign() {
	active := int(b.active.Load())
	readers := deal(active, b.usable(), len(b.owners), b.spread)
	moved := false
	b.mu.Lock()
	for q := range b.owners {
		k := int32(readers[q%len(readers)])
		if b.owners[q].Load() != k {
			b.owners[q].Store(k)
			moved = true
		}
	}
	if moved {
		b.nextTurn()
	}
	b.mu.Unlock()
	for k, l := range b.legs {
		l.home.Store(int32(b.homeOf(k)))
		switch rail := k != active && slices.Contains(readers, k); {
		case rail:
			l.iface.SetRail(b.legs[active].iface)
		case l.iface.Rail():
			l.iface.SetRail(nil)
			l.iface.SetRailNeighbors(nil)
		}
	}
	if ir, ok := b.nd.(netdev.ReadInterrupter); ok && moved {
		ir.InterruptReads()
	}
}

// deal is the legs that read the TUN's queues, in turn: the active one,
// then, spreading while it is up, every other leg that is up, at most one
// a queue.
func deal(active int, healthy []bool, queues int, spread bool) []int {
	readers := []int{active}
	if !spread || !healthy[active] {
		return readers
	}
	for k, up := range healthy {
		if k != active && up && len(readers) < queues {
			readers = append(readers, k)
		}
	}
	return readers
}

// homeOf is the queue leg k writes what it receives on: the first it
// reads, so that the flow's next packets are read by it too; the first
// queue when it reads none.
func (b *Bond) homeOf(k int) int {
	for q := range b.owners {
		if int(b.owners[q].Load()) == k {
			return q
		}
	}
	return 0
}

// syncRails gives every rail the active leg's neighbors whose other port
// is known, as Rail entries. Bond goroutine.
func (b *Bond) syncRails() {
	var rails []*leg
	for _, l := range b.legs {
		if l.iface.Rail() {
			rails = append(rails, l)
		}
	}
	if len(rails) == 0 {
		return
	}
	m := b.Active().RailNeighbors()
	for _, l := range rails {
		l.iface.SetRailNeighbors(m)
	}
}
