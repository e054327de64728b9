package main

import (
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/bond"
	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/counterdoc"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
	"github.com/ipoibd/ipoibd/sapath"
	"github.com/ipoibd/ipoibd/softib"
)

// knownCounters are the names of every counter `ipoibd stats` can show
// with softib, as the packages that count them enumerate them (the stats
// structs by reflection, the name tables), with the daemon's prefixes.
func knownCounters(t *testing.T) []string {
	names := append(ipoib.CounterNames(), bond.CounterNames()...)
	add := func(prefix string, cs []ib.Counter) {
		for _, c := range cs {
			names = append(names, prefix+c.Name)
		}
	}
	add("cm_", cm.StatCounters(&ipoibcm.ManagerStats{}))
	add("cm_", (&cm.EngineService{Engine: &cm.Engine{}}).Counters())
	qp1 := cm.NewSharedQP1(newIdleMADs())
	share, err := qp1.Open(1)
	if err != nil {
		t.Fatal(err)
	}
	add("cm_", share.Counters())
	_ = qp1.Close()
	for _, n := range (&softib.Device{}).QPCounterNames() {
		names = append(names, "conn_"+n)
	}
	add("sa_", (&sapath.Stats{}).Counters())
	for _, n := range softib.CounterNames() {
		names = append(names, "dev_"+n)
	}
	return names
}

// idleMADs is a MAD transport that never receives (for a SharedQP1).
type idleMADs struct{ recv chan ib.MAD }

func newIdleMADs() *idleMADs                      { return &idleMADs{recv: make(chan ib.MAD)} }
func (m *idleMADs) Send(ib.MADAddr, []byte) error { return nil }
func (m *idleMADs) Recv() <-chan ib.MAD           { return m.recv }
func (m *idleMADs) Close() error                  { close(m.recv); return nil }

// TestEveryCounterDocumented: every counter has an entry in the counter
// table (a new counter without one fails here), and every entry of a
// counter these packages count still names one (a renamed counter leaves
// no stale entry behind). The verbs and kernel-CM counters are checked
// under -tags rdma (counterdoc_rdma_test.go).
func TestEveryCounterDocumented(t *testing.T) {
	checkDocumented(t, knownCounters(t), func(e counterdoc.Entry) bool { return !strings.HasPrefix(e.Only, "verbs") })
}

// checkDocumented checks names against the table; mine tells the exact
// entries that must each be one of names.
func checkDocumented(t *testing.T, names []string, mine func(counterdoc.Entry) bool) {
	t.Helper()
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
		e, ok := counterdoc.Lookup(n)
		switch {
		case !ok:
			t.Errorf("counter %s has no entry in counterdoc's table", n)
		case strings.Contains(n, "drop") && !e.Trouble:
			t.Errorf("counter %s is called a drop but its entry says it is normal: rename it or the entry", n)
		}
	}
	if len(have) < 100 {
		t.Fatalf("only %d counters enumerated: the enumeration is broken", len(have))
	}
	for _, e := range counterdoc.All() {
		if !e.Family() && mine(e) && !have[e.Name] {
			t.Errorf("counterdoc documents %s, which no package counts", e.Name)
		}
	}
}

// TestStatsText: the stats table hides the counters at 0 and says how
// many it hid (--all lists them), and marks the counters above 0 whose
// value means trouble with what they count; SIGHUP's summary sums the
// drops and names the trouble counters.
func TestStatsText(t *testing.T) {
	cs := []ib.Counter{{Name: "tx_packets", Value: 7}, {Name: "tx_drop_post", Value: 3}, {Name: "rx_multicast_own", Value: 4},
		{Name: "tx_kernel_router_solicits", Value: 2}, {Name: "tx_errors", Value: 1}, {Name: "rx_drop_tun"}, {Name: "cm_rej_sent_consumer"}}
	for _, tc := range []struct {
		name     string
		cs       []ib.Counter
		all      bool
		want     []string // lines, fields separated by single spaces
		drops    uint64
		troubles string
	}{
		{"healthy", cs[:1], false, []string{"tx_packets 7"}, 0, ""},
		{"zeros hidden", []ib.Counter{cs[0], cs[5], cs[6]}, false,
			[]string{"tx_packets 7", "(2 counters at 0 not shown; ipoibd stats --all shows every one, man ipoibd explains them)"}, 0, ""},
		{"zeros shown", []ib.Counter{cs[0], cs[5], cs[6]}, true, []string{"tx_packets 7", "rx_drop_tun 0", "cm_rej_sent_consumer 0"}, 0, ""},
		{"trouble marked", cs, false, []string{
			"tx_packets 7",
			"tx_drop_post 3 TROUBLE: Packets the provider refused to send (send queue full or QP in error), dropped.",
			"rx_multicast_own 4",
			"tx_kernel_router_solicits 2",
			"tx_errors 1 TROUBLE: Send completions with an error status: the packet may not have arrived.",
			"(2 counters at 0 not shown; ipoibd stats --all shows every one, man ipoibd explains them)",
		}, 3, "tx_drop_post=3,tx_errors=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printStats(&b, tc.cs, tc.all)
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
				got = append(got, strings.Join(strings.Fields(strings.ReplaceAll(l, "\t", " ")), " "))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("stats table:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if drops, trouble := troubleSummary(tc.cs); drops != tc.drops || trouble != tc.troubles {
				t.Errorf("SIGHUP summary: drops=%d trouble=%q, want %d and %q", drops, trouble, tc.drops, tc.troubles)
			}
		})
	}
}
