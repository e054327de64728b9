package madqueue

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

const capacity = 256

func gidSrc(k int) ib.MADAddr {
	var g ib.GID
	g[0], g[1], g[14], g[15] = 0xfe, 0x80, byte(k>>8), byte(k)
	return ib.MADAddr{GID: g, QPN: ib.QP1}
}

func lidSrc(lid uint16) ib.MADAddr { return ib.MADAddr{QPN: ib.QP1, Path: ib.Path{DLID: lid}} }

// queue is the provider's side: a bounded channel, Admit before each send.
type queue struct {
	ch      chan ib.MAD
	s       *Shares
	refused int // by share
	full    int // admitted but the channel was full
}

func newQueue() *queue { return &queue{ch: make(chan ib.MAD, capacity), s: New(capacity)} }

func (q *queue) offer(from ib.MADAddr) {
	if !q.s.Admit(from, len(q.ch)) {
		q.refused++
		return
	}
	select {
	case q.ch <- ib.MAD{From: from}:
	default:
		q.full++
	}
}

// step sends n MADs from one source, or drains n MADs (from nil).
type step struct {
	from  *ib.MADAddr
	n     int
	drain int
	// after the step: MADs queued, refused by share and lost to a full
	// queue, all since the start
	queued, refused, full int
}

func TestAdmit(t *testing.T) {
	a, b, c := gidSrc(1), gidSrc(2), gidSrc(3)
	lid5, lid6 := lidSrc(5), lidSrc(6)
	lid5grh := lidSrc(5)
	lid5grh.GID, lid5grh.Path.GRH = gidSrc(9).GID, true
	lid6sameGID := lidSrc(6)
	lid6sameGID.GID, lid6sameGID.Path.GRH = gidSrc(9).GID, true
	for _, tc := range []struct {
		name  string
		steps []step
	}{{
		// Half the queue, one more while at half, then refused: another
		// source still finds room, up to its own share.
		name: "one source floods, another still gets in",
		steps: []step{
			{from: &a, n: 1000, queued: 129, refused: 871},
			{from: &b, n: 1, queued: 130, refused: 871},
			{from: &b, n: 100, queued: 193, refused: 908},
			{from: &c, n: 1, queued: 194, refused: 908},
		},
	}, {
		// Below half full a source is never refused, whatever it sent.
		name: "below half full everything goes in",
		steps: []step{
			{from: &a, n: 100, queued: 100},
			{drain: 50, queued: 50},
			{from: &a, n: 78, queued: 128},
			{from: &a, n: 1, queued: 129},
			{from: &a, n: 1, queued: 129, refused: 1},
		},
	}, {
		// Many sources each under their share fill the queue: each one's
		// MADs go in until it is full; none refused by share.
		name: "many sources under their share",
		steps: func() []step {
			var s []step
			for k := range 300 {
				src := gidSrc(100 + k)
				want := step{from: &src, n: 1, queued: min(k+1, capacity), full: max(0, k+1-capacity)}
				s = append(s, want)
			}
			return s
		}(),
	}, {
		// The queue seen empty: every source's count starts again, so the
		// flooder gets a share anew once another source fills past half.
		name: "the queue empties and shares reset",
		steps: []step{
			{from: &a, n: 200, queued: 129, refused: 71},
			{drain: 129, queued: 0, refused: 71},
			{from: &b, n: 200, queued: 129, refused: 142},
			{from: &a, n: 100, queued: 129 + 64, refused: 178},
		},
	}, {
		// Without the reset, the flooder's count would carry over.
		name: "a queue never empty keeps the counts",
		steps: []step{
			{from: &a, n: 200, queued: 129, refused: 71},
			{drain: 128, queued: 1, refused: 71},
			{from: &b, n: 200, queued: 129, refused: 143},
			{from: &a, n: 100, queued: 129, refused: 243},
		},
	}, {
		// On an InfiniBand link the source is its LID: another LID is
		// another source even with the same GID, the same LID the same
		// source whatever GRH it carries.
		name: "InfiniBand link keyed by LID",
		steps: []step{
			{from: &lid5, n: 300, queued: 129, refused: 171},
			{from: &lid5grh, n: 1, queued: 129, refused: 172},
			{from: &lid6, n: 1, queued: 130, refused: 172},
			{from: &lid6sameGID, n: 63, queued: 193, refused: 172},
			{from: &lid6, n: 1, queued: 193, refused: 173},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue()
			for k, s := range tc.steps {
				for range s.n {
					q.offer(*s.from)
				}
				for range s.drain {
					<-q.ch
				}
				if len(q.ch) != s.queued || q.refused != s.refused || q.full != s.full {
					t.Fatalf("step %d: queued %d, refused %d, full %d; want %d, %d, %d",
						k, len(q.ch), q.refused, q.full, s.queued, s.refused, s.full)
				}
			}
		})
	}
}

// More distinct sources between two empty moments than the table holds:
// the table does not grow, the newcomers share one overflow count (so a
// flood of forged sources is bounded as one source), and the sources
// already in the table keep their own counts.
func TestTableBounded(t *testing.T) {
	q := newQueue()
	slots := len(q.s.slots)
	early := gidSrc(0xffff)
	q.offer(early) // never drained below 1: no reset from here on
	for k := range 4 * slots {
		q.offer(gidSrc(k))
		<-q.ch
	}
	if len(q.s.slots) != slots || q.s.live > slots*3/4 {
		t.Fatalf("table of %d slots, %d live; want %d slots, at most %d live", len(q.s.slots), q.s.live, slots, slots*3/4)
	}
	if q.s.overflow == 0 || q.refused != 0 {
		t.Fatalf("overflow %d, refused %d; want the newcomers counted together and none refused below half full", q.s.overflow, q.refused)
	}
	flood := gidSrc(0x7777)
	for range capacity {
		q.offer(flood) // past half full
	}
	refused := q.refused
	q.offer(early) // in the table since before: its own count, 1
	if q.refused != refused {
		t.Errorf("a source in the table was refused for the overflow's share")
	}
	q.offer(gidSrc(0x8888)) // a newcomer: the overflow count, far past its share
	if q.refused != refused+1 {
		t.Errorf("a source that found the table full was admitted past the overflow's share")
	}
}

// Admit allocates nothing, resets included.
func TestAdmitAllocs(t *testing.T) {
	s := New(capacity)
	k := 0
	if n := testing.AllocsPerRun(1000, func() {
		k++
		s.Admit(gidSrc(k), k%300)
		s.Admit(lidSrc(uint16(k)), 200)
	}); n != 0 {
		t.Errorf("%v allocations per Admit", n)
	}
}

func BenchmarkAdmit(b *testing.B) {
	for _, bc := range []struct {
		name    string
		sources int
		queued  int
	}{{"one-source-full", 1, 200}, {"many-sources", 1000, 100}, {"reset-each", 1, 0}} {
		b.Run(bc.name, func(b *testing.B) {
			s := New(capacity)
			srcs := make([]ib.MADAddr, bc.sources)
			for k := range srcs {
				srcs[k] = gidSrc(k)
			}
			b.ReportAllocs()
			for k := 0; b.Loop(); k++ {
				s.Admit(srcs[k%len(srcs)], bc.queued)
			}
		})
	}
}
