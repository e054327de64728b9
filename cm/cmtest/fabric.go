package cmtest

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/mad"
)

// T0 is the fake clock's start.
var T0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// Node is what the fabric drives: a *cm.Engine, or anything that hands
// MADs to one.
type Node interface {
	HandleMAD(now time.Time, m *ib.MAD)
	Expire(now time.Time)
	Next() time.Time
}

// Attr is the type of a MAD's attribute ID, e.g. cm.AttrID.
type Attr interface{ ~uint16 }

// Wire is one MAD in flight.
type Wire[A Attr] struct {
	Seq      int // 1 for the first MAD sent on the fabric
	From, To ib.GID
	Data     [mad.Len]byte
	Dropped  bool // lost when sent (DropNth, DropAll, Filter)
}

// Attr returns the MAD's attribute ID.
func (w *Wire[A]) Attr() A { return A(binary.BigEndian.Uint16(w.Data[16:18])) }

// TID returns the MAD's transaction ID.
func (w *Wire[A]) TID() uint64 { return binary.BigEndian.Uint64(w.Data[8:16]) }

func (w *Wire[A]) String() string {
	return fmt.Sprintf("#%d %v %v->%v", w.Seq, w.Attr(), w.From, w.To)
}

// Fabric connects nodes by GID. The fields are the test's to set and
// read; NewFabric makes one.
type Fabric[A Attr] struct {
	TB      testing.TB
	Now     time.Time // the fake clock
	nodes   map[ib.GID]Node
	order   []ib.GID   // Expire order, deterministic
	Pending []*Wire[A] // sent and not yet delivered, oldest first
	Log     []*Wire[A] // everything sent, dropped ones included
	seq     int
	Count   map[A]int // MADs sent, by attribute ID
	// drop[attr][n] drops the n-th (1-based) MAD of that type; DropAll
	// drops every one; dup[attr][n] delivers the n-th twice.
	drop    map[A]map[int]bool
	DropAll map[A]bool
	dup     map[A]map[int]bool
	// Filter, when set, may drop any MAD (return true) at send time.
	Filter func(w *Wire[A]) bool
	LIFO   bool // deliver the newest pending MAD first
	NoLog  bool // benchmarks: do not keep the Log
}

// NewFabric returns an empty fabric whose clock reads T0. It fails tb
// when a node sends a MAD that is not 256 octets or not to QP1, and when
// MADs or timers never stop (Drain, Run).
func NewFabric[A Attr](tb testing.TB) *Fabric[A] {
	return &Fabric[A]{
		TB: tb, Now: T0, nodes: map[ib.GID]Node{}, Count: map[A]int{},
		drop: map[A]map[int]bool{}, DropAll: map[A]bool{}, dup: map[A]map[int]bool{},
	}
}

// Add attaches n at GID g, replacing the node there (which keeps its
// place in the Expire order).
func (f *Fabric[A]) Add(g ib.GID, n Node) {
	if _, ok := f.nodes[g]; !ok {
		f.order = append(f.order, g)
	}
	f.nodes[g] = n
}

// GIDs returns the GIDs of the nodes, in the order they were added.
func (f *Fabric[A]) GIDs() []ib.GID { return slices.Clone(f.order) }

// Node returns the node at g, or nil.
func (f *Fabric[A]) Node(g ib.GID) Node { return f.nodes[g] }

// DropNth drops the listed occurrences (1-based) of attr.
func (f *Fabric[A]) DropNth(attr A, ns ...int) {
	if f.drop[attr] == nil {
		f.drop[attr] = map[int]bool{}
	}
	for _, n := range ns {
		f.drop[attr][n] = true
	}
}

// DupNth delivers the listed occurrences (1-based) of attr twice.
func (f *Fabric[A]) DupNth(attr A, ns ...int) {
	if f.dup[attr] == nil {
		f.dup[attr] = map[int]bool{}
	}
	for _, n := range ns {
		f.dup[attr][n] = true
	}
}

// Sender returns the Send callback of the node at from.
func (f *Fabric[A]) Sender(from ib.GID) func(ib.MADAddr, []byte) error {
	return func(to ib.MADAddr, data []byte) error {
		if to.QPN != ib.QP1 {
			f.TB.Errorf("MAD sent to QPN %v, want QP1", to.QPN)
		}
		if len(data) != mad.Len {
			f.TB.Fatalf("MAD of %d octets", len(data))
		}
		f.seq++
		w := &Wire[A]{Seq: f.seq, From: from, To: to.GID}
		copy(w.Data[:], data)
		a := w.Attr()
		f.Count[a]++
		n := f.Count[a]
		w.Dropped = f.DropAll[a] || f.drop[a][n] || (f.Filter != nil && f.Filter(w))
		if !f.NoLog {
			f.Log = append(f.Log, w)
		}
		if !w.Dropped {
			f.Pending = append(f.Pending, w)
			if f.dup[a][n] {
				c := *w
				f.Pending = append(f.Pending, &c)
			}
		}
		return nil
	}
}

// Deliver hands one MAD to its destination (lost if nobody has that GID).
func (f *Fabric[A]) Deliver(w *Wire[A]) {
	n := f.nodes[w.To]
	if n == nil {
		return
	}
	m := ib.MAD{From: ib.MADAddr{GID: w.From, QPN: ib.QP1, PKey: ib.DefaultPKey}, Data: w.Data}
	n.HandleMAD(f.Now, &m)
}

// Step delivers one pending MAD; false when none is pending.
func (f *Fabric[A]) Step() bool {
	if len(f.Pending) == 0 {
		return false
	}
	var w *Wire[A]
	if f.LIFO {
		w = f.Pending[len(f.Pending)-1]
		f.Pending = f.Pending[:len(f.Pending)-1]
	} else {
		w = f.Pending[0]
		f.Pending = f.Pending[1:]
	}
	f.Deliver(w)
	return true
}

// Take removes and returns the first pending MAD matching pred, or nil.
func (f *Fabric[A]) Take(pred func(*Wire[A]) bool) *Wire[A] {
	for i, w := range f.Pending {
		if pred(w) {
			f.Pending = slices.Delete(f.Pending, i, i+1)
			return w
		}
	}
	return nil
}

// DeliverWhere delivers the first pending MAD matching pred.
func (f *Fabric[A]) DeliverWhere(pred func(*Wire[A]) bool) bool {
	w := f.Take(pred)
	if w == nil {
		return false
	}
	f.Deliver(w)
	return true
}

// Drain delivers until nothing is pending, without advancing time.
func (f *Fabric[A]) Drain() {
	for i := 0; f.Step(); i++ {
		if i > 10_000_000 {
			f.TB.Fatalf("fabric: MADs keep flowing without time passing")
		}
	}
}

// Run delivers everything and fires timers until d has passed on the fake
// clock; the clock ends at Now+d.
func (f *Fabric[A]) Run(d time.Duration) {
	end := f.Now.Add(d)
	for i := 0; ; i++ {
		if i > 10_000_000 {
			f.TB.Fatalf("fabric: no quiescence")
		}
		f.Drain()
		var next time.Time
		for _, g := range f.order {
			if n := f.nodes[g].Next(); !n.IsZero() && (next.IsZero() || n.Before(next)) {
				next = n
			}
		}
		if next.IsZero() || next.After(end) {
			break
		}
		if next.After(f.Now) {
			f.Now = next
		}
		for _, g := range f.order {
			nd := f.nodes[g]
			if n := nd.Next(); !n.IsZero() && !n.After(f.Now) {
				nd.Expire(f.Now)
			}
		}
	}
	f.Now = end
}

// Sent returns the logged MADs of type attr from the node at from (any
// node when from is zero), dropped ones included when withDropped.
func (f *Fabric[A]) Sent(from ib.GID, attr A, withDropped bool) []*Wire[A] {
	var ws []*Wire[A]
	for _, w := range f.Log {
		if w.Attr() == attr && (from == ib.GID{} || w.From == from) && (withDropped || !w.Dropped) {
			ws = append(ws, w)
		}
	}
	return ws
}

// GIDN returns the i-th test GID: fe80::i.
func GIDN(i int) ib.GID {
	g := ib.GID{0xfe, 0x80}
	binary.BigEndian.PutUint32(g[12:], uint32(i))
	return g
}
