package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape is one scrape of /metrics: every sample under its name and
// labels, and its size.
type scrape struct {
	families map[string]*dto.MetricFamily
	size     int
	took     time.Duration
}

// value is the sample of name whose labels include want (name=value
// pairs), summed when several match; ok is false when none does.
func (s scrape) value(name string, want ...string) (float64, bool) {
	var sum float64
	var ok bool
	for _, m := range s.families[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for _, w := range want {
			k, v, _ := strings.Cut(w, "=")
			match = match && labels[k] == v
		}
		if !match {
			continue
		}
		ok = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		default:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, ok
}

// scrapeMetrics fetches http://addr/metrics with curl inside host k,
// trying again until the endpoint answers (the daemon listens just after
// its control socket, which is what testnet.Cluster.Start waits for).
func scrapeMetrics(t *testing.T, c *cluster, k int, addr string) scrape {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		start := time.Now()
		out, err := c.try(k, "curl", "-sS", "--fail", "--max-time", "5", "http://"+addr+"/metrics")
		took := time.Since(start)
		if err == nil {
			p := expfmt.NewTextParser(model.UTF8Validation)
			mfs, err := p.TextToMetricFamilies(strings.NewReader(out))
			if err != nil {
				t.Fatalf("h%d: the scrape of %s does not parse: %v\n%s", k, addr, err, out)
			}
			return scrape{families: mfs, size: len(out), took: took}
		}
		if time.Now().After(deadline) {
			t.Fatalf("h%d: no answer from http://%s/metrics within 10 s: %v\n%s", k, addr, err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// iperf3Bytes runs a TCP test from host a to b and returns the payload
// octets the sender sent and the receiver received.
func iperf3Bytes(t *testing.T, c *cluster, a, b int, dst string, seconds int) (sent, received float64) {
	t.Helper()
	r := runIperf3(t, c, a, b, dst, seconds)
	return r.sent, r.received
}

// TestMetricsEndToEnd: two daemons serve /metrics (on IPv4 and IPv6
// loopback); iperf3 between them shows in the counters at least as many
// octets as iperf3 moved, the connection and neighbor gauges show the RC
// path, every sample names its interface (a P_Key child's too), the
// counters agree with `ipoibd stats`, and no drop counter grew with the
// traffic. Per-peer series are there only where --metrics-per-peer asks,
// and no more of them than it says.
func TestMetricsEndToEnd(t *testing.T) {
	if _, err := lookTools("curl"); err != nil {
		t.Skip(err)
	}
	c := newCluster(t, "metrics", 2)
	const addr1, addr2 = "127.0.0.1:9468", "[::1]:9468"
	child := fmt.Sprintf("0x8001=192.168.%d.101/24", c.net)
	// h1 has a series for its busiest connection (of two: its own to h2,
	// h2's to it); h2 none.
	c.start(1, "--ifname", "ibm", "--metrics-listen", addr1, "--metrics-per-peer", "1", "--softib-pkeys", "0xffff,0x8001", "--child", child)
	c.start(2, "--ifname", "ibm", "--metrics-listen", addr2)
	c.ping(1, c.ip4(2), 1) // resolution and the RC connection
	before1, before2 := scrapeMetrics(t, c, 1, addr1), scrapeMetrics(t, c, 2, addr2)
	sent, received := iperf3Bytes(t, c, 1, 2, c.ip4(2), 2)
	after1, after2 := scrapeMetrics(t, c, 1, addr1), scrapeMetrics(t, c, 2, addr2)
	t.Logf("iperf3: %.0f octets sent, %.0f received; scrape of h1: %d octets in %v (curl included), %d metric families",
		sent, received, after1.size, after1.took, len(after1.families))
	if sent <= 0 || received <= 0 {
		t.Fatalf("iperf3 moved nothing: sent %.0f, received %.0f", sent, received)
	}

	grew := func(before, after scrape, name string, labels ...string) float64 {
		t.Helper()
		b, _ := before.value(name, labels...)
		a, ok := after.value(name, labels...)
		if !ok {
			t.Fatalf("no %s%v", name, labels)
		}
		if a < b {
			t.Errorf("%s%v went backwards: %v, then %v", name, labels, b, a)
		}
		return a - b
	}
	ibm := "interface=ibm"
	for _, tc := range []struct {
		what        string
		before      scrape
		after       scrape
		name        string
		atLeast     float64
		description string
	}{
		// The interface counts IP packets (headers included), iperf3
		// payload: the counters must have seen at least iperf3's octets.
		// h1's bound is what h2's iperf3 read, not what h1's wrote: every
		// octet read crossed h1's daemon before, but octets written may
		// still sit in h1's socket when iperf3 exits, or never leave it
		// when the server's close resets the connection.
		{"h1 tx", before1, after1, "ipoibd_tx_bytes_total", received, "octets iperf3 received"},
		{"h1 connected", before1, after1, "ipoibd_tx_connected_total", received / 65520, "packets of at most 65520 octets over RC"},
		{"h1 RC QPs", before1, after1, "ipoibd_conn_tx_bytes_total", received, "octets on the connections' QPs"},
		{"h2 rx", before2, after2, "ipoibd_rx_bytes_total", received, "octets iperf3 received"},
		{"h2 rx packets", before2, after2, "ipoibd_rx_packets_total", received / 65520, "packets of at most 65520 octets"},
	} {
		if d := grew(tc.before, tc.after, tc.name, ibm); d < tc.atLeast {
			t.Errorf("%s: %s grew by %.0f, want at least %.0f (%s)", tc.what, tc.name, d, tc.atLeast, tc.description)
		} else {
			t.Logf("%s: %s grew by %.0f (%.4f × %s)", tc.what, tc.name, d, d/tc.atLeast, tc.description)
		}
	}

	// Per-peer series: on h1, one per interface at most, for its
	// connection to h2, which carried iperf3's octets; none on h2.
	for _, name := range []string{"ipoibd_peer_tx_bytes_total", "ipoibd_peer_rx_bytes_total"} {
		perIface := map[string]int{}
		for _, m := range after1.families[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "interface" {
					perIface[l.GetValue()]++
				}
			}
		}
		if perIface["ibm"] != 1 || len(perIface) != 1 {
			t.Errorf("h1: %s series by interface %v, want one, for ibm (--metrics-per-peer 1)", name, perIface)
		}
		if mf, ok := after2.families[name]; ok {
			t.Errorf("h2: %d %s series without --metrics-per-peer", len(mf.GetMetric()), name)
		}
	}
	peer := []string{ibm, "peer=" + c.ip4(2), "direction=out"}
	if d := grew(before1, after1, "ipoibd_peer_tx_bytes_total", peer...); d < received {
		t.Errorf("h1: ipoibd_peer_tx_bytes_total%v grew by %.0f, want at least iperf3's %.0f octets", peer, d, received)
	}

	// Drops: none of the interfaces' or the fabric's drop counters grew
	// by more than a trace of the packets moved (the kernel's own
	// neighbor discovery, dropped by design, and the like).
	packets := grew(before1, after1, "ipoibd_tx_packets_total", ibm) + grew(before2, after2, "ipoibd_rx_packets_total", ibm)
	for k, s := range map[int][2]scrape{1: {before1, after1}, 2: {before2, after2}} {
		var names []string
		for name := range s[1].families {
			if strings.HasPrefix(name, "ipoibd_") && (strings.Contains(name, "drop") || strings.HasSuffix(name, "_errors_total")) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		if len(names) < 20 {
			t.Errorf("h%d: only %d drop and error counters: %v", k, len(names), names)
		}
		for _, name := range names {
			if d := grew(s[0], s[1], name, ibm); d > 10+packets/1000 {
				t.Errorf("h%d: %s grew by %.0f with %.0f packets moved", k, name, d, packets)
			} else if d > 0 {
				t.Logf("h%d: %s grew by %.0f", k, name, d)
			}
		}
	}

	// Gauges: the RC connection h1 opened, the neighbor over it, the MTU.
	for _, tc := range []struct {
		s      scrape
		name   string
		labels []string
		min    float64
	}{
		{after1, "ipoibd_connections", []string{ibm, "type=RC", "direction=out", "state=established"}, 1},
		{after2, "ipoibd_connections", []string{ibm, "type=RC", "state=established"}, 1},
		{after1, "ipoibd_neighbors", []string{ibm, "state=REACHABLE", "via=RC"}, 1},
		{after1, "ipoibd_mtu_bytes", []string{ibm}, 65520},
		{after1, "ipoibd_info", []string{ibm, "mode=connected", "pkey=0xffff", "device=softib0"}, 1},
		{after1, "ipoibd_info", []string{"interface=ibm.8001", "pkey=0x8001"}, 1},
		{after2, "ipoibd_info", []string{ibm}, 1},
		{after1, "go_goroutines", nil, 1},
		{after1, "process_resident_memory_bytes", nil, 1 << 20},
	} {
		if v, ok := tc.s.value(tc.name, tc.labels...); !ok || v < tc.min {
			t.Errorf("%s%v = %v (present %v), want at least %v", tc.name, tc.labels, v, ok, tc.min)
		}
	}

	// Every ipoibd_ sample names its interface: the TUN's name.
	for name, mf := range after1.families {
		if !strings.HasPrefix(name, "ipoibd_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var iface string
			for _, l := range m.GetLabel() {
				if l.GetName() == "interface" {
					iface = l.GetValue()
				}
			}
			if iface != "ibm" && iface != "ibm.8001" {
				t.Errorf("%s %v: interface label %q, want ibm or ibm.8001", name, m.GetLabel(), iface)
			}
		}
	}

	// The counters are ipoibd stats's, under their names: none missing,
	// none ahead of stats read afterwards.
	for _, k := range []int{1, 2} {
		s := map[int]scrape{1: after1, 2: after2}[k]
		var stats map[string]uint64
		if err := json.Unmarshal([]byte(c.on(k, binary, "stats", "ibm", "--json")), &stats); err != nil || len(stats) < 60 {
			t.Fatalf("h%d: ipoibd stats: %v, %d counters", k, err, len(stats))
		}
		for name, v := range stats {
			got, ok := s.value("ipoibd_"+name+"_total", ibm)
			if !ok || got > float64(v) || math.IsNaN(got) {
				t.Errorf("h%d: ipoibd_%s_total = %v (present %v), ipoibd stats says %d", k, name, got, ok, v)
			}
		}
	}
}

// TestMetricsListenMistakes: a bad --metrics-listen ends the daemon with
// one clear line before anything is made, and an address in use with
// one naming it, leaving no interface behind; the daemon holding the
// address keeps serving.
func TestMetricsListenMistakes(t *testing.T) {
	for _, tc := range []struct {
		addr, want string
	}{
		{"nonsense", `--metrics-listen "nonsense": want IP:PORT`},
		{"127.0.0.1", `--metrics-listen "127.0.0.1": want IP:PORT`},
		{"localhost:9468", `"localhost" is not an IP address`},
		{"127.0.0.1:0", `port "0": want 1-65535`},
		{"[::1]:70000", `port "70000": want 1-65535`},
		{"127.0.0.1:http", `port "http"`},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			out, errOut, code := runBinary(t, binary, "run", "--underlay", "192.0.2.1", "--metrics-listen", tc.addr)
			if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "ipoibd: ") || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want status %d and one line with %q", code, out, errOut, exitUsage, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics-per-peer", "5"}, "--metrics-per-peer 5: needs --metrics-listen"},
		{[]string{"--metrics-listen", "127.0.0.1:9468", "--metrics-per-peer", "-1"}, "--metrics-per-peer -1: want 0 (off) to 1000"},
		{[]string{"--metrics-listen", "127.0.0.1:9468", "--metrics-per-peer", "1001"}, "--metrics-per-peer 1001: want 0 (off) to 1000"},
		{[]string{"--metrics-per-peer", "many"}, `invalid argument "many" for "--metrics-per-peer"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := runBinary(t, binary, append([]string{"run", "--underlay", "192.0.2.1"}, tc.args...)...)
			if code != exitUsage || out != "" || !strings.HasPrefix(errOut, "ipoibd: ") || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want status %d and a line with %q", code, out, errOut, exitUsage, tc.want)
			}
		})
	}
	for _, addr := range []string{"127.0.0.1:9468", "[::1]:9468", ":9468", "[fe80::1%eth0]:9468"} {
		if err := checkMetricsListen(addr); err != nil {
			t.Errorf("--metrics-listen %s refused: %v", addr, err)
		}
	}

	t.Run("in use", func(t *testing.T) {
		c := newCluster(t, "metricsuse", 1)
		const addr = "127.0.0.1:9468"
		c.start(1, "--metrics-listen", addr)
		// On a port of its own: the underlay address on the default
		// port is the first daemon's alone.
		out, err := c.try(1, "timeout", "10", binary, "--underlay", c.underlay(1), "--softib-port", "4793",
			"--ifname", "ibm2", "--addr", fmt.Sprintf("192.168.%d.102/24", c.net), "--metrics-listen", addr)
		var exit *exec.ExitError
		lines := strings.Split(strings.TrimSpace(out), "\n")
		last := lines[len(lines)-1]
		if !asExit(err, &exit) || exit.ExitCode() != 1 || !strings.HasPrefix(last, "ipoibd: --metrics-listen: ") ||
			!strings.Contains(last, addr) || !strings.Contains(last, "address already in use") {
			t.Fatalf("second daemon on %s: %v, want status 1 and a line saying the address is in use:\n%s", addr, err, out)
		}
		t.Logf("second daemon: %s", last)
		if links := c.on(1, "ip", "-br", "link"); strings.Contains(links, "ibm2") {
			t.Errorf("interface left behind:\n%s", links)
		}
		if v, ok := scrapeMetrics(t, c, 1, addr).value("ipoibd_info", "interface=ib0"); !ok || v != 1 {
			t.Errorf("the first daemon's endpoint lost ib0: ipoibd_info %v %v", v, ok)
		}
	})
}
