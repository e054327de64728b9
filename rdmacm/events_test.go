package rdmacm

import (
	"slices"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/cm"
)

func TestCMEventNames(t *testing.T) {
	seen := map[string]bool{}
	for ty, name := range cmEventNames {
		if name == "" || seen[name] {
			t.Errorf("event type %d: name %q empty or repeated", ty, name)
		}
		seen[name] = true
	}
	if cmEventNames[evTimewaitExit] != "timewait_exit" || cmEventNames[evConnectRequest] != "connect_request" {
		t.Error("names out of order")
	}
}

// The masks the kernel CM returns: RC carries the responder and retry
// attributes, UC only the PSNs (and path), XRC targets a mix.
func TestTransportOf(t *testing.T) {
	const (
		rtrBase = 1 | 1<<7 | 1<<8 | 1<<12 | 1<<20 // STATE AV PATH_MTU RQ_PSN DEST_QPN
		rtsBase = 1 | 1<<16                       // STATE SQ_PSN
	)
	for _, tt := range []struct {
		name     string
		rtr, rts int
		tr       cm.TransportType
		ok       bool
	}{
		{"RC", rtrBase | qpMaxDestRDAtomic | qpMinRNRTimer, rtsBase | qpRetryCnt | qpRNRRetry | 1<<13 | qpTimeout, cm.TransportRC, true},
		{"UC", rtrBase, rtsBase, cm.TransportUC, true},
		{"XRC target", rtrBase | qpMaxDestRDAtomic | qpMinRNRTimer, rtsBase | qpTimeout, 0, false},
		{"half RC", rtrBase | qpMinRNRTimer, rtsBase | qpRetryCnt | qpRNRRetry, 0, false},
	} {
		tr, ok := transportOf(tt.rtr, tt.rts)
		if ok != tt.ok || (ok && tr != tt.tr) {
			t.Errorf("%s: transportOf = %v, %v; want %v, %v", tt.name, tr, ok, tt.tr, tt.ok)
		}
	}
}

func TestCounters(t *testing.T) {
	var c counters
	c.event(evConnectRequest)
	c.event(evConnectRequest)
	c.event(99)
	c.fail("rdma_reject")
	c.fail("rdma_connect")
	c.fail("rdma_reject")
	c.add(&c.refused)
	c.gauges(3, 1)
	got := map[string]uint64{}
	var order []string
	for _, x := range c.snapshot() {
		got[x.Name] = x.Value
		order = append(order, x.Name)
	}
	for name, want := range map[string]uint64{
		"ev_connect_request": 2, "ev_timewait_exit": 0, "ev_unknown": 1,
		"err_rdma_reject": 2, "err_rdma_connect": 1, "requests_refused": 1, "conns": 3, "conns_half_open": 1,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %d (present %v), want %d", name, v, ok, want)
		}
	}
	// Every call's counter is there before it fails, sorted, after the
	// events; one the list does not know joins them.
	c.fail("rdma_new_call")
	var errs []string
	for _, x := range c.snapshot()[numCMEvents:] {
		if name, ok := strings.CutPrefix(x.Name, "err_"); ok {
			errs = append(errs, name)
		}
	}
	want := append(slices.Clone(countedCalls), "rdma_new_call")
	slices.Sort(want)
	if !slices.Equal(errs, want) || !strings.HasPrefix(order[numCMEvents], "err_") {
		t.Errorf("failed calls %v, want %v sorted after the events", errs, want)
	}
	var fresh counters
	if n, m := len(fresh.snapshot()), len(order); n != m {
		t.Errorf("%d counters before anything happened, %d after", n, m)
	}
}
