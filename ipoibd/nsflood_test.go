package main

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/forge"
	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/softib"
)

// TestSolicitationFloodDoesNotStarveResolution: a third host on the
// fabric sends h2 neighbor solicitations for h2's address from random IPv6
// sources, 2,000 a second for 30 s (one in ten also claims a link address
// that is not the sender's): half from its own underlay address, half
// spread over 31 more, so that per-node limits alone cannot keep the
// candidates under their bound. Meanwhile h1 resolves addresses of h2 it has
// never used, IPv4 and IPv6, and h2's control socket is asked every second.
// h2 must answer h1 every time and its socket must answer; its neighbors
// stay under the candidate bound with no host route for any of them, its
// RSS under twice the idle figure, its log a few lines; every solicitation
// is counted.
func TestSolicitationFloodDoesNotStarveResolution(t *testing.T) {
	const (
		rate     = 2000
		duration = 30 * time.Second
		fresh    = 3  // new addresses of h2 per family, resolved during the flood
		nodes    = 32 // sending devices on h3
	)
	c := newCluster(t, "nsflood", 3) // h3 runs no daemon: it is the sender
	c.start(1)
	c.start(2)
	c.ping(1, c.ip4(2), 1)
	c.ping(1, c.ip6(2), 1)
	var v4, v6 []string
	for k := range fresh {
		v4 = append(v4, fmt.Sprintf("192.168.%d.%d", c.net, 100+k))
		v6 = append(v6, fmt.Sprintf("fd00:%d::%d", c.net, 100+k))
		c.on(2, "ip", "addr", "add", v4[k]+"/24", "dev", "ib0")
		c.on(2, "ip", "addr", "add", v6[k]+"/64", "dev", "ib0", "nodad")
	}
	h2 := c.show(2)
	h2Link, err := ib.ParseLinkAddr(h2.LinkAddr)
	if err != nil {
		t.Fatal(err)
	}
	pid := c.pid(2)

	// The senders: softib devices with a UD QP each in h3's namespace, on
	// its address and 31 more.
	var floods []*flooder
	for k := range nodes {
		addr := c.underlay(3)
		if k > 0 {
			addr = fmt.Sprintf("10.%d.0.%d", c.net, 200+k)
			c.on(3, "ip", "addr", "add", addr+"/24", "dev", "eth0")
		}
		var dev *softib.Device
		testnet.InNamed(t, c.host(3), func() {
			dev, err = softib.Open(softib.Config{Addr: netip.MustParseAddr(addr)})
		})
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		floods = append(floods, newFlooder(t, dev, h2Link, netip.MustParseAddr(c.ip6(2)), netip.MustParsePrefix(fmt.Sprintf("fd00:%d::/64", c.net))))
	}
	f := floods[0]
	// Idle means after h2's fixed buffers were touched once: datagrams of
	// an EtherType IPoIB does not carry, dropped and counted at once,
	// cycle its 2,048-slot UD receive ring, whose pages any burst of
	// datagrams makes resident, flood or not.
	const warm = 3000
	var sent atomic.Int64
	if err := f.Run(1000, warm, &sent, f.junk); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); c.stats(2)["rx_drop_ethertype"] < warm; {
		if time.Now().After(deadline) {
			t.Fatalf("h2 counted %d of %d datagrams of a foreign EtherType", c.stats(2)["rx_drop_ethertype"], warm)
		}
		time.Sleep(50 * time.Millisecond) // polling the counter
	}
	idleRSS := rssKiB(t, pid)
	logBefore := c.logLines(2)
	before := c.stats(2)
	sent.Store(0)
	errs := make(chan error, nodes)
	for k, f := range floods {
		r := rate / 2 // the first node
		if k > 0 {
			r = rate / 2 / (nodes - 1)
		}
		go func() { errs <- f.Run(r, r*int(duration/time.Second), &sent, f.solicitation) }()
	}
	done := make(chan error, 1)
	go func() {
		var first error
		for range nodes {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		done <- first
	}()

	// While it runs: the socket answers, resolutions succeed.
	peakRSS, peakNeigh, queries := idleRSS, 0, 0
	var slowest time.Duration
	resolved := 0
	for tick := 0; ; tick++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("flooder: %v", err)
			}
			goto after
		case <-time.After(time.Second):
		}
		start := time.Now()
		n := len(c.neighbors(2)) // fails the test when the socket does not answer
		slowest = max(slowest, time.Since(start))
		queries++
		peakNeigh = max(peakNeigh, n)
		peakRSS = max(peakRSS, rssKiB(t, pid))
		// From the fifth second on, one fresh address every other second.
		if k := (tick - 4) / 2; tick >= 4 && tick%2 == 0 && k < 2*fresh {
			dst := v4[k%fresh]
			if k >= fresh {
				dst = v6[k%fresh]
			}
			if out, err := c.try(1, "ping", "-c", "1", "-W", "3", dst); err != nil {
				t.Errorf("h1 could not reach %s (a new resolution) during the flood:\n%s", dst, out)
			} else {
				resolved++
			}
		}
	}
after:
	after := c.stats(2)
	delta := func(k string) uint64 { return after[k] - before[k] }
	routes := strings.Count(c.on(2, "ip", "-4", "route", "show", "proto", "105", "dev", "ib0"), "\n") +
		strings.Count(c.on(2, "ip", "-6", "route", "show", "proto", "105", "dev", "ib0"), "\n")
	logGrew := c.logLines(2) - logBefore
	t.Logf("sent %d NS in %v; h2: nd_in +%d, learned %d, evicted %d, rate-limited %d, link mismatch %d, solicit queue full %d",
		sent.Load(), duration, delta("nd_in"), delta("learn_candidates"), delta("learn_evicted"), delta("learn_rate_limited"),
		delta("learn_link_mismatch"), delta("ctl_drop_solicit_busy"))
	t.Logf("h2: peak %d neighbors, %d host routes, RSS %d -> peak %d KiB, log +%d lines, %d socket queries (slowest %v), %d of %d fresh resolutions",
		peakNeigh, routes, idleRSS, peakRSS, logGrew, queries, slowest, resolved, 2*fresh)

	if resolved != 2*fresh {
		t.Errorf("%d of %d resolutions from h1 succeeded during the flood", resolved, 2*fresh)
	}
	if bound := neigh.DefaultMaxCandidates + 2 + 2*fresh; peakNeigh > bound {
		t.Errorf("h2 held %d neighbors, above the bound %d", peakNeigh, bound)
	}
	// Host routes (proto 105, tun.RouteProtocol) exist only for what h2's
	// traffic used: h1's two addresses.
	if routes > 2 {
		t.Errorf("h2 has host routes beyond those of its real neighbors:\n%s\n%s",
			c.on(2, "ip", "-4", "route", "show", "proto", "105"), c.on(2, "ip", "-6", "route", "show", "proto", "105"))
	}
	if peakRSS > 2*idleRSS {
		t.Errorf("h2's RSS grew from %d to %d KiB (more than twice)", idleRSS, peakRSS)
	}
	if logGrew > 40 {
		t.Errorf("h2's log grew by %d lines during the flood", logGrew)
	}
	// Every solicitation that reached the control goroutine was learned,
	// refused by the rate limit, or refused as a false claim (h1's few
	// solicitations are learned too); those that did not were counted.
	seen := delta("learn_candidates") + delta("learn_rate_limited") + delta("learn_link_mismatch")
	if nd := delta("nd_in"); seen > nd || nd-seen > 100 {
		t.Errorf("nd_in grew by %d but %d solicitations were learned or refused", nd, seen)
	}
	if got := delta("nd_in") + delta("ctl_drop_solicit_busy"); got < uint64(sent.Load())*9/10 {
		t.Errorf("h2 counted %d of %d solicitations", got, sent.Load())
	}
	if delta("learn_link_mismatch") == 0 {
		t.Error("no false link-address claim was counted")
	}
	if n := delta("learn_candidates"); n > nodes*(neigh.LearnBurst+neigh.LearnRate*uint64(duration/time.Second+5))+20 {
		t.Errorf("%d candidates learned from %d nodes in %v: the per-node rate limit did not hold", n, nodes, duration)
	}
	if delta("learn_evicted") == 0 {
		t.Errorf("no candidate was evicted: the flood did not reach the bound of %d", neigh.DefaultMaxCandidates)
	}
}

// flooder sends forged neighbor solicitations from a UD QP of its own.
type flooder struct {
	*forge.UDSender
	target netip.Addr
	prefix netip.Prefix
}

func newFlooder(t *testing.T, dev *softib.Device, to ib.LinkAddr, target netip.Addr, prefix netip.Prefix) *flooder {
	t.Helper()
	u, err := forge.NewUDSender(dev, to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	return &flooder{UDSender: u, target: target, prefix: prefix}
}

// solicitation is the k-th forged NS: from a random address in the
// prefix, claiming the sender's own link address, or every tenth time a
// link address on another node.
func (f *flooder) solicitation(buf []byte, k int) (int, error) {
	var low [8]byte
	_, _ = rand.Read(low[:])
	src := f.prefix.Addr().As16()
	copy(src[8:], low[:])
	claim := f.Self()
	if k%10 == 9 {
		claim.GID[15] ^= 0x5a
	}
	return forge.Solicitation(buf, netip.AddrFrom16(src), f.target, claim)
}

// junk is a datagram of an EtherType IPoIB does not carry.
func (f *flooder) junk(buf []byte, k int) (int, error) {
	_ = encap.PutHeader(buf, 0x88b5) // IEEE local experimental
	return 64, nil
}

// pid is host k's daemon's process ID.
func (c *cluster) pid(k int) int {
	c.t.Helper()
	pid, err := c.tn.Pid(k)
	if err != nil {
		c.t.Fatal(err)
	}
	return pid
}

// logLines counts the lines of host k's daemon log.
func (c *cluster) logLines(k int) int {
	c.t.Helper()
	out, err := os.ReadFile(c.tn.LogPath(k))
	if err != nil {
		c.t.Fatal(err)
	}
	return strings.Count(string(out), "\n")
}

// rssKiB reads a process's resident set size.
func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}
