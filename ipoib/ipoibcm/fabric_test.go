package ipoibcm

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
)

// The deterministic harness of package cm's engine tests, for managers: a
// fake clock and an in-memory lossy fabric. Nodes are attached by GID;
// their Send callbacks enqueue MADs, and the test decides what is
// delivered, dropped, duplicated or reordered. run delivers pending MADs
// and calls Expire at the Next() deadlines, advancing the fake clock. No
// goroutines, no sleeps, no real time.

// t0 is the fake clock's start.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// node is what the fabric drives: *mgrNode (a Manager polling its
// engine) and a bare *cm.Engine both qualify.
type node interface {
	HandleMAD(now time.Time, m *ib.MAD)
	Expire(now time.Time)
	Next() time.Time
}

// wire is one MAD in flight.
type wire struct {
	seq      int
	from, to ib.GID
	data     [cm.MADLen]byte
	dropped  bool
}

func (w *wire) attr() cm.AttrID { return cm.AttrID(binary.BigEndian.Uint16(w.data[16:18])) }

func (w *wire) String() string {
	return fmt.Sprintf("#%d %v %v->%v", w.seq, w.attr(), w.from, w.to)
}

// fabric connects nodes by GID.
type fabric struct {
	tb      testing.TB
	now     time.Time
	nodes   map[ib.GID]node
	order   []ib.GID // Expire order, deterministic
	pending []*wire
	log     []*wire // everything sent, dropped ones included
	seq     int
	count   map[cm.AttrID]int
	// drop[attr][n] drops the n-th (1-based) MAD of that type; dropAll
	// drops every one; dup[attr][n] delivers the n-th twice.
	drop    map[cm.AttrID]map[int]bool
	dropAll map[cm.AttrID]bool
	dup     map[cm.AttrID]map[int]bool
	// filter, when set, may drop any MAD (return true) at send time.
	filter func(w *wire) bool
	lifo   bool // deliver the newest pending MAD first
	noLog  bool // benchmarks: do not keep the log
}

func newFabric(tb testing.TB) *fabric {
	return &fabric{
		tb: tb, now: t0, nodes: map[ib.GID]node{}, count: map[cm.AttrID]int{},
		drop: map[cm.AttrID]map[int]bool{}, dropAll: map[cm.AttrID]bool{}, dup: map[cm.AttrID]map[int]bool{},
	}
}

func (f *fabric) add(g ib.GID, n node) {
	if _, ok := f.nodes[g]; !ok {
		f.order = append(f.order, g)
	}
	f.nodes[g] = n
}

// dropNth drops the listed occurrences (1-based) of attr.
func (f *fabric) dropNth(attr cm.AttrID, ns ...int) {
	if f.drop[attr] == nil {
		f.drop[attr] = map[int]bool{}
	}
	for _, n := range ns {
		f.drop[attr][n] = true
	}
}

// sender returns the Send callback of the node at from.
func (f *fabric) sender(from ib.GID) func(ib.MADAddr, []byte) error {
	return func(to ib.MADAddr, mad []byte) error {
		if to.QPN != ib.QP1 {
			f.tb.Errorf("MAD sent to QPN %v, want QP1", to.QPN)
		}
		if len(mad) != cm.MADLen {
			f.tb.Fatalf("MAD of %d octets", len(mad))
		}
		f.seq++
		w := &wire{seq: f.seq, from: from, to: to.GID}
		copy(w.data[:], mad)
		a := w.attr()
		f.count[a]++
		n := f.count[a]
		w.dropped = f.dropAll[a] || f.drop[a][n] || (f.filter != nil && f.filter(w))
		if !f.noLog {
			f.log = append(f.log, w)
		}
		if !w.dropped {
			f.pending = append(f.pending, w)
			if f.dup[a][n] {
				c := *w
				f.pending = append(f.pending, &c)
			}
		}
		return nil
	}
}

// deliver hands one MAD to its destination (lost if nobody has that GID).
func (f *fabric) deliver(w *wire) {
	n := f.nodes[w.to]
	if n == nil {
		return
	}
	m := ib.MAD{From: ib.MADAddr{GID: w.from, QPN: ib.QP1, PKey: ib.DefaultPKey}, Data: w.data}
	n.HandleMAD(f.now, &m)
}

// step delivers one pending MAD; false when none is pending.
func (f *fabric) step() bool {
	if len(f.pending) == 0 {
		return false
	}
	var w *wire
	if f.lifo {
		w = f.pending[len(f.pending)-1]
		f.pending = f.pending[:len(f.pending)-1]
	} else {
		w = f.pending[0]
		f.pending = f.pending[1:]
	}
	f.deliver(w)
	return true
}

// drain delivers until nothing is pending, without advancing time.
func (f *fabric) drain() {
	for i := 0; f.step(); i++ {
		if i > 10_000_000 {
			f.tb.Fatalf("fabric: MADs keep flowing without time passing")
		}
	}
}

// run delivers everything and fires timers until d has passed on the fake
// clock; the clock ends at now+d.
func (f *fabric) run(d time.Duration) {
	end := f.now.Add(d)
	for i := 0; ; i++ {
		if i > 10_000_000 {
			f.tb.Fatalf("fabric: no quiescence")
		}
		f.drain()
		var next time.Time
		for _, g := range f.order {
			if n := f.nodes[g].Next(); !n.IsZero() && (next.IsZero() || n.Before(next)) {
				next = n
			}
		}
		if next.IsZero() || next.After(end) {
			break
		}
		if next.After(f.now) {
			f.now = next
		}
		for _, g := range f.order {
			nd := f.nodes[g]
			if n := nd.Next(); !n.IsZero() && !n.After(f.now) {
				nd.Expire(f.now)
			}
		}
	}
	f.now = end
}

// sent returns the logged MADs of type attr from the node at from (any
// node when from is zero), dropped ones included when withDropped.
func (f *fabric) sent(from ib.GID, attr cm.AttrID, withDropped bool) []*wire {
	var ws []*wire
	for _, w := range f.log {
		if w.attr() == attr && (from == ib.GID{} || w.from == from) && (withDropped || !w.dropped) {
			ws = append(ws, w)
		}
	}
	return ws
}

// decode decodes a logged MAD, failing the test if it does not decode.
func decode[T any](tb testing.TB, w *wire) *T {
	tb.Helper()
	_, m, err := cm.DecodeMAD(w.data[:])
	if err != nil {
		tb.Fatalf("%v does not decode: %v", w, err)
	}
	v, ok := any(m).(*T)
	if !ok {
		tb.Fatalf("%v decodes to %T", w, m)
	}
	return v
}

func gidN(i int) ib.GID {
	g := ib.GID{0xfe, 0x80}
	binary.BigEndian.PutUint32(g[12:], uint32(i))
	return g
}

// enginePeer is a bare Engine on the fabric whose consumer leaves REQs
// unanswered, keeping the last one for the test to answer by hand.
type enginePeer struct {
	e   *cm.Engine
	req *cm.Comm
}

func newEnginePeer(f *fabric, i int) *enginePeer {
	p := &enginePeer{}
	p.e = cm.NewEngine(cm.EngineConfig{
		GID: gidN(i), GUID: 0x0002c90300000000 | uint64(i), PKey: ib.DefaultPKey,
		ResponseTimeout: 16, MaxRetries: 3, Send: f.sender(gidN(i)),
		Event: func(ev cm.Event) {
			if ev.Type == cm.EvRequest {
				p.req = ev.Comm
			}
		},
	})
	f.add(gidN(i), p.e)
	return p
}
