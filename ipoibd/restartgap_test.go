package main

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// pingLog is a ping -D running in the background on a host: each reply
// with its time.
type pingLog struct {
	mu   sync.Mutex
	out  bytes.Buffer
	done chan error
}

func (p *pingLog) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *pingLog) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// pingAll pings dst from host k every 0.1 s until stop.
func (c *cluster) pingAll(k int, dst string) (p *pingLog, stop func()) {
	c.t.Helper()
	p = &pingLog{done: make(chan error, 1)}
	// Line-buffered: the replies are read while ping runs.
	cmd := c.command(k, "stdbuf", "-oL", "ping", "-D", "-n", "-i", "0.1", "-W", "1", dst)
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			<-p.done
		}
	}
	c.t.Cleanup(stop)
	return p, stop
}

var pingReply = regexp.MustCompile(`^\[(\d+\.\d+)\] .* icmp_seq=(\d+) `)

// firstReplyAfter is when the first reply came after t (zero: none).
func (p *pingLog) firstReplyAfter(t time.Time) time.Time {
	sc := bufio.NewScanner(strings.NewReader(p.String()))
	for sc.Scan() {
		m := pingReply.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f, _ := strconv.ParseFloat(m[1], 64)
		at := time.Unix(0, int64(f*1e9))
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// TestRestartedPeerReachedAtOnce: a peer killed with SIGKILL and started
// again, and a P_Key child deleted and added again, are reached within a
// second of answering again (pings every 0.1 s): the new QPN is used as
// soon as the CM or the peer's announcement shows it, without waiting for
// the old one's silence.
func TestRestartedPeerReachedAtOnce(t *testing.T) {
	c := newCluster(t, "gap", 2)
	child := func(k int) string { return fmt.Sprintf("172.16.%d.%d", c.net, k) }
	c.start(1, "--softib-pkeys", "0xffff,0x8001")
	c.start(2, "--softib-pkeys", "0xffff,0x8001")
	for k := 1; k <= 2; k++ {
		c.on(k, binary, "child", "add", "0x8001", "--addr", child(k)+"/24")
	}
	c.ping(1, c.ip4(2), 2)
	c.ping(1, child(2), 2)

	measure := func(what, dst string, restart func()) {
		t.Helper()
		p, stop := c.pingAll(1, dst)
		await(t, 5*time.Second, what+": pings answered before", func() bool {
			return !p.firstReplyAfter(time.Time{}).IsZero()
		})
		restart()
		back := time.Now()
		time.Sleep(4 * time.Second) // the measurement window, not a wait for an event
		stop()
		first := p.firstReplyAfter(back)
		if first.IsZero() {
			t.Errorf("%s: no reply within 4 s; ping said:\n%s", what, p.String())
			return
		}
		gap := first.Sub(back)
		t.Logf("%s: first reply %.2f s after the peer answered again", what, gap.Seconds())
		if gap > time.Second {
			t.Errorf("%s: first reply %.2f s after the peer answered again, want under 1 s", what, gap.Seconds())
		}
	}
	measure("SIGKILL restart", c.ip4(2), func() {
		c.stop(2, "KILL")
		c.start(2, "--softib-pkeys", "0xffff,0x8001", "--child", "0x8001="+child(2)+"/24")
	})
	measure("child del and add", child(2), func() {
		c.on(2, binary, "child", "del", "0x8001")
		c.on(2, binary, "child", "add", "0x8001", "--addr", child(2)+"/24")
	})
	// By hand: `neigh flush IP` forgets one neighbor, `neigh flush` all;
	// the next packet resolves them again.
	if out := c.on(1, binary, "neigh", "flush", c.ip4(2)); strings.TrimSpace(out) != "ib0: 1 neighbors flushed" {
		t.Errorf("neigh flush %s said %q", c.ip4(2), out)
	}
	if n, ok := c.neighbors(1)[c.ip4(2)]; ok {
		t.Errorf("h2 still a neighbor after the flush: %+v", n)
	}
	c.ping(1, c.ip4(2), 2)
	c.on(1, binary, "neigh", "flush", "--ifname", "ib0.8001")
	if n := len(c.neighbors(1)); n == 0 {
		t.Errorf("flushing the child's neighbors flushed ib0's")
	}
	if out := c.on(1, binary, "neigh", "flush"); !strings.Contains(out, "ib0: ") || strings.Contains(out, " 0 neighbors") {
		t.Errorf("neigh flush said %q", out)
	}
	if n := len(c.neighbors(1)); n != 0 {
		t.Errorf("%d neighbors left after neigh flush", n)
	}
	if out, err := c.try(1, binary, "neigh", "flush", "ib0", "nonsense", "x"); err == nil {
		t.Errorf("neigh flush with junk arguments succeeded: %s", out)
	}
	c.ping(1, c.ip4(2), 2)
	if log := c.logOf(1); strings.Count(log, "level=ERROR") > 0 {
		t.Errorf("h1 logged errors:\n%s", log)
	}
}
