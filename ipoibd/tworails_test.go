package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ipoib"
)

// portTraffic is how many packets the port dev sent and received.
func portTraffic(i ipoib.Info, dev string) (tx, rx uint64) {
	for _, p := range i.Ports {
		if p.Device == dev {
			return p.TxPackets, p.RxPackets
		}
	}
	return 0, 0
}

// awaitRails waits until h1's and h2's second rails know each other's
// second port: a flow started before goes over the active ports (the
// first reply steers it there) and stays.
func awaitRails(t *testing.T, c *cluster) {
	t.Helper()
	h1, h2 := c.show(1), c.show(2)
	await(t, 5*time.Second, "each two-port host's second rail knows the other's second port", func() bool {
		return c.railNeighbors(1)[c.ip4(2)].LinkAddr == h2.Ports[1].LinkAddr &&
			c.railNeighbors(2)[c.ip4(1)].LinkAddr == h1.Ports[1].LinkAddr
	})
}

// TestTwoRailsSpread runs h1 and h2 over two ports each, spreading flows
// (the default), and h3 on rail A alone. Each learns the other's second
// port (a RAIL entry); 16 TCP streams from h2 to h1 go over both rails
// (the kernel puts each on one TUN queue, at random: all 16 on one has a
// chance of 2⁻¹⁵): both of h2's ports send, both of h1's receive. UDP
// flows from h1 to the single-port h3 that the kernel puts on h1's second
// rail are handed to its active port (tx_handoffs), until h3's replies
// steer them to the active port's queue. Then h1's rail-B link goes
// down under the streams: its peers stop using it (h1 names no other
// port), and iperf3 ends well.
func TestTwoRailsSpread(t *testing.T) {
	c := newCluster(t, "spread", 3)
	railB(t, c, 1, 2, 3)
	c.start(1, "--underlay", railBAddr(c, 1), "--tun-queues", "2")
	c.start(2, "--underlay", railBAddr(c, 2), "--tun-queues", "2")
	c.start(3)
	c.ping(1, c.ip4(2), 1)
	c.ping(2, c.ip4(1), 1)
	awaitRails(t, c)
	h1, h2 := c.show(1), c.show(2)

	tx0, _ := portTraffic(h2, "softib0")
	tx1, _ := portTraffic(h2, "softib1")
	_, rx1 := portTraffic(h1, "softib1")
	r := runIperf3(t, c, 2, 1, c.ip4(1), 3, "-P", "16")
	h1, h2 = c.show(1), c.show(2)
	a, _ := portTraffic(h2, "softib0")
	b, _ := portTraffic(h2, "softib1")
	_, in1 := portTraffic(h1, "softib1")
	t.Logf("16 streams h2 → h1: %.2f Gbit/s; h2 sent %d packets on rail A, %d on rail B; h1 received %d on rail B",
		r.gbps, a-tx0, b-tx1, in1-rx1)
	// 16 streams move about 2·10⁴ packets in 3 s; both rails carry some.
	if a-tx0 < 1000 || b-tx1 < 1000 || in1-rx1 < 1000 {
		t.Errorf("the streams did not use both rails: h2 sent %d on A, %d on B; h1 received %d on B", a-tx0, b-tx1, in1-rx1)
	}

	// UDP flows to the single-port h3: those read by h1's rail are handed
	// to its active port, and arrive (with 16 flows, none on the rail's
	// queue has a chance of 2⁻¹⁶).
	iperf3Server(t, c, 3, c.ip4(3), "-1")
	out, err := c.try(1, "iperf3", "-c", c.ip4(3), "-u", "-b", "10M", "-l", "1200", "-P", "16", "-t", "2", "-J")
	if err != nil {
		t.Fatalf("UDP to h3: %v\n%s", err, out)
	}
	var udp struct {
		End struct {
			Sum struct {
				Packets     int     `json:"packets"`
				LostPercent float64 `json:"lost_percent"`
			} `json:"sum"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(out), &udp); err != nil || udp.End.Sum.Packets == 0 || udp.End.Sum.LostPercent > 1 {
		t.Errorf("UDP to h3: %d datagrams, %.2f %% lost (%v), want some and at most 1 %%", udp.End.Sum.Packets, udp.End.Sum.LostPercent, err)
	}
	st := c.stats(1)
	t.Logf("h1: tx_handoffs %d, tx_drop_handoff %d", st["tx_handoffs"], st["tx_drop_handoff"])
	if st["tx_handoffs"] == 0 || st["tx_drop_handoff"] != 0 {
		t.Errorf("h1's rail handed off %d packets to h3 (%d dropped): want some, none dropped", st["tx_handoffs"], st["tx_drop_handoff"])
	}
	if n := c.neighbors(3)[c.ip4(1)]; n.LinkAddr != h1.Ports[0].LinkAddr {
		t.Errorf("h3 knows h1 at %s, want its active port %s", n.LinkAddr, h1.Ports[0].LinkAddr)
	}

	// h1's rail B goes down under the streams.
	iperf3Server(t, c, 1, c.ip4(1), "-1")
	done := make(chan error, 1)
	var iperfOut string
	go func() {
		var err error
		iperfOut, err = c.try(2, "iperf3", "-c", c.ip4(1), "-t", "6", "-P", "8")
		done <- err
	}()
	await(t, 5*time.Second, "streams on h1's rail B", func() bool {
		_, rx := portTraffic(c.show(1), "softib1")
		return rx > in1+1000
	})
	c.on(1, "ip", "link", "set", "eth1", "down")
	await(t, 5*time.Second, "h1's rail B down", func() bool { return portState(c.show(1), "softib1") == "down" })
	await(t, 5*time.Second, "h2's second rail forgets h1's", func() bool { _, ok := c.railNeighbors(2)[c.ip4(1)]; return !ok })
	if err := <-done; err != nil {
		t.Fatalf("iperf3 across the loss of h1's rail B: %v\n%s", err, iperfOut)
	}
	if s := c.show(1); activePort(s) != "softib0" || s.Failovers != 0 {
		t.Errorf("h1 after its rail B went: ports %+v, failovers %d", s.Ports, s.Failovers)
	}
	c.ping(2, c.ip4(1), 2)
}

// TestTwoRailsBench (make bench-rails; skipped unless IPOIBD_BENCH_RAILS
// gives the runs) measures 4 TCP streams between two hosts with two ports
// each, spreading flows and in active-backup, runs interleaved, beside
// the bare underlay of one rail: what both rails bring on this machine.
func TestTwoRailsBench(t *testing.T) {
	reps, _ := strconv.Atoi(os.Getenv("IPOIBD_BENCH_RAILS"))
	if reps < 1 {
		t.Skip("a benchmark: IPOIBD_BENCH_RAILS=N runs it N times (make bench-rails)")
	}
	runs := map[string][]float64{}
	shares := map[string][]float64{}
	for rep := range reps {
		for _, mode := range []string{"spread", "active-backup", "underlay"} {
			t.Run(fmt.Sprintf("%s-%d", mode, rep+1), func(t *testing.T) {
				c := newCluster(t, "railsbench", 2)
				railB(t, c, 1, 2)
				dst := c.underlay(1) // h1's rail-A link
				if mode != "underlay" {
					for k := 1; k <= 2; k++ {
						c.start(k, "--underlay", railBAddr(c, k), "--tun-queues", "2", "--bond-mode", mode)
					}
					c.ping(2, c.ip4(1), 1)
					c.ping(1, c.ip4(2), 1)
					if mode == "spread" {
						awaitRails(t, c)
					}
					dst = c.ip4(1)
				}
				var before []uint64
				if mode != "underlay" {
					before = c.portsTx(2)
				}
				r := runIperf3(t, c, 2, 1, dst, 10, "-P", "4")
				share := 0.0
				if mode != "underlay" {
					after := c.portsTx(2)
					a, b := after[0]-before[0], after[1]-before[1]
					share = float64(b) / float64(max(a+b, 1))
				}
				runs[mode] = append(runs[mode], r.gbps)
				shares[mode] = append(shares[mode], share)
				t.Logf("%s: %.2f Gbit/s, rail B's share of h2's packets %.2f", mode, r.gbps, share)
			})
		}
	}
	t.Logf("| configuration | Gbit/s, median (runs) | rail B's share of the sender's packets (runs) |")
	t.Logf("|---|---|---|")
	for _, mode := range []string{"spread", "active-backup", "underlay"} {
		t.Logf("| %s | %.2f (%s) | %s |", mode, median(runs[mode]), floats(runs[mode], "%.2f"), floats(shares[mode], "%.2f"))
	}
}

// portsTx is how many packets each of host k's ports sent.
func (c *cluster) portsTx(k int) []uint64 {
	var out []uint64
	for _, p := range c.show(k).Ports {
		out = append(out, p.TxPackets)
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func floats(v []float64, format string) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf(format, x))
	}
	return strings.Join(s, " ")
}
