package sapath

import (
	"bytes"
	"errors"
	"slices"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/sa"
)

// Defaults of Config.
const (
	// DefaultRefresh: the kernel's ipoib keeps a path until its neighbour
	// goes or a port event (SM change, LID change, client reregister)
	// flushes it, and never re-asks on a timer: path queries from every
	// node to every peer are what loads an SA. We refresh the paths still
	// in use every 15 minutes, so that a route the SM changed without an
	// event we saw is picked up, at a cost of one query per peer in use
	// per quarter hour; Invalidate re-asks at once on the events.
	DefaultRefresh = 15 * time.Minute
	// DefaultRetryMin and DefaultRetryMax bound the back-off between
	// failed queries of one destination. One query already waits its SA
	// client's tries (1 s each, 4 in all, as ipoib's path query); the
	// back-off doubles from 1 s to a minute so that a subnet without an
	// SM is not asked about every peer over and over.
	DefaultRetryMin = time.Second
	DefaultRetryMax = time.Minute
	// DefaultMaxEntries bounds the destinations kept.
	DefaultMaxEntries = 4096
)

// Config sets the cache's policy and what conversion needs of the port.
type Config struct {
	LMC      uint8 // the port's LID mask count, for source path bits
	ACKDelay uint8 // the CA's local ACK delay code, for the REQ's Local ACK Timeout
	// Refresh is how long an answer is used before it is asked again
	// (default DefaultRefresh). The old path is used while the new
	// question is out.
	Refresh time.Duration
	// Idle drops a destination not looked up for this long, at the time
	// it would next be asked about (default Refresh): only paths in use
	// are refreshed or retried.
	Idle time.Duration
	// RetryMin and RetryMax bound the back-off after failed queries
	// (defaults DefaultRetryMin and DefaultRetryMax).
	RetryMin, RetryMax time.Duration
	// MaxEntries bounds the destinations kept (default DefaultMaxEntries);
	// a lookup of a new one beyond it is a miss that asks nothing.
	MaxEntries int
}

// Stats counts what the cache did.
type Stats struct {
	Hits      uint64 // lookups answered with a path
	Misses    uint64 // lookups without one (asked, or being asked)
	Queries   uint64 // queries handed out by Due
	Failures  uint64 // queries that failed (no answer, an SA status, an unusable record)
	Refreshes uint64 // answers that replaced a path already held
	Expired   uint64 // destinations dropped for being idle
	Full      uint64 // new destinations not kept because MaxEntries were
}

// Counters returns the stats under their metric names.
func (s *Stats) Counters() []ib.Counter {
	return []ib.Counter{
		{Name: "path_hits", Value: s.Hits}, {Name: "path_misses", Value: s.Misses},
		{Name: "path_queries", Value: s.Queries}, {Name: "path_query_failures", Value: s.Failures},
		{Name: "path_refreshes", Value: s.Refreshes}, {Name: "path_expired", Value: s.Expired},
		{Name: "path_cache_full", Value: s.Full},
	}
}

// entry is one destination. A query is out while asking is set; else the
// next one is due at due.
type entry struct {
	path     *Path
	due      time.Time
	asking   bool
	again    bool // invalidated while asking: the answer may predate it
	failures int  // consecutive
	used     time.Time
}

// Cache holds path records by destination GID. It is not safe for
// concurrent use: one event loop owns it.
type Cache struct {
	cfg   Config
	m     map[ib.GID]*entry
	Stats Stats
}

// New makes an empty cache.
func New(cfg Config) *Cache {
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Idle <= 0 {
		cfg.Idle = cfg.Refresh
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = DefaultRetryMin
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(DefaultRetryMax, cfg.RetryMin)
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	return &Cache{cfg: cfg, m: map[ib.GID]*entry{}}
}

// Len returns the number of destinations kept.
func (c *Cache) Len() int { return len(c.m) }

// Lookup returns dgid's path if one is held. It never waits: a
// destination not known yet is queued for Due and misses until Done has
// its answer.
func (c *Cache) Lookup(dgid ib.GID, now time.Time) (Path, bool) {
	e := c.m[dgid]
	if e == nil {
		c.Stats.Misses++
		if len(c.m) >= c.cfg.MaxEntries {
			c.Stats.Full++
			return Path{}, false
		}
		c.m[dgid] = &entry{due: now, used: now}
		return Path{}, false
	}
	e.used = now
	if e.path == nil {
		c.Stats.Misses++
		return Path{}, false
	}
	c.Stats.Hits++
	return *e.path, true
}

// Next returns when Due next has work (a query to start or an idle
// destination to drop); zero when nothing is scheduled.
func (c *Cache) Next() time.Time {
	var next time.Time
	for _, e := range c.m {
		if !e.asking && (next.IsZero() || e.due.Before(next)) {
			next = e.due
		}
	}
	return next
}

// Due returns the destinations to query now, in GID order, and counts
// them as asked until Done; destinations idle for Config.Idle are dropped
// instead.
func (c *Cache) Due(now time.Time) []ib.GID {
	var out []ib.GID
	for g, e := range c.m {
		if e.asking || now.Before(e.due) {
			continue
		}
		if now.Sub(e.used) >= c.cfg.Idle {
			delete(c.m, g)
			c.Stats.Expired++
			continue
		}
		e.asking = true
		c.Stats.Queries++
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b ib.GID) int { return bytes.Compare(a[:], b[:]) })
	return out
}

// Done takes the answer to a query Due handed out. An answer for a
// destination forgotten meanwhile is dropped. On failure the old path (if
// any) stays in use, since an SA that does not answer says nothing about
// the route, unless the SA said the destination has no path.
func (c *Cache) Done(dgid ib.GID, rec sa.PathRecord, err error, now time.Time) {
	e := c.m[dgid]
	if e == nil || !e.asking {
		return
	}
	e.asking = false
	var p Path
	if err == nil {
		p, err = FromRecord(rec, c.cfg.LMC, c.cfg.ACKDelay)
	}
	if err == nil && rec.DGID != dgid {
		err = errors.New("sapath: answer for another destination")
	}
	if err != nil {
		c.Stats.Failures++
		e.failures++
		e.due = now.Add(c.backoff(e.failures))
		if gone(err) {
			e.path = nil
		}
	} else {
		if e.path != nil {
			c.Stats.Refreshes++
		}
		e.path, e.failures = &p, 0
		e.due = now.Add(c.cfg.Refresh)
	}
	if e.again {
		e.again, e.due = false, now
	}
}

// backoff is the wait after n consecutive failures: RetryMin doubled
// n-1 times, at most RetryMax.
func (c *Cache) backoff(n int) time.Duration {
	d := c.cfg.RetryMin
	for i := 1; i < n && d < c.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, c.cfg.RetryMax)
}

// gone reports an SA answer that the destination has no path (no such
// record, or a GID the SA does not know), as opposed to no answer.
func gone(err error) bool {
	var se *sa.StatusError
	if !errors.As(err, &se) {
		return false
	}
	return se.Status.Code() == sa.StatusNoRecords.Code() || se.Status.Code() == sa.StatusInvalidGID.Code()
}

// SetLMC takes the port's LID mask count after the SM changed it (a LID
// change): answers converted from now on take their source path bits
// under it; with Invalidate, every path does.
func (c *Cache) SetLMC(lmc uint8) { c.cfg.LMC = lmc }

// Invalidate has every destination asked again now, as the kernel's
// ipoib_mark_paths_invalid on an SM change, LID change or client
// reregister: the paths held stay in use until their answers come.
func (c *Cache) Invalidate(now time.Time) {
	for _, e := range c.m {
		if e.asking {
			e.again = true
		} else {
			e.due = now
		}
	}
}

// Forget drops dgid (its neighbour went away); an answer still out for
// it is ignored.
func (c *Cache) Forget(dgid ib.GID) { delete(c.m, dgid) }
