package cmtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/mad"
)

// The fabric's own tests, with two toy nodes instead of CM engines: a
// pinger that sends a ping every second until a pong comes back (three
// at most), and an echo that answers each ping with a pong.

type attr uint16

const (
	ping attr = 1
	pong attr = 2
)

func (a attr) String() string { return fmt.Sprintf("A%d", uint16(a)) }

// msg is a toy message: a MAD header with its attribute ID and TID.
type msg struct{ a attr }

func (m msg) AttrID() attr { return m.a }

func (m msg) MarshalMAD(b []byte, tid uint64) error {
	if m.a == 0 {
		return errors.New("no attribute")
	}
	clear(b[:mad.Len])
	binary.BigEndian.PutUint64(b[8:16], tid)
	binary.BigEndian.PutUint16(b[16:18], uint16(m.a))
	return nil
}

func decodeMsg(b []byte) (uint64, *msg, error) {
	if len(b) != mad.Len {
		return 0, nil, errors.New("short")
	}
	return binary.BigEndian.Uint64(b[8:16]), &msg{attr(binary.BigEndian.Uint16(b[16:18]))}, nil
}

type toy struct {
	f     *Fabric[attr]
	gid   ib.GID
	peer  ib.GID
	send  func(ib.MADAddr, []byte) error
	echo  bool
	pings int       // pings left to send (pinger)
	next  time.Time // the pinger's timer
	got   []attr
	gotAt []time.Duration // since T0
	tid   uint64
}

func newToy(f *Fabric[attr], i, peer int, echo bool) *toy {
	n := &toy{f: f, gid: GIDN(i), peer: GIDN(peer), echo: echo}
	n.send = f.Sender(n.gid)
	if !echo {
		n.pings, n.next = 3, T0
	}
	f.Add(n.gid, n)
	return n
}

func (n *toy) sendMsg(a attr) {
	var b [mad.Len]byte
	n.tid++
	_ = msg{a}.MarshalMAD(b[:], n.tid)
	_ = n.send(ib.MADAddr{GID: n.peer, QPN: ib.QP1}, b[:])
}

func (n *toy) HandleMAD(now time.Time, m *ib.MAD) {
	a := attr(binary.BigEndian.Uint16(m.Data[16:18]))
	n.got = append(n.got, a)
	n.gotAt = append(n.gotAt, now.Sub(T0))
	switch {
	case n.echo && a == ping:
		n.sendMsg(pong)
	case a == pong:
		n.next = time.Time{}
	}
}

func (n *toy) Expire(now time.Time) {
	n.sendMsg(ping)
	if n.pings--; n.pings > 0 {
		n.next = now.Add(time.Second)
	} else {
		n.next = time.Time{}
	}
}

func (n *toy) Next() time.Time { return n.next }

// TestFabricLoss: each way of losing or repeating a MAD changes what the
// nodes see, and Run moves the clock to the timers and then to its end.
func TestFabricLoss(t *testing.T) {
	for _, tc := range []struct {
		name         string
		set          func(f *Fabric[attr])
		pingsSent    int // logged, dropped ones included
		pingsLost    int
		pongsAt      []time.Duration // when the pinger receives pongs
		echoGotPings int
	}{
		{"lossless", func(*Fabric[attr]) {}, 1, 0, []time.Duration{0}, 1},
		{"first ping lost", func(f *Fabric[attr]) { f.DropNth(ping, 1) }, 2, 1, []time.Duration{time.Second}, 1},
		{"first two pings lost", func(f *Fabric[attr]) { f.DropNth(ping, 1, 2) }, 3, 2, []time.Duration{2 * time.Second}, 1},
		{"every ping lost", func(f *Fabric[attr]) { f.DropAll[ping] = true }, 3, 3, nil, 0},
		{"first pong repeated", func(f *Fabric[attr]) { f.DupNth(pong, 1) }, 1, 0, []time.Duration{0, 0}, 1},
		{"filter drops pongs", func(f *Fabric[attr]) {
			f.Filter = func(w *Wire[attr]) bool { return w.Attr() == pong }
		}, 3, 0, nil, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFabric[attr](t)
			p := newToy(f, 1, 2, false)
			e := newToy(f, 2, 1, true)
			tc.set(f)
			f.Run(10 * time.Second)
			if f.Now != T0.Add(10*time.Second) {
				t.Errorf("clock at %v, want T0+10s", f.Now.Sub(T0))
			}
			all, delivered := f.Sent(p.gid, ping, true), f.Sent(ib.GID{}, ping, false)
			if len(all) != tc.pingsSent || len(all)-len(delivered) != tc.pingsLost || f.Count[ping] != tc.pingsSent {
				t.Errorf("pings: %d sent (count %d), %d delivered; want %d sent, %d lost",
					len(all), f.Count[ping], len(delivered), tc.pingsSent, tc.pingsLost)
			}
			if len(e.got) != tc.echoGotPings {
				t.Errorf("echo got %v, want %d pings", e.got, tc.echoGotPings)
			}
			if !slices.Equal(p.gotAt, tc.pongsAt) {
				t.Errorf("pongs at %v, want %v", p.gotAt, tc.pongsAt)
			}
			for i, w := range f.Log {
				if w.Seq != i+1 || w.TID() == 0 {
					t.Errorf("log[%d] = %v, TID %d", i, w, w.TID())
				}
			}
		})
	}
}

// TestFabricOrder: which pending MAD goes first.
func TestFabricOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(f *Fabric[attr])
		want []attr
	}{
		{"FIFO", func(f *Fabric[attr]) { f.Drain() }, []attr{1, 2, 3}},
		{"LIFO", func(f *Fabric[attr]) { f.LIFO = true; f.Drain() }, []attr{3, 2, 1}},
		{"DeliverWhere, then the rest", func(f *Fabric[attr]) {
			if !f.DeliverWhere(func(w *Wire[attr]) bool { return w.Attr() == 2 }) {
				t.Error("DeliverWhere found no A2")
			}
			f.Drain()
		}, []attr{2, 1, 3}},
		{"Take removes", func(f *Fabric[attr]) {
			if w := f.Take(func(w *Wire[attr]) bool { return w.Attr() == 1 }); w == nil || w.Attr() != 1 {
				t.Errorf("Take = %v", w)
			}
			f.Drain()
		}, []attr{2, 3}},
		{"Step one", func(f *Fabric[attr]) { f.Step() }, []attr{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFabric[attr](t)
			dst := &toy{gid: GIDN(2)} // neither pings nor echoes
			f.Add(dst.gid, dst)
			src := f.Sender(GIDN(1))
			for _, a := range []attr{1, 2, 3} {
				var b [mad.Len]byte
				_ = msg{a}.MarshalMAD(b[:], 7)
				_ = src(ib.MADAddr{GID: dst.gid, QPN: ib.QP1}, b[:])
			}
			tc.run(f)
			if !slices.Equal(dst.got, tc.want) {
				t.Errorf("delivered %v, want %v", dst.got, tc.want)
			}
		})
	}
}

// TestInject: a node's answer to an injected message comes back, and
// decodes with the caller's decoder.
func TestInject(t *testing.T) {
	f := NewFabric[attr](t)
	e := newToy(f, 2, 1, true)
	out := Inject(t, f, e, GIDN(1), msg{ping}, 0x42)
	w := OnlyWire(t, out, pong)
	if w.From != e.gid || w.To != GIDN(1) || e.gotAt[0] != 0 {
		t.Errorf("answer %v; echo got a ping at %v", w, e.gotAt)
	}
	if m := Decode[msg](t, w, decodeMsg); m.a != pong {
		t.Errorf("decoded %v", m.a)
	}
}

// recTB records a check's failures instead of failing the test.
type recTB struct {
	testing.TB
	errs []string
}

func (r *recTB) Helper() {}

func (r *recTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recTB) Fatalf(format string, args ...any) { r.Errorf(format, args...) }

type goodStats struct {
	Sent  uint64    `counter:"sent"`
	ByWay [2]uint64 `counter:"by_way_"`
}

type untagged struct {
	Sent uint64
}

// TestEveryCounterShown: the check finds a field with no tag, a value
// missing from the counters and a name shown twice.
func TestEveryCounterShown(t *testing.T) {
	shown := func(s *goodStats, names ...string) func() []ib.Counter {
		return func() []ib.Counter {
			vals := []uint64{s.Sent, s.ByWay[0], s.ByWay[1]}
			var cs []ib.Counter
			for i, n := range names {
				cs = append(cs, ib.Counter{Name: n, Value: vals[i]})
			}
			return cs
		}
	}
	for _, tc := range []struct {
		name     string
		check    func(tb testing.TB)
		wantErrs []string
	}{
		{"every field shown", func(tb testing.TB) {
			var s goodStats
			EveryCounterShown(tb, shown(&s, "sent", "by_way_a", "by_way_b"), &s)
		}, nil},
		{"one not shown", func(tb testing.TB) {
			var s goodStats
			EveryCounterShown(tb, shown(&s, "sent", "by_way_a"), &s)
		}, []string{"goodStats.ByWay[1] is counted but not in Counters"}},
		{"a name twice", func(tb testing.TB) {
			var s goodStats
			EveryCounterShown(tb, shown(&s, "sent", "by_way_a", "sent"), &s)
		}, []string{"counter sent appears twice"}},
		{"no tag", func(tb testing.TB) {
			var s untagged
			EveryCounterShown(tb, func() []ib.Counter { return []ib.Counter{{Name: "sent", Value: s.Sent}} }, &s)
		}, []string{"untagged.Sent has no counter tag"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recTB{TB: t}
			tc.check(r)
			if strings.Join(r.errs, "; ") != strings.Join(tc.wantErrs, "; ") {
				t.Errorf("errors %q, want %q", r.errs, tc.wantErrs)
			}
		})
	}
}

func TestWantCounter(t *testing.T) {
	cs := []ib.Counter{{Name: "a", Value: 3}}
	for _, tc := range []struct {
		name string
		want uint64
		fail bool
	}{
		{"a", 3, false},
		{"a", 4, true},
		{"b", 0, false}, // not shown reads 0
		{"b", 1, true},
	} {
		r := &recTB{TB: t}
		WantCounter(r, cs, tc.name, tc.want)
		if (len(r.errs) > 0) != tc.fail {
			t.Errorf("WantCounter(%s, %d): errors %q", tc.name, tc.want, r.errs)
		}
	}
}
