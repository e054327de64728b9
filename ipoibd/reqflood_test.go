package main

import (
	"math/rand/v2"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/forge"
	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/ipoibd/ipoibd/ipoib"
)

// TestREQFloodDoesNotStarveSetup (issue 27): a third host on the fabric
// sends h1 4,000 IPoIB-CM REQs a second from random CA GUIDs and QPNs and
// never completes one, the rate that once took every setup slot of a
// daemon with --max-conns 100. While it floods, h2's daemon starts and
// talks to h1: h2 must have its RC connection to h1 established within 2 s
// of its first ping, pings both ways must lose nothing, h1 must count what
// it refused under the cause (the flooding source's share of the setup
// slots, not the global bounds) and name the source in a rate-limited log
// line, its log growing by a few lines only. Below the CM, h1's queue of
// received MADs must drop none for being full: the flood gets only its
// share of it (package madqueue), and what it sends beyond is counted as
// refused by share, so h2's MADs always find room.
//
// Without per-source slots (cm.EngineConfig.MaxHalfOpenPerSource) the
// flood holds all 256 half-open slots (each for about 17 s: the forged
// REQs' 1 s response timeout times 16 tries) and h2's REQ draws REJ "no
// resources", then again after each backoff: no RC connection within 2 s.
func TestREQFloodDoesNotStarveSetup(t *testing.T) {
	const (
		rate      = 4000                   // REQs a second
		pings     = 60                     // each way, every 0.2 s, during the flood
		rcWithin  = 2 * time.Second        // h2's RC connection after its first ping
		most      = 30 * rate              // the flood's end if the test stalls
		logBudget = 20                     // lines h1 may log during the flood
		flooder   = 3                      // runs no daemon
		logWhat   = "refusing REQs from a" // cm's rate-limited line (cm/source.go)
	)
	c := newCluster(t, "reqflood", 3)
	c.start(1, "--max-conns", "100")
	h1, err := ib.ParseLinkAddr(c.show(1).LinkAddr)
	if err != nil {
		t.Fatal(err)
	}
	src := netip.MustParseAddr(c.underlay(flooder))
	var s *forge.Sender
	testnet.InNamed(t, c.host(flooder), func() { s, err = forge.Open(src) })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	to := netip.MustParseAddr(c.underlay(1))
	before := c.stats(1)
	logBefore := c.logLines(1)

	// The flood: REQs due by the clock, sent every 10 ms.
	var sent atomic.Int64
	stop, done := make(chan struct{}), make(chan error, 1)
	go func(stop <-chan struct{}) {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		start, k := time.Now(), 0
		gid := ib.GIDFromAddr(src)
		for {
			select {
			case <-stop:
				done <- nil
				return
			case now := <-tick.C:
				for due := min(most, int(now.Sub(start).Seconds()*rate)); k < due; k++ {
					mad, err := forge.REQ(forge.Peer{GID: gid, GUID: rand.Uint64(), UDQPN: ib.QPN(rand.Uint32()),
						QPN: ib.QPN(rand.Uint32()), PSN: rand.Uint32()}, h1.GID, h1.QPN, rand.Uint32(), rand.Uint64())
					if err == nil {
						err = s.Send(to, forge.MAD(mad))
					}
					if err != nil {
						done <- err
						return
					}
					sent.Add(1)
				}
			}
		}
	}(stop)
	var floodErr error
	stopFlood := func() (int64, error) {
		if stop != nil {
			close(stop)
			stop = nil
			floodErr = <-done
		}
		return sent.Load(), floodErr
	}
	defer func() { _, _ = stopFlood() }()

	// The flood holds what setup slots it can once h1 refuses it.
	for deadline := time.Now().Add(5 * time.Second); c.stats(1)["cm_reqs_refused"] == before["cm_reqs_refused"]; {
		if time.Now().After(deadline) {
			t.Fatalf("h1 refused none of %d REQs from one source", sent.Load())
		}
		time.Sleep(50 * time.Millisecond) // polling a counter
	}

	c.start(2)
	h2, err := ib.ParseLinkAddr(c.show(2).LinkAddr)
	if err != nil {
		t.Fatal(err)
	}
	type pingResult struct {
		out string
		err error
	}
	pingBg := func(from int, dst string) <-chan pingResult {
		r := make(chan pingResult, 1)
		go func() {
			out, err := c.try(from, "ping", "-c", strconv.Itoa(pings), "-i", "0.2", "-W", "2", dst)
			r <- pingResult{out, err}
		}()
		return r
	}
	first := time.Now() // h2's first packet to h1 follows
	p21 := pingBg(2, c.ip4(1))
	p12 := pingBg(1, c.ip4(2))

	// h2's own connection to h1: established, and h1's address sent via RC.
	var rcAfter time.Duration
	for deadline := first.Add(10 * time.Second); ; {
		if sendsOverRC(c, 2, h1, c.ip4(1)) {
			rcAfter = time.Since(first)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("h2 has no RC connection to h1 10 s after its first ping: neigh %+v, conns %+v",
				c.neighbors(2)[c.ip4(1)], c.conns(2))
		}
		time.Sleep(50 * time.Millisecond) // polling the control socket
	}
	during := sent.Load()
	// A MAD of h2's that h1's full MAD queue dropped would be sent again
	// only after h2's CM response timeout (about 4 s): said when too slow.
	madDrops := c.stats(1)["dev_rx_drop_no_recv_buffer"] - before["dev_rx_drop_no_recv_buffer"]
	shareDrops := c.stats(1)["dev_rx_drop_mad_source_share"] - before["dev_rx_drop_mad_source_share"]
	for _, p := range []<-chan pingResult{p21, p12} {
		if r := <-p; r.err != nil {
			t.Errorf("pings during the flood lost some: %v\n%s", r.err, r.out)
		} else if !strings.Contains(r.out, " 0% packet loss") {
			t.Errorf("pings during the flood:\n%s", r.out)
		}
	}
	total, err := stopFlood()
	if err != nil {
		t.Fatalf("flood: %v", err)
	}
	if total >= most {
		t.Errorf("the flood ended (%d REQs) before the pings did", total)
	}
	// h1 sees h2's connection from its side too.
	inbound := false
	for _, cn := range c.conns(1) {
		if la, err := ib.ParseLinkAddr(cn.Peer); err == nil && sameNode(la, h2) && cn.Direction == "in" && cn.State == "established" {
			inbound = true
		}
	}
	if !inbound {
		t.Errorf("h1 shows no established connection from h2: %+v", c.conns(1))
	}

	after := c.stats(1)
	delta := func(k string) uint64 { return after[k] - before[k] }
	t.Logf("%d REQs in %v; h2's RC connection %v after its first ping (%d REQs sent by then)",
		total, time.Since(first).Round(time.Millisecond), rcAfter.Round(time.Millisecond), during)
	t.Logf("h1: accepted +%d, busy source +%d, full +%d, REJ no resources +%d, MAD queue full +%d, MAD source share +%d, mads in +%d (the CM's own queues full: +%d, +%d)",
		delta("cm_accepted"), delta("cm_req_busy_source"), delta("cm_req_refused_full"),
		delta("cm_rej_sent_no_resources"), delta("dev_rx_drop_no_recv_buffer"), delta("dev_rx_drop_mad_source_share"), delta("cm_mads_in"),
		delta("cm_mad_drop_split_full"), delta("cm_mad_drop_queue_full"))
	if rcAfter > rcWithin {
		t.Errorf("h2's RC connection to h1 took %v during the flood (at most %v); h1 had dropped %d MADs for a full queue and refused %d by source share by then",
			rcAfter, rcWithin, madDrops, shareDrops)
	}
	// One source cannot fill h1's MAD queue: nothing of h2's (or anyone's)
	// was dropped there for want of room.
	if full := delta("dev_rx_drop_no_recv_buffer"); full != 0 {
		t.Errorf("h1 dropped %d MADs for a full MAD queue (%d refused by source share): the flood filled it", full, delta("dev_rx_drop_mad_source_share"))
	}
	// Refused by cause: every MAD h1's engine took was accepted or refused
	// as the flood's share (busy source), bar the few of h2's connections;
	// never for the global bounds; each refusal with a REJ; accepted only
	// up to the flood's share (and h2).
	if busy, acc, in := delta("cm_req_busy_source"), delta("cm_accepted"), delta("cm_mads_in"); busy+acc+10 < in {
		t.Errorf("h1 took %d MADs, refused %d as from a busy source and accepted %d", in, busy, acc)
	}
	if full := delta("cm_req_refused_full"); full != 0 {
		t.Errorf("h1 refused %d REQs for its global bounds: the flood reached them", full)
	}
	if rej := delta("cm_rej_sent_no_resources"); rej < delta("cm_req_busy_source") {
		t.Errorf("h1 sent %d REJs 'no resources' for %d refusals", rej, delta("cm_req_busy_source"))
	}
	if acc := delta("cm_accepted"); acc > cm.DefaultMaxHalfOpenPerSource+2 {
		t.Errorf("h1 accepted %d REQs during the flood: more than one source's share (%d) and h2's", acc, cm.DefaultMaxHalfOpenPerSource)
	}
	// Accounted for: every REQ reached the engine, or was dropped and counted.
	if got := delta("cm_mads_in") + delta("dev_rx_drop_no_recv_buffer") + delta("dev_rx_drop_mad_source_share"); got < uint64(total)*9/10 {
		t.Errorf("h1 counted %d of %d REQs", got, total)
	}

	// The log: names the flooding source, stays small.
	log := c.logTail(1, logBefore)
	named := regexp.MustCompile(logWhat + `.*source=` + regexp.QuoteMeta(ib.GIDFromAddr(src).String()))
	if !named.MatchString(log) {
		t.Errorf("h1's log does not name the flooding source %v:\n%s", ib.GIDFromAddr(src), log)
	}
	// One line when the refusals start, then one per cm's interval at most.
	if n, most := len(named.FindAllString(log, -1)), 1+int(time.Since(first)/(10*time.Second))+1; n > most {
		t.Errorf("h1 logged %d lines about the flood, more than the rate limit allows (%d)", n, most)
	}
	if n := strings.Count(log, "\n"); n >= logBudget {
		t.Errorf("h1's log grew by %d lines during the flood (fewer than %d expected):\n%s", n, logBudget, log)
	}
	t.Logf("h1's log during the flood: %d lines, %d naming the source:\n%s", strings.Count(log, "\n"), len(named.FindAllString(log, -1)), log)
}

// sendsOverRC reports whether host k sends to addr over an established
// RC connection of its own to peer.
func sendsOverRC(c *cluster, k int, peer ib.LinkAddr, addr string) bool {
	if n, ok := c.neighbors(k)[addr]; !ok || n.Via != "RC" {
		return false
	}
	for _, cn := range c.conns(k) {
		if rcOutTo(cn, peer) {
			return true
		}
	}
	return false
}

// rcOutTo reports whether cn is our established RC connection to peer.
func rcOutTo(cn ipoib.ConnInfo, peer ib.LinkAddr) bool {
	la, err := ib.ParseLinkAddr(cn.Peer)
	return err == nil && sameNode(la, peer) && cn.Type == "RC" && cn.Direction == "out" && cn.State == "established"
}

// logTail is host k's daemon log from line from (0: the first) on.
func (c *cluster) logTail(k, from int) string {
	c.t.Helper()
	out, err := os.ReadFile(c.tn.LogPath(k))
	if err != nil {
		c.t.Fatal(err)
	}
	lines := strings.SplitAfter(string(out), "\n")
	if from > len(lines) {
		return ""
	}
	return strings.Join(lines[from:], "")
}
