package metrics

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/softib"
	"github.com/ipoibd/ipoibd/tun"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Real interfaces over softib in namespaces of their own (root only): the
// one NewCollector reads, and a peer that holds many addresses, so that
// the first one can have that many resolved neighbors.

type host struct {
	iface *ipoib.Interface
	conn  *net.UDPConn // in the interface's namespace, for traffic to the peer's addresses
}

// peerAddr is the peer's k-th address; the measured interface is 10.200.0.1.
func peerAddr(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 200, byte(1 + k/250), byte(1 + k%250)})
}

// newHost makes the measured interface and a peer with peerAddrs
// addresses on one bridge.
func newHost(tb testing.TB, peerAddrs int) *host {
	tb.Helper()
	n := testnet.New(tb, testnet.Config{Hosts: 2})
	h := &host{}
	// The peer first, so that it is closed last: the measured interface
	// ends as a daemon does, with its peer still there.
	for _, k := range []int{1, 0} {
		// A /16, so that thousands of neighbors fit in the subnet.
		addrs := []netip.Prefix{netip.MustParsePrefix("10.200.0.1/16")}
		if k == 1 {
			addrs = addrs[:0]
			for a := range max(peerAddrs, 1) {
				addrs = append(addrs, netip.PrefixFrom(peerAddr(a), 16))
			}
		}
		n.In(k, func() {
			dev, err := softib.Open(softib.Config{Addr: n.Hosts[k].Addr})
			if err != nil {
				tb.Fatal(err)
			}
			cfg := ipoib.Config{Name: "ibm0", Device: dev, Log: quiet(), Addrs: addrs}
			nc, err := cfg.NetdevConfig()
			if err == nil {
				cfg.Netdev, err = tun.OpenNetdev(nc, "") // in n.In's namespace
			}
			var i *ipoib.Interface
			if err == nil {
				i, err = ipoib.New(cfg)
			}
			if err != nil {
				_ = dev.Close()
				tb.Fatal(err)
			}
			i.Start()
			tb.Cleanup(func() { i.Close(); _ = dev.Close() })
			if k == 0 {
				h.iface = i
				if h.conn, err = net.ListenUDP("udp4", nil); err != nil {
					tb.Fatal(err)
				}
				tb.Cleanup(func() { h.conn.Close() })
			}
		})
	}
	return h
}

// neighbors makes the interface hold at least n neighbors: one datagram
// to each of the peer's first n addresses resolves each. They go in
// batches (a packet waiting for resolution holds one of the few transmit
// slots), again until each batch is in the table.
func (h *host) neighbors(tb testing.TB, n int) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for have := h.iface.Show().Neighbors; have < n; have = h.iface.Show().Neighbors {
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d neighbors after 60 s", have, n)
		}
		for k := have; k < min(n, have+100); k++ {
			if _, err := h.conn.WriteToUDPAddrPort([]byte("x"), netip.AddrPortFrom(peerAddr(k), 9)); err != nil {
				tb.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func gatherMap(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		m[mf.GetName()] = mf
	}
	return m
}

// TestCollectorOfAnInterface: every counter the interface, its CM and its
// device have is exported under its own name (none lost to a collision)
// with the interface's name as label, and the gauges say what show and
// neigh say.
func TestCollectorOfAnInterface(t *testing.T) {
	h := newHost(t, 3)
	h.neighbors(t, 3)
	// Resolved, the peer gets a connection: wait for it to be up.
	deadline := time.Now().Add(10 * time.Second)
	for !slices.ContainsFunc(h.iface.Connections(), func(c ipoib.ConnInfo) bool { return c.State == "established" }) {
		if time.Now().After(deadline) {
			t.Fatalf("no connection established within 10 s: %+v", h.iface.Connections())
		}
		time.Sleep(10 * time.Millisecond)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(func() []*ipoib.Interface { return []*ipoib.Interface{h.iface} }, 0))
	got := gatherMap(t, reg)
	stats := h.iface.Stats() // read after: counters only grow
	names := map[string]bool{}
	for _, c := range stats {
		name := CounterName(c.Name)
		if names[name] {
			t.Errorf("two counters named %s", name)
		}
		names[name] = true
		mf := got[name]
		if mf == nil || mf.GetType() != dto.MetricType_COUNTER || len(mf.Metric) != 1 {
			t.Errorf("counter %s: %v", name, mf)
			continue
		}
		m := mf.Metric[0]
		if v := m.GetCounter().GetValue(); v > float64(c.Value) {
			t.Errorf("%s = %v, later stats say %d", name, v, c.Value)
		}
		if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "interface" || l[0].GetValue() != "ibm0" {
			t.Errorf("%s labels %v, want interface=ibm0", name, l)
		}
	}
	if len(stats) < 60 {
		t.Errorf("only %d counters", len(stats))
	}
	gauge := func(name string) float64 {
		var sum float64
		for _, m := range got[name].GetMetric() {
			sum += m.GetGauge().GetValue()
		}
		return sum
	}
	info := h.iface.Show()
	if mtu := gauge("ipoibd_mtu_bytes"); mtu != 65520 || float64(info.MTU) != mtu {
		t.Errorf("ipoibd_mtu_bytes %v, show says %d", mtu, info.MTU)
	}
	if n := gauge("ipoibd_neighbors"); n != float64(info.Neighbors+info.Candidates) || n < 3 {
		t.Errorf("ipoibd_neighbors sums to %v, show says %d neighbors and %d candidates", n, info.Neighbors, info.Candidates)
	}
	if gauge("ipoibd_info") != 1 {
		t.Errorf("ipoibd_info %v, want 1", gauge("ipoibd_info"))
	}
	// The three neighbors are one peer: one connection of ours to it
	// (and maybe its own to us, as it replied).
	if c, conns := gauge("ipoibd_connections"), h.iface.Connections(); c < 1 || c > float64(len(conns)) {
		t.Errorf("ipoibd_connections sums to %v, conn then lists %+v", c, conns)
	}
}

// benchNeighbors bounds the neighbors of BenchmarkScrape (the whole run
// takes about 5 s at 10,000).
var benchNeighbors = flag.Int("neighbors", 10000, "BenchmarkScrape: most neighbors (0, 100, 1000, 10000, 65536)")

// BenchmarkScrape is one whole scrape of /metrics of one interface with N
// neighbors, through the HTTP handler as Prometheus asks for it
// (uncompressed text), Go and process metrics included; collect=ipoibd is
// the collector of this package alone (the snapshots and their metrics,
// no encoding).
func BenchmarkScrape(b *testing.B) {
	start := time.Now()
	h := newHost(b, *benchNeighbors)
	b.Logf("peer with %d addresses up in %v", *benchNeighbors, time.Since(start))
	c := NewCollector(func() []*ipoib.Interface { return []*ipoib.Interface{h.iface} }, 0)
	for _, n := range []int{0, 100, 1000, 10000, 65536} {
		if n > *benchNeighbors {
			break
		}
		start := time.Now()
		h.neighbors(b, n)
		b.Logf("%d neighbors resolved in %v", n, time.Since(start))
		b.Run(fmt.Sprintf("neighbors=%d", n), func(b *testing.B) {
			handler, err := handler(c, quiet())
			if err != nil {
				b.Fatal(err)
			}
			req := httptest.NewRequest("GET", "/metrics", nil)
			var size int
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				w.Body = &bytes.Buffer{}
				handler.ServeHTTP(w, req)
				size = w.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/scrape")
		})
		b.Run(fmt.Sprintf("neighbors=%d/collect=ipoibd", n), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(c)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
