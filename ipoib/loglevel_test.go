package ipoib

import (
	"context"
	"log/slog"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// recordHandler keeps every record, at every level.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordHandler) WithGroup(string) slog.Handler            { return h }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// take returns the records so far and forgets them.
func (h *recordHandler) take() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.recs
	h.recs = nil
	return out
}

func attrOf(r slog.Record, key string) (slog.Value, bool) {
	var v slog.Value
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value, true
			return false
		}
		return true
	})
	return v, found
}

// TestDropReportLevels: the drop report puts routine drops (no neighbor,
// too big, forged input, a dead connection) in an INFO line and only what
// an operator must look into (the daemon short of room, a device failing)
// in a WARN line; a TUN that refuses writes while the operator has the
// link down is routine.
func TestDropReportLevels(t *testing.T) {
	h := &recordHandler{}
	i := &Interface{log: slog.New(h)}
	c := &i.ctl
	c.i, c.linkUp = i, true
	report := func(grow ...counter) []slog.Record {
		t.Helper()
		for _, k := range grow {
			i.ctr.inc(k)
		}
		c.now = c.now.Add(dropReportInterval)
		c.reportDrops()
		return h.take()
	}
	for _, tc := range []struct {
		name   string
		linkUp bool
		grow   []counter
		info   []string // counters in the INFO line
		warn   []string // counters in the WARN line
	}{
		{"routine", true, []counter{txDropNoNeigh, txDropNoRoute, txDropTooBig, txDropQueueFull, rxDropMalformed, learnLimited, txConnErrors, txDropPost},
			[]string{"tx_drop_no_neighbor", "tx_drop_no_route", "tx_drop_too_big", "tx_drop_queue_full", "rx_drop_malformed", "learn_rate_limited", "tx_conn_errors", "tx_drop_post"}, nil},
		{"nothing grew", true, nil, nil, nil},
		{"short of room", true, []counter{ctlDropBusy, txDropNoNeigh}, []string{"tx_drop_no_neighbor"}, []string{"ctl_drop_busy"}},
		{"device errors", true, []counter{rxErrors, rxDropTUN}, nil, []string{"rx_errors", "rx_drop_tun"}},
		{"TUN writes while the link is down", false, []counter{rxDropTUN}, []string{"rx_drop_tun"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.linkUp = tc.linkUp
			var info, warn []string
			for _, r := range report(tc.grow...) {
				var names []string
				for _, n := range counterNames {
					if _, ok := attrOf(r, n); ok {
						names = append(names, n)
					}
				}
				switch {
				case r.Level == slog.LevelInfo && r.Message == "packets dropped":
					info = append(info, names...)
				case r.Level == slog.LevelWarn && strings.HasPrefix(r.Message, "packets lost"):
					warn = append(warn, names...)
				default:
					t.Errorf("unexpected line %v %q", r.Level, r.Message)
				}
			}
			if !sameSet(info, tc.info) || !sameSet(warn, tc.warn) {
				t.Errorf("INFO line has %v, WARN line %v; want %v and %v", info, warn, tc.info, tc.warn)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range a {
		m[x] = true
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}

// logLine matches a text handler's line: its level, message and the rest.
var logLine = regexp.MustCompile(`level=(\w+) msg=("(?:[^"\\]|\\.)*"|\S+)(.*)`)

// TestRoutineEventsLogBelowWarn, on a fake pair: the connection
// up line names the peer by IP as well as by link address; a REJ from the
// peer and packets to an address nobody answers for are logged at INFO
// (the REJ's line with the peer's IP too) and leave no WARN or ERROR line.
func TestRoutineEventsLogBelowWarn(t *testing.T) {
	p := newFakePair(t)
	lines := func(msg string) []string {
		var out []string
		for _, l := range strings.Split(p.logA.String(), "\n") {
			if m := logLine.FindStringSubmatch(l); m != nil && strings.Trim(m[2], `"`) == msg {
				out = append(out, l)
			}
		}
		return out
	}
	// newPair waited for the connection to the sink's link address.
	up := lines("connection up")
	if len(up) != 1 || !strings.Contains(up[0], "level=INFO") || !strings.Contains(up[0], " peer_ip="+p.sink.String()+" ") ||
		!strings.Contains(up[0], " peer="+p.b.LinkAddr().String()) {
		t.Errorf("connection up lines %q, want one at INFO with peer=%v peer_ip=%v", up, p.b.LinkAddr(), p.sink)
	}

	// A neighbor at b's GID under a UD QPN b does not listen on: b's CM
	// answers our REQ with a REJ (invalid service ID).
	bogus := p.b.LinkAddr()
	bogus.QPN ^= 0x5a5
	other := netip.MustParseAddr("192.168.9.88")
	p.a.do(func() {
		c := &p.a.ctl
		e, _ := p.a.neigh.Create(other, c.now)
		c.apply(e, e.Heard(bogus, c.now), ib.LinkAddr{})
		c.connect(e)
	})
	deadline := time.Now().Add(10 * time.Second)
	for len(lines("connection refused")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no connection refused line after 10 s:\n%s", p.logA.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := lines("connection refused")[0]; !strings.Contains(l, "level=INFO") || !strings.Contains(l, " peer_ip="+other.String()+" ") {
		t.Errorf("refused line %q, want INFO with peer_ip=%v", l, other)
	}

	// Nobody has 192.168.9.99: resolution fails, the packets are dropped
	// and counted, and the drop report says so at INFO.
	for k := range 2 {
		p.fa.send(packetTo(p.fa.ip4, netip.MustParseAddr("192.168.9.99"), 84, byte(k)))
	}
	awaitCounter(t, p.a, txDropNoNeigh, 1)
	p.a.do(func() { p.a.ctl.reportDrops() })
	if ds := lines("packets dropped"); len(ds) == 0 || !strings.Contains(ds[len(ds)-1], "level=INFO") || !strings.Contains(ds[len(ds)-1], "tx_drop_no_neighbor=") {
		t.Errorf("drop report lines %q, want one at INFO with tx_drop_no_neighbor", ds)
	}
	for _, l := range strings.Split(p.logA.String(), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			t.Errorf("routine events logged %q", l)
		}
	}
}
