package metrics

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// ib0 is an interface in connected mode with traffic, neighbors in several
// states and connections both ways.
var ib0 = snapshot{
	info: ipoib.Info{Name: "ib0", Device: "softib0", LinkLayer: "Ethernet", LinkAddr: "80:00:00:48:fe:80:00:00:00:00:00:00:02:00:0a:4d:00:01:00:00",
		PKey: 0xffff, Mode: "connected", CM: "own", MTU: 65520, UDMTU: 4092, IBMTU: 4096},
	stats: []ib.Counter{
		{Name: "tx_bytes", Value: 123456789}, {Name: "tx_drop_no_neighbor", Value: 2},
		{Name: "cm_established", Value: 1}, {Name: "conn_retransmits", Value: 3}, {Name: "dev_rx_drop_psn", Value: 4},
	},
	neighbors: []ipoib.NeighInfo{
		{IP: "192.168.77.2", State: "REACHABLE", Via: "RC"}, {IP: "192.168.77.3", State: "REACHABLE", Via: "RC"},
		{IP: "192.168.77.4", State: "REACHABLE", Via: "UD"}, {IP: "192.168.77.9", State: "INCOMPLETE", Via: "-"},
		{IP: "fd00:77::5", State: "CANDIDATE", Via: "-"},
	},
	conns: []ipoib.ConnInfo{
		{Peer: "a", PeerIPs: []string{"192.168.77.2", "fd00:77::2"}, PeerGUID: "0x0200000000000002", PeerUDQPN: 0x48, Type: "RC", Direction: "out", State: "established", TxBytes: 5000, RxBytes: 10},
		{Peer: "b", PeerIPs: []string{"192.168.77.3"}, PeerGUID: "0x0200000000000003", PeerUDQPN: 0x49, Type: "RC", Direction: "out", State: "established", TxBytes: 100, RxBytes: 100},
		{Peer: "a", PeerIPs: []string{"192.168.77.2", "fd00:77::2"}, PeerGUID: "0x0200000000000002", PeerUDQPN: 0x48, Type: "RC", Direction: "in", State: "established", RxBytes: 7000},
		{Peer: "c", PeerIPs: []string{}, PeerGUID: "0x0200000000000004", PeerUDQPN: 0x4a, Type: "UC", Direction: "out", State: "req_sent", TxBytes: 1 << 40},
	},
}

// child is a P_Key child interface in datagram mode: no connections.
var child = snapshot{
	info:  ipoib.Info{Name: "ib0.8001", Device: "softib0", LinkLayer: "Ethernet", LinkAddr: "00:00:00:49:fe:80", PKey: 0x8001, Mode: "datagram", MTU: 4092, UDMTU: 4092, IBMTU: 4096},
	stats: []ib.Counter{{Name: "tx_bytes", Value: 7}, {Name: "tx_drop_no_neighbor", Value: 0}},
}

const helpTxBytes = `
# HELP ipoibd_tx_bytes_total Octets of the IP packets in tx_packets. (ipoibd stats tx_bytes)
# TYPE ipoibd_tx_bytes_total counter
`

func TestCollector(t *testing.T) {
	for _, tc := range []struct {
		name  string
		snaps []snapshot
		names []string // the metrics compared (all when none)
		want  string
	}{
		{"no interfaces", nil, nil, ""},
		{"a closed interface", []snapshot{{stats: []ib.Counter{{Name: "tx_bytes"}}, neighbors: []ipoib.NeighInfo{}}}, nil, ""},
		{"one interface", []snapshot{ib0}, nil, `
# HELP ipoibd_cm_established_total Connections that became established, in either direction. (ipoibd stats cm_established)
# TYPE ipoibd_cm_established_total counter
ipoibd_cm_established_total{interface="ib0"} 1
# HELP ipoibd_conn_retransmits_total RC packets sent again after a NAK or a timeout (recovered losses of the underlay). (ipoibd stats conn_retransmits)
# TYPE ipoibd_conn_retransmits_total counter
ipoibd_conn_retransmits_total{interface="ib0"} 3
# HELP ipoibd_connections Connections by type (RC, UC), direction (out: we connected, in: the peer did) and state, as ipoibd conn lists them.
# TYPE ipoibd_connections gauge
ipoibd_connections{direction="in",interface="ib0",state="established",type="RC"} 1
ipoibd_connections{direction="out",interface="ib0",state="established",type="RC"} 2
ipoibd_connections{direction="out",interface="ib0",state="req_sent",type="UC"} 1
# HELP ipoibd_dev_rx_drop_psn_total RC or UC packets out of the sequence window or order, dropped (RC sends them again). Above 0: trouble (a loss or a failure). (ipoibd stats dev_rx_drop_psn)
# TYPE ipoibd_dev_rx_drop_psn_total counter
ipoibd_dev_rx_drop_psn_total{interface="ib0"} 4
# HELP ipoibd_ib_mtu_bytes The port's active InfiniBand MTU.
# TYPE ipoibd_ib_mtu_bytes gauge
ipoibd_ib_mtu_bytes{interface="ib0"} 4096
# HELP ipoibd_info The interface: its device, link layer, link address, P_Key, IPoIB mode and connection service ("" in datagram mode); always 1.
# TYPE ipoibd_info gauge
ipoibd_info{cm="own",device="softib0",interface="ib0",link_addr="80:00:00:48:fe:80:00:00:00:00:00:00:02:00:0a:4d:00:01:00:00",link_layer="Ethernet",mode="connected",pkey="0xffff"} 1
# HELP ipoibd_mtu_bytes The interface MTU.
# TYPE ipoibd_mtu_bytes gauge
ipoibd_mtu_bytes{interface="ib0"} 65520
# HELP ipoibd_neighbors Neighbor entries by state (CANDIDATE: learned from a solicitation, unused) and path (RC, UC, UD, "-" unresolved), as ipoibd neigh lists them.
# TYPE ipoibd_neighbors gauge
ipoibd_neighbors{interface="ib0",state="CANDIDATE",via="-"} 1
ipoibd_neighbors{interface="ib0",state="INCOMPLETE",via="-"} 1
ipoibd_neighbors{interface="ib0",state="REACHABLE",via="RC"} 2
ipoibd_neighbors{interface="ib0",state="REACHABLE",via="UD"} 1
# HELP ipoibd_tx_bytes_total Octets of the IP packets in tx_packets. (ipoibd stats tx_bytes)
# TYPE ipoibd_tx_bytes_total counter
ipoibd_tx_bytes_total{interface="ib0"} 1.23456789e+08
# HELP ipoibd_tx_drop_no_neighbor_total Packets dropped because their neighbor could not be resolved or the neighbor table was full. Above 0: trouble (a loss or a failure). (ipoibd stats tx_drop_no_neighbor)
# TYPE ipoibd_tx_drop_no_neighbor_total counter
ipoibd_tx_drop_no_neighbor_total{interface="ib0"} 2
# HELP ipoibd_ud_mtu_bytes The UD (datagram) MTU.
# TYPE ipoibd_ud_mtu_bytes gauge
ipoibd_ud_mtu_bytes{interface="ib0"} 4092
`},
		// A daemon with a P_Key child: one series per interface, each
		// under its own label, and no connection gauge where there is none.
		{"two interfaces", []snapshot{ib0, child}, []string{"ipoibd_tx_bytes_total", "ipoibd_info", "ipoibd_connections"}, `
# HELP ipoibd_connections Connections by type (RC, UC), direction (out: we connected, in: the peer did) and state, as ipoibd conn lists them.
# TYPE ipoibd_connections gauge
ipoibd_connections{direction="in",interface="ib0",state="established",type="RC"} 1
ipoibd_connections{direction="out",interface="ib0",state="established",type="RC"} 2
ipoibd_connections{direction="out",interface="ib0",state="req_sent",type="UC"} 1
# HELP ipoibd_info The interface: its device, link layer, link address, P_Key, IPoIB mode and connection service ("" in datagram mode); always 1.
# TYPE ipoibd_info gauge
ipoibd_info{cm="own",device="softib0",interface="ib0",link_addr="80:00:00:48:fe:80:00:00:00:00:00:00:02:00:0a:4d:00:01:00:00",link_layer="Ethernet",mode="connected",pkey="0xffff"} 1
ipoibd_info{cm="",device="softib0",interface="ib0.8001",link_addr="00:00:00:49:fe:80",link_layer="Ethernet",mode="datagram",pkey="0x8001"} 1` + helpTxBytes + `
ipoibd_tx_bytes_total{interface="ib0"} 1.23456789e+08
ipoibd_tx_bytes_total{interface="ib0.8001"} 7
`},
		// A provider's sysfs names may hold characters metric names may
		// not; two names that become one keep the first, so the scrape
		// is not refused as a whole.
		// A counter the table does not know gets the generic text.
		{"an undocumented counter", []snapshot{{info: ipoib.Info{Name: "ib1"}, stats: []ib.Counter{{Name: "cm_new_thing", Value: 2}}}}, nil, `
# HELP ipoibd_cm_new_thing_total The connection manager counter "cm_new_thing" of ipoibd stats; drops are counted under their cause.
# TYPE ipoibd_cm_new_thing_total counter
ipoibd_cm_new_thing_total{interface="ib1"} 2
# HELP ipoibd_ib_mtu_bytes The port's active InfiniBand MTU.
# TYPE ipoibd_ib_mtu_bytes gauge
ipoibd_ib_mtu_bytes{interface="ib1"} 0
# HELP ipoibd_info The interface: its device, link layer, link address, P_Key, IPoIB mode and connection service ("" in datagram mode); always 1.
# TYPE ipoibd_info gauge
ipoibd_info{cm="",device="",interface="ib1",link_addr="",link_layer="",mode="",pkey="0x0000"} 1
# HELP ipoibd_mtu_bytes The interface MTU.
# TYPE ipoibd_mtu_bytes gauge
ipoibd_mtu_bytes{interface="ib1"} 0
# HELP ipoibd_ud_mtu_bytes The UD (datagram) MTU.
# TYPE ipoibd_ud_mtu_bytes gauge
ipoibd_ud_mtu_bytes{interface="ib1"} 0
`},
		{"odd and colliding names", []snapshot{{info: ipoib.Info{Name: "ib1"}, stats: []ib.Counter{{Name: "dev_hw_rx-pkts", Value: 5}, {Name: "dev_hw_rx_pkts", Value: 6}, {Name: "tx_bytes", Value: 1}}}},
			[]string{"ipoibd_dev_hw_rx_pkts_total", "ipoibd_tx_bytes_total"}, `
# HELP ipoibd_dev_hw_rx_pkts_total The adapter's own port counters from sysfs (hw_counters), under the kernel driver's names; see the adapter's documentation. (ipoibd stats dev_hw_rx-pkts)
# TYPE ipoibd_dev_hw_rx_pkts_total counter
ipoibd_dev_hw_rx_pkts_total{interface="ib1"} 5` + helpTxBytes + `
ipoibd_tx_bytes_total{interface="ib1"} 1
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(newCollector(func() []snapshot { return tc.snaps }, 0))
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tc.want), tc.names...); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestPerPeer: the per-connection series are there only when asked for,
// for at most that many established connections per interface, those that
// carried the most octets; a repeated label set is left out rather than
// failing the scrape.
func TestPerPeer(t *testing.T) {
	twin := ib0
	twin.conns = append(slices.Clone(ib0.conns), ipoib.ConnInfo{Peer: "a", PeerIPs: []string{"192.168.77.2"}, PeerGUID: "0x0200000000000002", PeerUDQPN: 0x48,
		Type: "RC", Direction: "in", State: "established", RxBytes: 1})
	const head = `
# HELP ipoibd_peer_rx_bytes_total IP octets received on one connection, for the --metrics-per-peer connections that carried the most; peer is its first IP address, link its QPN@GUID.
# TYPE ipoibd_peer_rx_bytes_total counter
`
	const txHead = `
# HELP ipoibd_peer_tx_bytes_total IP octets sent on one connection, for the --metrics-per-peer connections that carried the most; peer is its first IP address, link its QPN@GUID.
# TYPE ipoibd_peer_tx_bytes_total counter
`
	for _, tc := range []struct {
		name    string
		snaps   []snapshot
		perPeer int
		want    string
	}{
		{"off", []snapshot{ib0, child}, 0, ""},
		{"the busiest", []snapshot{ib0, child}, 1, head +
			`ipoibd_peer_rx_bytes_total{direction="in",interface="ib0",link="48@0200000000000002",peer="192.168.77.2"} 7000` + txHead +
			`ipoibd_peer_tx_bytes_total{direction="in",interface="ib0",link="48@0200000000000002",peer="192.168.77.2"} 0`},
		{"established ones only", []snapshot{ib0, child}, 10, head +
			`ipoibd_peer_rx_bytes_total{direction="in",interface="ib0",link="48@0200000000000002",peer="192.168.77.2"} 7000
ipoibd_peer_rx_bytes_total{direction="out",interface="ib0",link="48@0200000000000002",peer="192.168.77.2"} 10
ipoibd_peer_rx_bytes_total{direction="out",interface="ib0",link="49@0200000000000003",peer="192.168.77.3"} 100` + txHead +
			`ipoibd_peer_tx_bytes_total{direction="in",interface="ib0",link="48@0200000000000002",peer="192.168.77.2"} 0
ipoibd_peer_tx_bytes_total{direction="out",interface="ib0",link="48@0200000000000002",peer="192.168.77.2"} 5000
ipoibd_peer_tx_bytes_total{direction="out",interface="ib0",link="49@0200000000000003",peer="192.168.77.3"} 100`},
		{"a repeated label set", []snapshot{twin}, 10, head +
			`ipoibd_peer_rx_bytes_total{direction="in",interface="ib0",link="48@0200000000000002",peer="192.168.77.2"} 7000
ipoibd_peer_rx_bytes_total{direction="out",interface="ib0",link="48@0200000000000002",peer="192.168.77.2"} 10
ipoibd_peer_rx_bytes_total{direction="out",interface="ib0",link="49@0200000000000003",peer="192.168.77.3"} 100` + txHead +
			`ipoibd_peer_tx_bytes_total{direction="in",interface="ib0",link="48@0200000000000002",peer="192.168.77.2"} 0
ipoibd_peer_tx_bytes_total{direction="out",interface="ib0",link="48@0200000000000002",peer="192.168.77.2"} 5000
ipoibd_peer_tx_bytes_total{direction="out",interface="ib0",link="49@0200000000000003",peer="192.168.77.3"} 100`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(newCollector(func() []snapshot { return tc.snaps }, tc.perPeer))
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tc.want+"\n"), "ipoibd_peer_tx_bytes_total", "ipoibd_peer_rx_bytes_total"); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestLint: the names and types follow Prometheus's conventions (promlint:
// counters end in _total, units are base units, no camel case).
func TestLint(t *testing.T) {
	problems, err := testutil.CollectAndLint(newCollector(func() []snapshot { return []snapshot{ib0, child} }, 2))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestCounterName(t *testing.T) {
	for in, want := range map[string]string{
		"tx_drop_no_neighbor":    "ipoibd_tx_drop_no_neighbor_total",
		"cm_rej_sent_stale_conn": "ipoibd_cm_rej_sent_stale_conn_total",
		"dev_hw_Out-Of.Sequence": "ipoibd_dev_hw_out_of_sequence_total",
	} {
		if got := CounterName(in); got != want {
			t.Errorf("CounterName(%q) = %q, want %q", in, got, want)
		}
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// freeAddr returns a loopback address with a port nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestServe: /metrics carries the collector's metrics and the runtime's,
// nothing else is served, and Close stops the endpoint.
func TestServe(t *testing.T) {
	addr := freeAddr(t)
	srv, err := Serve(addr, newCollector(func() []snapshot { return []snapshot{ib0} }, 0), quiet())
	if err != nil {
		t.Fatal(err)
	}
	code, body, err := get("http://" + addr + "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	for _, want := range []string{`ipoibd_tx_bytes_total{interface="ib0"} 1.23456789e+08`, "go_goroutines ", "process_resident_memory_bytes ", "promhttp_metric_handler_requests_total{code=\"200\"}"} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if code, _, err := get("http://" + addr + "/"); err != nil || code != http.StatusNotFound {
		t.Errorf("GET /: %d %v, want 404", code, err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := get("http://" + addr + "/metrics"); err == nil {
		t.Error("the endpoint answers after Close")
	}
}

// TestServeListenError: an address that cannot be listened on is an error
// naming it, and nothing is served.
func TestServeListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := newCollector(func() []snapshot { return nil }, 0)
	for addr, want := range map[string]string{
		ln.Addr().String(): "address already in use",
		"192.0.2.1:9468":   "cannot assign requested address",
	} {
		srv, err := Serve(addr, c, quiet())
		if err == nil {
			srv.Close()
			t.Errorf("Serve(%q) succeeded", addr)
			continue
		}
		if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), want) {
			t.Errorf("Serve(%q): %v; want it to name the address and %q", addr, err, want)
		}
	}
}
