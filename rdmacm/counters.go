package rdmacm

import (
	"slices"
	"sync"

	"github.com/ipoibd/ipoibd/ib"
)

// counters are the connection service's counters. The service runs on
// its owner's goroutine but the daemon reads counters from its own, hence
// the lock.
type counters struct {
	mu       sync.Mutex
	events   [numCMEvents]uint64
	unknown  uint64            // event types this code does not know
	stale    uint64            // events for ids the service no longer has
	errs     map[string]uint64 // failed librdmacm calls, by call
	refused  uint64            // requests refused for the half-open or total limit
	unusable uint64            // requests refused before the Manager saw them (transport, attributes)
	open     int               // connections (ids) in any state
	halfOpen int               // of which still being set up
}

func (c *counters) event(t int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t >= 0 && t < numCMEvents {
		c.events[t]++
	} else {
		c.unknown++
	}
}

func (c *counters) fail(call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.errs == nil {
		c.errs = map[string]uint64{}
	}
	c.errs[call]++
}

func (c *counters) add(p *uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*p++
}

func (c *counters) gauges(open, halfOpen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open, c.halfOpen = open, halfOpen
}

// countedCalls are the calls whose failures the service counts: each has
// its "err_" counter from the start (0), so that no key appears with the
// first failure.
var countedCalls = []string{
	"device_check", "rdma_accept", "rdma_connect", "rdma_create_ep", "rdma_destroy_id",
	"rdma_disconnect", "rdma_establish", "rdma_get_cm_event", "rdma_init_qp_attr",
	"rdma_listen", "rdma_reject", "rdma_resolve_addr", "rdma_resolve_route",
}

// snapshot lists the counters: event counts by type ("ev_…"), failed
// calls by name ("err_…", sorted), then the rest.
func (c *counters) snapshot() []ib.Counter {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ib.Counter, 0, numCMEvents+len(countedCalls)+len(c.errs)+6)
	for t, n := range c.events {
		out = append(out, ib.Counter{Name: "ev_" + cmEventNames[t], Value: n})
	}
	calls := slices.Clone(countedCalls)
	for call := range c.errs {
		if !slices.Contains(calls, call) {
			calls = append(calls, call)
		}
	}
	slices.Sort(calls)
	for _, call := range calls {
		out = append(out, ib.Counter{Name: "err_" + call, Value: c.errs[call]})
	}
	return append(out,
		ib.Counter{Name: "ev_unknown", Value: c.unknown},
		ib.Counter{Name: "events_stale", Value: c.stale},
		ib.Counter{Name: "requests_refused", Value: c.refused},
		ib.Counter{Name: "requests_unusable", Value: c.unusable},
		ib.Counter{Name: "conns", Value: uint64(c.open)},
		ib.Counter{Name: "conns_half_open", Value: uint64(c.halfOpen)},
	)
}
