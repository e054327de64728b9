// Package metrics exports the daemon's interfaces to Prometheus: a
// collector that reads the same snapshots `ipoibd show`, `neigh`, `conn`
// and `stats` print, at scrape time only, and an HTTP endpoint serving it.
// Nothing here is on the datapath: between scrapes it costs nothing, and a
// scrape is a handful of requests to each interface's control goroutine.
//
// The metrics (every one carries an interface label, the TUN's name, since
// one daemon may serve several interfaces):
//
//	name                        type     labels beside interface      value
//	ipoibd_<counter>_total      counter  -                            every counter of `ipoibd stats`, e.g.
//	                                                                  ipoibd_tx_bytes_total, ipoibd_tx_drop_no_neighbor_total,
//	                                                                  ipoibd_cm_established_total, ipoibd_conn_retransmits_total,
//	                                                                  ipoibd_dev_rx_drop_psn_total
//	ipoibd_info                 gauge    device, link_layer,          1
//	                                     link_addr, pkey, mode, cm
//	ipoibd_mtu_bytes            gauge    -                            the interface MTU
//	ipoibd_ud_mtu_bytes         gauge    -                            the UD (datagram) MTU
//	ipoibd_ib_mtu_bytes         gauge    -                            the port's active IB MTU
//	ipoibd_neighbors            gauge    state, via                   neighbor entries (`ipoibd neigh`), by state
//	                                                                  (REACHABLE, ..., CANDIDATE) and path (RC, UC, UD, "-")
//	ipoibd_connections          gauge    type, direction, state       connections (`ipoibd conn`): RC/UC, in/out, state
//	ipoibd_peer_tx_bytes_total  counter  peer, link, direction        IP octets sent and received on one connection;
//	ipoibd_peer_rx_bytes_total                                        only with perPeer > 0 (--metrics-per-peer), see below
//
// The counters' HELP is their entry in package counterdoc's table: what
// they count, and whether a value above 0 is trouble.
// The counters' names are the daemon's own (ipoib, cm and the provider
// name them; cm_, conn_ and dev_ prefix the CM's, the connections' summed
// QP counters and the device's), so adding a counter there adds a metric
// here. The daemon guarantees they never go backwards. A gauge combination
// with nothing in it is absent rather than 0. Serve adds the Go runtime's
// go_*, the process's process_* and the handler's promhttp_* metrics.
//
// Per-peer series are off by default: a label per peer is unbounded on a
// large fabric. With perPeer N > 0, each interface's N established
// connections that carried the most octets (both ways) have a series each:
// peer is the peer's first IP address (IPv4 first; "" when no neighbor
// names it), link its UD QPN and port GUID as `ipoibd conn` shows them
// (QPN@GUID: a restarted peer is a new series), direction in or out. A
// connection's counters start at 0 when it is made, as after a reset; one
// that leaves the top N, or goes, has no series until it is back.
package metrics

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ipoibd/ipoibd/counterdoc"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "ipoibd"

// snapshot is what one scrape reads of one interface.
type snapshot struct {
	info      ipoib.Info
	stats     []ib.Counter
	neighbors []ipoib.NeighInfo
	conns     []ipoib.ConnInfo
}

// Interface is what the collector reads of an interface: a
// *ipoib.Interface, or one over several ports (bond.Bond).
type Interface interface {
	Show() ipoib.Info
	Stats() []ib.Counter
	Neighbors() []ipoib.NeighInfo
	Connections() []ipoib.ConnInfo
}

func take(i Interface) snapshot {
	return snapshot{info: i.Show(), stats: i.Stats(), neighbors: i.Neighbors(), conns: i.Connections()}
}

var (
	infoDesc = prometheus.NewDesc(namespace+"_info", "The interface: its device, link layer, link address, P_Key, IPoIB mode and connection service (\"\" in datagram mode); always 1.",
		[]string{"interface", "device", "link_layer", "link_addr", "pkey", "mode", "cm"}, nil)
	mtuDesc   = prometheus.NewDesc(namespace+"_mtu_bytes", "The interface MTU.", []string{"interface"}, nil)
	udMTUDesc = prometheus.NewDesc(namespace+"_ud_mtu_bytes", "The UD (datagram) MTU.", []string{"interface"}, nil)
	ibMTUDesc = prometheus.NewDesc(namespace+"_ib_mtu_bytes", "The port's active InfiniBand MTU.", []string{"interface"}, nil)
	neighDesc = prometheus.NewDesc(namespace+"_neighbors", "Neighbor entries by state (CANDIDATE: learned from a solicitation, unused) and path (RC, UC, UD, \"-\" unresolved), as ipoibd neigh lists them.",
		[]string{"interface", "state", "via"}, nil)
	connDesc = prometheus.NewDesc(namespace+"_connections", "Connections by type (RC, UC), direction (out: we connected, in: the peer did) and state, as ipoibd conn lists them.",
		[]string{"interface", "type", "direction", "state"}, nil)
	peerLabels = []string{"interface", "peer", "link", "direction"}
	peerTxDesc = prometheus.NewDesc(namespace+"_peer_tx_bytes_total", "IP octets sent on one connection, for the --metrics-per-peer connections that carried the most; peer is its first IP address, link its QPN@GUID.",
		peerLabels, nil)
	peerRxDesc = prometheus.NewDesc(namespace+"_peer_rx_bytes_total", "IP octets received on one connection, for the --metrics-per-peer connections that carried the most; peer is its first IP address, link its QPN@GUID.",
		peerLabels, nil)
)

// collector is unchecked (Describe sends nothing): the counters are
// whatever the interface and its provider have, known only at scrape time.
type collector struct {
	source  func() []snapshot
	perPeer int // connections per interface with series of their own

	mu    sync.Mutex
	descs map[string]counterDesc // counter name → its metric, made once
}

type counterDesc struct {
	desc *prometheus.Desc
	name string // the metric's
}

// NewCollector returns a collector of the interfaces ifaces returns at each
// scrape (a function, so that interfaces added or removed while the daemon
// runs are followed), with per-connection series for the perPeer busiest
// connections of each (0: none).
func NewCollector[I Interface](ifaces func() []I, perPeer int) prometheus.Collector {
	return newCollector(func() []snapshot {
		var out []snapshot
		for _, i := range ifaces() {
			out = append(out, take(i))
		}
		return out
	}, perPeer)
}

func newCollector(source func() []snapshot, perPeer int) *collector {
	return &collector{source: source, perPeer: perPeer, descs: map[string]counterDesc{}}
}

func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.source() {
		c.collect(s, ch)
	}
}

type neighKey struct{ state, via string }
type connKey struct{ typ, dir, state string }

func (c *collector) collect(s snapshot, ch chan<- prometheus.Metric) {
	name := s.info.Name
	if name == "" {
		// Closed between ifaces() and the snapshot (a child removed):
		// its snapshots are empty, and it is gone from the next scrape.
		return
	}
	ch <- prometheus.MustNewConstMetric(infoDesc, prometheus.GaugeValue, 1,
		name, s.info.Device, s.info.LinkLayer, s.info.LinkAddr, fmt.Sprintf("0x%04x", s.info.PKey), s.info.Mode, s.info.CM)
	ch <- prometheus.MustNewConstMetric(mtuDesc, prometheus.GaugeValue, float64(s.info.MTU), name)
	ch <- prometheus.MustNewConstMetric(udMTUDesc, prometheus.GaugeValue, float64(s.info.UDMTU), name)
	ch <- prometheus.MustNewConstMetric(ibMTUDesc, prometheus.GaugeValue, float64(s.info.IBMTU), name)

	neighs := map[neighKey]int{}
	for _, n := range s.neighbors {
		neighs[neighKey{n.State, n.Via}]++
	}
	for k, n := range neighs {
		ch <- prometheus.MustNewConstMetric(neighDesc, prometheus.GaugeValue, float64(n), name, k.state, k.via)
	}
	conns := map[connKey]int{}
	for _, x := range s.conns {
		conns[connKey{x.Type, x.Direction, x.State}]++
	}
	for k, n := range conns {
		ch <- prometheus.MustNewConstMetric(connDesc, prometheus.GaugeValue, float64(n), name, k.typ, k.dir, k.state)
	}

	for _, p := range topPeers(s.conns, c.perPeer) {
		ch <- prometheus.MustNewConstMetric(peerTxDesc, prometheus.CounterValue, float64(p.TxBytes), name, p.peer, p.link, p.Direction)
		ch <- prometheus.MustNewConstMetric(peerRxDesc, prometheus.CounterValue, float64(p.RxBytes), name, p.peer, p.link, p.Direction)
	}

	// Two counters of one metric name would make the registry refuse the
	// whole scrape; the first one is kept.
	seen := make(map[string]bool, len(s.stats))
	for _, x := range s.stats {
		d := c.counter(x.Name)
		if seen[d.name] {
			continue
		}
		seen[d.name] = true
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(x.Value), name)
	}
}

// peerConn is a connection with a series of its own, and its labels.
type peerConn struct {
	ipoib.ConnInfo
	peer, link string
}

// topPeers returns the n established connections of conns that carried
// the most octets both ways (ties in label order), one per label set: a
// second connection under the same labels (a peer's REQ repeated) would
// make the scrape fail.
func topPeers(conns []ipoib.ConnInfo, n int) []peerConn {
	if n <= 0 {
		return nil
	}
	var all []peerConn
	for _, x := range conns {
		if x.State != "established" {
			continue
		}
		p := peerConn{ConnInfo: x, link: x.ShortLink()}
		if len(x.PeerIPs) > 0 {
			p.peer = x.PeerIPs[0]
		}
		all = append(all, p)
	}
	key := func(p peerConn) string { return p.peer + " " + p.link + " " + p.Direction }
	slices.SortFunc(all, func(a, b peerConn) int {
		if c := cmp.Compare(b.TxBytes+b.RxBytes, a.TxBytes+a.RxBytes); c != 0 {
			return c
		}
		return strings.Compare(key(a), key(b))
	})
	seen := map[string]bool{}
	out := all[:0]
	for _, p := range all {
		if len(out) == n {
			break
		}
		if !seen[key(p)] {
			seen[key(p)] = true
			out = append(out, p)
		}
	}
	return out
}

// counter returns the metric of the counter called name, made on first
// use: the set is small and fixed per provider, so the cache stays small.
func (c *collector) counter(name string) counterDesc {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.descs[name]; ok {
		return d
	}
	d := counterDesc{name: CounterName(name)}
	d.desc = prometheus.NewDesc(d.name, counterHelp(name), []string{"interface"}, nil)
	c.descs[name] = d
	return d
}

// CounterName is the metric name of one of `ipoibd stats`'s counters:
// ipoibd_<name>_total, with anything outside [a-z0-9_] made '_' (the
// daemon's names need none of it; a provider's sysfs names might).
func CounterName(name string) string {
	var b strings.Builder
	b.WriteString(namespace + "_")
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	b.WriteString("_total")
	return b.String()
}

// counterHelp is the counter's meaning from the counter table, and
// whether a value above 0 is trouble; a counter the table does not know
// (a provider's new sysfs file) gets a generic text.
func counterHelp(name string) string {
	if e, ok := counterdoc.Lookup(name); ok {
		h := e.Meaning
		if e.Trouble {
			h += " Above 0: trouble (a loss or a failure)."
		}
		return h + " (ipoibd stats " + name + ")"
	}
	what := "interface"
	switch {
	case strings.HasPrefix(name, "cm_"):
		what = "connection manager"
	case strings.HasPrefix(name, "conn_"):
		what = "connections' QPs, summed over every connection, gone ones included,"
	case strings.HasPrefix(name, "dev_"):
		what = "InfiniBand device"
	}
	return "The " + what + " counter " + strconv.Quote(name) + " of ipoibd stats; drops are counted under their cause."
}

// Serve listens on addr (host:port; the host an IP address, or empty for
// every address) and serves c, the Go runtime's and the process's metrics
// at /metrics, from a registry of its own. It returns once listening, or
// with the listen error; closing the result stops the server.
func Serve(addr string, c prometheus.Collector, log *slog.Logger) (io.Closer, error) {
	h, err := handler(c, log)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics endpoint stopped", "err", err)
		}
	}()
	log.Info("metrics endpoint", "url", "http://"+ln.Addr().String()+"/metrics")
	return srv, nil
}

// handler serves c and the Go and process collectors from a registry of
// its own (the global one would take whatever a library registers there).
func handler(c prometheus.Collector, log *slog.Logger) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	for _, x := range []prometheus.Collector{c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(x); err != nil {
			return nil, err
		}
	}
	return promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: errorLog{log},
		// What can be gathered is served: one bad metric must not blank
		// the rest (it is logged and counted).
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg,
		// Each scrape asks every interface's control goroutine; a scrape
		// storm must not queue up in front of ARP and the CM.
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})), nil
}

// errorLog puts promhttp's errors in the daemon's log.
type errorLog struct{ log *slog.Logger }

func (l errorLog) Println(v ...any) {
	l.log.Warn("metrics", "err", strings.ReplaceAll(fmt.Sprint(v...), "\n", "; "))
}
