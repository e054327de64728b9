package cni_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

// The restart test: pods keep their interfaces (with addresses and
// routes) while their node's daemon restarts, and a pod on the other
// node reaches them again within a second, without the runtime calling
// ADD; then a stop for good leaves nothing. About 25 s.

// pinger is ping -i 0.1 running in a pod, its replies' sequence numbers
// read as they come.
type pinger struct {
	to   string
	cmd  *exec.Cmd
	mu   sync.Mutex
	seqs []int       // replies, in order
	at   []time.Time // when each came
	done chan struct{}
}

var icmpSeq = regexp.MustCompile(`icmp_seq=(\d+) `)

func startPinger(t *testing.T, ns, to string) *pinger {
	t.Helper()
	p := &pinger{to: to, done: make(chan struct{})}
	p.cmd = exec.Command("ip", "netns", "exec", ns, "stdbuf", "-oL", "ping", "-n", "-i", "0.1", "-W", "1", to)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := icmpSeq.FindStringSubmatch(sc.Text()); m != nil {
				n, _ := strconv.Atoi(m[1])
				p.mu.Lock()
				p.seqs, p.at = append(p.seqs, n), append(p.at, time.Now())
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *pinger) stop() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
		_ = p.cmd.Wait()
	}
}

// replies is how many replies came so far.
func (p *pinger) replies() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.seqs)
}

// lostInARow is the longest run of requests without a reply between
// replies from the from-th on, and when the first reply after since came.
func (p *pinger) lostInARow(from int, since time.Time) (worst int, back time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := max(from, 1); k < len(p.seqs); k++ {
		worst = max(worst, p.seqs[k]-p.seqs[k-1]-1)
	}
	for _, at := range p.at {
		if at.After(since) {
			return worst, at
		}
	}
	return worst, time.Time{}
}

// linkState is what must not change on a pod's net1 across a restart: its
// index (a new link would have a new one), addresses and routes.
func linkState(t *testing.T, ns, ifname string) string {
	t.Helper()
	var b strings.Builder
	for _, args := range [][]string{{"-o", "link", "show", ifname}, {"-o", "addr", "show", ifname}, {"route", "show", "dev", ifname}, {"-6", "route", "show", "dev", ifname}} {
		out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("ip -n %s %v: %v\n%s", ns, args, err, out)
		}
		// The link's flags and state follow the daemon (NO-CARRIER while
		// none serves it); its index, name and MTU must not change.
		line := string(out)
		if args[1] == "link" {
			f := strings.Fields(line)
			line = strings.Join(f[:2], " ") + " " + strings.Join(f[3:5], " ")
		}
		b.WriteString(line)
	}
	return b.String()
}

func TestPodsKeepInterfacesAcrossRestart(t *testing.T) {
	build(t)
	child := func(k int) string { return fmt.Sprintf("10.77.%d.%d", slotNet, k) }
	flags := func(k int) []string {
		return []string{"--softib-pkeys", "0xffff,0x8001,0x8002", "--child", fmt.Sprintf("0x8002=%s/24", child(k))}
	}
	c := upCluster(t, "cnirst", 2, 1, flags(1)...)
	// upCluster gave both hosts h1's --child address: h2 takes its own.
	if err := c.Stop(2, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// SIGKILL left h2's child: stop it for good to start anew.
	if out, err := c.Command(2, "ip", "link", "del", "ib0.8002").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := c.Start(2, flags(2)...); err != nil {
		t.Fatal(err)
	}
	h1, h2 := newNode(t, c, 1), newNode(t, c, 2)
	withRoute := func(dir, start, end string) *libcni.NetworkConfigList {
		return netConf(t, readmeConf(t), dir, func(_, ipam map[string]any) {
			ipam["rangeStart"], ipam["rangeEnd"] = start, end
			ipam["routes"] = []any{map[string]any{"dst": "10.88.0.0/16"}}
		})
	}
	net1, net2 := withRoute(h1.dir, "172.30.1.10", "172.30.1.99"), withRoute(h2.dir, "172.30.1.100", "172.30.1.149")
	var pods []*pod
	for range 4 {
		p := h1.newPod(net1)
		p.add()
		pods = append(pods, p)
	}
	b := h2.newPod(net2)
	b.add()
	before := map[string]string{}
	for _, p := range pods {
		before[p.ns] = linkState(t, p.ns, "net1")
		b.ping(p, 56)
	}
	childBefore := linkState(t, c.Host(1), "ib0.8002")
	if out, err := c.Command(2, "ping", "-c", "1", "-W", "3", child(1)).CombinedOutput(); err != nil {
		t.Fatalf("h2 to h1's child: %v\n%s", err, out)
	}
	swapped := filepath.Join(t.TempDir(), "ipoibd-newer")
	if out, err := exec.Command("cp", c.Daemon, swapped).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	restart := func(what string, sig syscall.Signal, binary string) {
		var pingers []*pinger
		for _, p := range pods {
			pingers = append(pingers, startPinger(t, b.ns, p.addr))
		}
		pingers = append(pingers, startPinger(t, c.Host(2), child(1)))
		awaitAll(t, what+": pings answered before the restart", pingers, 1)
		from := make([]int, len(pingers))
		for k, p := range pingers {
			from[k] = p.replies() - 1
		}
		t0 := time.Now()
		if err := c.Stop(1, sig); err != nil {
			t.Fatal(err)
		}
		// Unserved, the pod's interface says so.
		if out, err := pods[0].inPod("ip", "-o", "link", "show", "net1"); err != nil || !strings.Contains(out, "NO-CARRIER") {
			t.Errorf("%s: net1 with no daemon, want it with no carrier: %v\n%s", what, err, out)
		}
		c.Daemon = binary
		if err := c.Start(1, flags(1)...); err != nil {
			t.Fatal(err)
		}
		up := time.Now()
		have := make([]int, len(pingers))
		for k, p := range pingers {
			have[k] = p.replies()
		}
		// Ten replies more each: the gap is over and measured.
		awaitAll(t, what+": pings answered after the restart", pingers, 10, have...)
		worst, gap := 0, time.Duration(0)
		for k, p := range pingers {
			p.stop()
			lost, back := p.lostInARow(from[k], t0)
			worst, gap = max(worst, lost), max(gap, back.Sub(t0))
			if lost > 10 {
				t.Errorf("%s: %d pings to %s lost in a row, want at most 10", what, lost, p.to)
			}
		}
		t.Logf("%s: at most %d pings lost in a row; the daemon was back %.2f s after the signal, every pod answered within %.2f s", what, worst, up.Sub(t0).Seconds(), gap.Seconds())
		for _, p := range pods {
			if now := linkState(t, p.ns, "net1"); now != before[p.ns] {
				t.Errorf("%s: %s's net1 changed:\n%s\nnow\n%s", what, p.ns, before[p.ns], now)
			}
			if err := p.check(); err != nil {
				t.Errorf("%s: CHECK of %s: %v", what, p.id, err)
			}
		}
		if now := linkState(t, c.Host(1), "ib0.8002"); now != childBefore {
			t.Errorf("%s: h1's --child changed:\n%s\nnow\n%s", what, childBefore, now)
		}
	}
	restart("SIGTERM and start", syscall.SIGTERM, c.Daemon)
	restart("SIGKILL and start", syscall.SIGKILL, c.Daemon)
	restart("a newer binary (SIGTERM, start another)", syscall.SIGTERM, swapped)
	if log, _ := os.ReadFile(c.LogPath(1)); strings.Contains(string(log), "level=ERROR") {
		t.Errorf("h1 logged errors:\n%s", log)
	}

	// A stop for good leaves nothing: no child, no net1, no state.
	if out, err := c.Command(1, c.Daemon, "stop").CombinedOutput(); err != nil {
		t.Fatalf("ipoibd stop: %v\n%s", err, out)
	}
	for _, p := range pods {
		if out, err := p.inPod("ip", "link", "show", "net1"); err == nil {
			t.Errorf("net1 outlived ipoibd stop:\n%s", out)
		}
		if err := p.check(); cniCode(err) != int(types.ErrTryAgainLater) {
			t.Errorf("CHECK with the daemon stopped for good: %v", err)
		}
	}
	if out, err := c.Command(1, "ip", "link", "show", "ib0.8002").CombinedOutput(); err == nil {
		t.Errorf("the --child outlived ipoibd stop:\n%s", out)
	}
	if kept, _ := filepath.Glob("/run/ipoibd/ib0.ns" + nsIno(t, c.Host(1)) + ".state"); len(kept) != 0 {
		t.Errorf("ipoibd stop left its state file %v", kept)
	}
}

// nsIno is the inode of the named namespace, as the state file is named.
func nsIno(t *testing.T, name string) string {
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+name, &st); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatUint(st.Ino, 10)
}

// awaitAll waits until each pinger has n replies more than have says
// (nothing: than none), for at most 20 s.
func awaitAll(t *testing.T, what string, ps []*pinger, n int, have ...int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := true
		for k, p := range ps {
			base := 0
			if k < len(have) {
				base = have[k]
			}
			ok = ok && p.replies() >= base+n
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s", what)
		}
		time.Sleep(50 * time.Millisecond) // polling ping's output; a reply gives no other notice
	}
}
