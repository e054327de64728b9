package sapath

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/sa"
)

var (
	peer2 = testutil.MustGID("fe80::2:c903:0:4")
	peer3 = testutil.MustGID("fe80::2:c903:0:5")
)

func recFor(g ib.GID, dlid uint16) sa.PathRecord {
	r := record()
	r.DGID, r.DLID = g, dlid
	return r
}

var (
	errTimeout  = errors.New("SA Get PathRecord to SM LID 1: no answer after 4 tries of 1s each")
	errNoRecord = fmt.Errorf("query: %w", &sa.StatusError{Method: sa.MethodGet, Attr: sa.AttrPathRecord, Status: sa.StatusNoRecords})
)

// step is one transition of the cache at t0+at. Exactly one of its
// operations runs; the checks that are set are made after it.
type step struct {
	name string
	at   time.Duration

	lookup     *ib.GID
	due        bool
	done       *Result
	invalidate bool
	forget     *ib.GID

	hit   uint16 // lookup: the DLID of the path returned, 0 for a miss
	asked []ib.GID
	next  time.Duration // Next after the step, from t0; -1: nothing scheduled
	len   int           // -1: not checked
	stats *Stats
}

func gp(g ib.GID) *ib.GID { return &g }

func ok(g ib.GID, dlid uint16) *Result { return &Result{DGID: g, Record: recFor(g, dlid)} }

func fail(g ib.GID, err error) *Result { return &Result{DGID: g, Err: err} }

const (
	m = time.Minute
	s = time.Second
)

// One destination's life through every transition, and the bounds.
// Refresh (and Idle) 10 minutes, back-off 1 s to 4 s, two destinations.
var steps = []step{
	{name: "first lookup misses and queues a query", lookup: gp(peer), next: 0, len: 1, stats: &Stats{Misses: 1}},
	{name: "due hands it out", due: true, asked: []ib.GID{peer}, next: -1, len: 1, stats: &Stats{Misses: 1, Queries: 1}},
	{name: "not again while it is out", due: true, next: -1, len: 1},
	{name: "lookups miss while it is out", lookup: gp(peer), next: -1, len: 1, stats: &Stats{Misses: 2, Queries: 1}},
	{name: "the answer is held until the refresh", at: 1 * s, done: ok(peer, 3), next: 10*m + 1*s, len: 1},
	{name: "lookup hits", at: 1 * s, lookup: gp(peer), hit: 3, next: 10*m + 1*s, len: 1, stats: &Stats{Hits: 1, Misses: 2, Queries: 1}},
	{name: "used at 5 minutes", at: 5 * m, lookup: gp(peer), hit: 3, next: 10*m + 1*s, len: 1},
	{name: "nothing due before the refresh", at: 10 * m, due: true, next: 10*m + 1*s, len: 1},
	{name: "used in the last 10 minutes: refreshed", at: 10*m + 1*s, due: true, asked: []ib.GID{peer}, next: -1, len: 1},
	{name: "the old path serves during the refresh", at: 10*m + 1*s, lookup: gp(peer), hit: 3, next: -1, len: 1},
	{name: "a failed refresh keeps the path, retries in 1 s", at: 10*m + 2*s, done: fail(peer, errTimeout), next: 10*m + 3*s, len: 1,
		stats: &Stats{Hits: 3, Misses: 2, Queries: 2, Failures: 1}},
	{name: "still served", at: 10*m + 2*s, lookup: gp(peer), hit: 3, next: 10*m + 3*s, len: 1},
	{name: "retry", at: 10*m + 3*s, due: true, asked: []ib.GID{peer}, next: -1, len: 1},
	{name: "second failure: 2 s", at: 10*m + 3*s, done: fail(peer, errTimeout), next: 10*m + 5*s, len: 1},
	{name: "retry", at: 10*m + 5*s, due: true, asked: []ib.GID{peer}, next: -1, len: 1},
	{name: "third failure: 4 s", at: 10*m + 5*s, done: fail(peer, errTimeout), next: 10*m + 9*s, len: 1},
	{name: "retry", at: 10*m + 9*s, due: true, asked: []ib.GID{peer}, next: -1, len: 1},
	{name: "fourth failure: capped at 4 s", at: 10*m + 9*s, done: fail(peer, errTimeout), next: 10*m + 13*s, len: 1},
	{name: "retry", at: 10*m + 13*s, due: true, asked: []ib.GID{peer}, next: -1, len: 1},
	{name: "an answer replaces the path: a refresh", at: 10*m + 13*s, done: ok(peer, 7), next: 20*m + 13*s, len: 1,
		stats: &Stats{Hits: 4, Misses: 2, Queries: 6, Failures: 4, Refreshes: 1}},
	{name: "the new path", at: 10*m + 14*s, lookup: gp(peer), hit: 7, next: 20*m + 13*s, len: 1},
	{name: "invalidate: asked again at once", at: 10*m + 15*s, invalidate: true, next: 10*m + 15*s, len: 1},
	{name: "due", at: 10*m + 15*s, due: true, asked: []ib.GID{peer}, next: -1, len: 1},
	{name: "invalidated while out", at: 10*m + 15*s, invalidate: true, next: -1, len: 1},
	{name: "so its answer is asked again at once", at: 10*m + 16*s, done: ok(peer, 7), next: 10*m + 16*s, len: 1},
	{name: "due", at: 10*m + 16*s, due: true, asked: []ib.GID{peer}, next: -1, len: 1},
	{name: "the SA says no path: dropped from use", at: 10*m + 17*s, done: fail(peer, errNoRecord), next: 10*m + 18*s, len: 1},
	{name: "lookup misses", at: 10*m + 17*s, lookup: gp(peer), next: 10*m + 18*s, len: 1},
	{name: "retry", at: 10*m + 18*s, due: true, asked: []ib.GID{peer}, next: -1, len: 1},
	{name: "an unusable record is a failure", at: 10*m + 18*s, done: ok(peer, 0), next: 10*m + 20*s, len: 1},
	{name: "retry", at: 10*m + 20*s, due: true, asked: []ib.GID{peer}, next: -1, len: 1},
	{name: "an answer for another GID is a failure", at: 10*m + 20*s, done: &Result{DGID: peer, Record: recFor(peer2, 4)}, next: 10*m + 24*s, len: 1,
		stats: &Stats{Hits: 5, Misses: 3, Queries: 10, Failures: 7, Refreshes: 2}},
	{name: "a second destination", at: 10*m + 21*s, lookup: gp(peer2), next: 10*m + 21*s, len: 2},
	{name: "a third is over MaxEntries: not kept", at: 10*m + 21*s, lookup: gp(peer3), next: 10*m + 21*s, len: 2,
		stats: &Stats{Hits: 5, Misses: 5, Queries: 10, Failures: 7, Refreshes: 2, Full: 1}},
	{name: "due", at: 10*m + 21*s, due: true, asked: []ib.GID{peer2}, next: 10*m + 24*s, len: 2},
	{name: "forget while out", at: 10*m + 21*s, forget: gp(peer2), next: 10*m + 24*s, len: 1},
	{name: "its answer is dropped", at: 10*m + 22*s, done: ok(peer2, 4), next: 10*m + 24*s, len: 1},
	{name: "an answer nobody asked for is dropped", at: 10*m + 22*s, done: ok(peer, 5), next: 10*m + 24*s, len: 1},
	{name: "retry", at: 10*m + 24*s, due: true, asked: []ib.GID{peer}, next: -1, len: 1},
	{name: "answered", at: 10*m + 25*s, done: ok(peer, 3), next: 20*m + 25*s, len: 1},
	{name: "not looked up for 10 minutes: dropped, not asked", at: 20*m + 25*s, due: true, next: -1, len: 0,
		stats: &Stats{Hits: 5, Misses: 5, Queries: 12, Failures: 7, Refreshes: 2, Expired: 1, Full: 1}},
}

func TestCache(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := New(Config{Refresh: 10 * m, RetryMin: 1 * s, RetryMax: 4 * s, MaxEntries: 2})
	for i, st := range steps {
		now := t0.Add(st.at)
		var hit uint16
		var asked []ib.GID
		switch {
		case st.lookup != nil:
			if p, ok := c.Lookup(*st.lookup, now); ok {
				hit = p.AH.DLID
			}
		case st.due:
			asked = c.Due(now)
		case st.done != nil:
			c.Done(st.done.DGID, st.done.Record, st.done.Err, now)
		case st.invalidate:
			c.Invalidate(now)
		case st.forget != nil:
			c.Forget(*st.forget)
		}
		if hit != st.hit {
			t.Errorf("%d %s: lookup found DLID %d, want %d", i, st.name, hit, st.hit)
		}
		if !slices.Equal(asked, st.asked) {
			t.Errorf("%d %s: due %v, want %v", i, st.name, asked, st.asked)
		}
		want := time.Time{}
		if st.next >= 0 {
			want = t0.Add(st.next)
		}
		if got := c.Next(); !got.Equal(want) {
			t.Errorf("%d %s: next %v, want %v", i, st.name, got.Sub(t0), st.next)
		}
		if c.Len() != st.len {
			t.Errorf("%d %s: %d destinations, want %d", i, st.name, c.Len(), st.len)
		}
		if st.stats != nil && c.Stats != *st.stats {
			t.Errorf("%d %s: stats %+v\nwant %+v", i, st.name, c.Stats, *st.stats)
		}
	}
}

// Due hands several destinations out in GID order, and a lookup of one
// that is idle but due keeps it.
func TestDueOrder(t *testing.T) {
	t0 := time.Unix(0, 0)
	c := New(Config{})
	for _, g := range []ib.GID{peer3, peer, peer2} {
		c.Lookup(g, t0)
	}
	if got := c.Due(t0); !slices.Equal(got, []ib.GID{peer, peer2, peer3}) {
		t.Fatalf("due %v", got)
	}
	for _, g := range []ib.GID{peer, peer2, peer3} {
		c.Done(g, recFor(g, 9), nil, t0)
	}
	later := t0.Add(DefaultRefresh)
	c.Lookup(peer2, later.Add(-time.Nanosecond))
	if got := c.Due(later); !slices.Equal(got, []ib.GID{peer2}) || c.Len() != 1 || c.Stats.Expired != 2 {
		t.Errorf("at the refresh: due %v, %d kept, stats %+v; want only the one in use", got, c.Len(), c.Stats)
	}
}

func TestCounters(t *testing.T) {
	st := Stats{Hits: 1, Misses: 2, Queries: 3, Failures: 4, Refreshes: 5, Expired: 6, Full: 7}
	var got []string
	for _, c := range st.Counters() {
		got = append(got, fmt.Sprintf("%s=%d", c.Name, c.Value))
	}
	want := []string{"path_hits=1", "path_misses=2", "path_queries=3", "path_query_failures=4", "path_refreshes=5", "path_expired=6", "path_cache_full=7"}
	if !slices.Equal(got, want) {
		t.Errorf("counters %v, want %v", got, want)
	}
}
