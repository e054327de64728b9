package cni_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/ipoibd/ipoibd/internal/testnet"
)

// podsPerNode is how many pods each node of TestPodsAtScale runs: more
// than half of kubelet's default maximum of 110.
const podsPerNode = 60

// TestPodsAtScale: two nodes with podsPerNode pods each, every ADD at
// once as kubelet does when Deployments scale up: every ADD returns a
// result (their p50 and p99 logged), every pod pings a pod on the other
// node and one on its own, and every DEL at once leaves no child,
// address, plugin state or held namespace.
func TestPodsAtScale(t *testing.T) {
	build(t)
	start := time.Now()
	c := upCluster(t, "cniscale", 2, 0, "--softib-pkeys", "0xffff,0x8001")
	nodes := []*node{newNode(t, c, 1), newNode(t, c, 2)}
	readme := readmeConf(t)
	nets := []*libcni.NetworkConfigList{
		netConf(t, readme, nodes[0].dir, nil), // 172.30.1.10-99
		netConf(t, readme, nodes[1].dir, func(_, ipam map[string]any) {
			ipam["rangeStart"], ipam["rangeEnd"] = "172.30.1.100", "172.30.1.199"
		}),
	}
	var pods [2][]*pod
	for k, n := range nodes {
		for range podsPerNode {
			pods[k] = append(pods[k], n.newPod(nets[k]))
		}
	}
	all := slices.Concat(pods[0], pods[1])
	t.Logf("%d namespaces made in %v", len(all), time.Since(start))

	// Every ADD at once.
	cpu0 := []time.Duration{daemonCPU(t, c, 1), daemonCPU(t, c, 2)}
	took := make([]time.Duration, len(all))
	errs := make([]error, len(all))
	t0 := time.Now()
	forAll(all, len(all), func(k int, p *pod) {
		s := time.Now()
		var res types.Result
		p.n.in(func() { res, errs[k] = p.n.cni.AddNetworkList(context.Background(), p.net, p.rt()) })
		took[k] = time.Since(s)
		if errs[k] == nil {
			var r *current.Result
			if r, errs[k] = current.NewResultFromResult(res); errs[k] == nil && len(r.IPs) > 0 {
				p.res, p.addr = r, r.IPs[0].Address.IP.String()
			}
		}
	})
	wall := time.Since(t0)
	t.Logf("the daemons' CPU time for the ADDs: h1 %v, h2 %v", (daemonCPU(t, c, 1) - cpu0[0]).Round(time.Millisecond), (daemonCPU(t, c, 2) - cpu0[1]).Round(time.Millisecond))
	failed := 0
	for k, err := range errs {
		if err != nil || all[k].addr == "" {
			failed++
			t.Errorf("ADD %s on h%d: %v", all[k].id, all[k].n.k, err)
		}
	}
	sorted := slices.Clone(took)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	t.Logf("%d ADDs at once (%d per node): all done in %v; ADD p50 %v, p99 %v, max %v; %d failed",
		len(all), podsPerNode, wall.Round(time.Millisecond), pctl(sorted, 50), pctl(sorted, 99), sorted[len(sorted)-1].Round(time.Millisecond), failed)
	if failed > 0 {
		t.FailNow()
	}
	for _, n := range nodes {
		if ch := n.children(); len(ch) != podsPerNode {
			t.Errorf("h%d's daemon has %d children, want %d", n.k, len(ch), podsPerNode)
		}
	}

	// Every pod reaches one on the other node and one on its own.
	t0 = time.Now()
	forAll(all, 8, func(k int, p *pod) {
		h, i := k/podsPerNode, k%podsPerNode
		for _, to := range []*pod{pods[1-h][i], pods[h][(i+1)%podsPerNode]} {
			if out, err := p.inPod("ping", "-c", "1", "-W", "5", to.addr); err != nil {
				t.Errorf("ping from %s (h%d) to %s (h%d): %v\n%s", p.addr, p.n.k, to.addr, to.n.k, err, out)
			}
		}
	})
	t.Logf("%d pings across nodes and %d within in %v", len(all), len(all), time.Since(t0).Round(time.Millisecond))

	// Every DEL at once.
	t0 = time.Now()
	forAll(all, len(all), func(_ int, p *pod) {
		if err := p.del(); err != nil {
			t.Errorf("DEL %s: %v", p.id, err)
		}
	})
	t.Logf("%d DELs at once in %v", len(all), time.Since(t0).Round(time.Millisecond))
	for _, n := range nodes {
		assertEmpty(t, n, "ib-8001")
	}
	t.Logf("the test took %v", time.Since(start).Round(time.Second))
}

// assertEmpty checks that node n has no child, no address held by
// host-local for network name, no plugin state and no pod namespace held.
func assertEmpty(t *testing.T, n *node, name string) {
	t.Helper()
	kept, _ := os.ReadDir(filepath.Join(n.dir, "ipoibd-cni"))
	if ch, a := n.children(), n.allocated(name); len(ch) != 0 || len(a) != 0 || len(kept) != 0 {
		t.Errorf("h%d: children %+v, host-local holds %v, the plugin keeps %v", n.k, ch, a, kept)
	}
	if held := n.held(); len(held) != 0 {
		t.Errorf("h%d's daemon still holds the namespaces of %v", n.k, held)
	}
}

// daemonCPU is the CPU time (user and system) node k's daemon used.
func daemonCPU(t *testing.T, c *testnet.Cluster, k int) time.Duration {
	pid, err := c.Pid(k)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields 14 and 15, utime and stime, in clock ticks (100 a second
	// on Linux), after the command's parenthesised name.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// forAll runs f on every pod, at most par at a time, and waits.
func forAll(pods []*pod, par int, f func(k int, p *pod)) {
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for k, p := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(k, p)
		}()
	}
	wg.Wait()
}

// pctl is the p-th percentile of sorted.
func pctl(sorted []time.Duration, p int) time.Duration {
	k := (len(sorted)*p + 99) / 100
	return sorted[max(k-1, 0)].Round(time.Millisecond)
}

// TestAddInterrupted: ADDs cut off in the middle leave nothing once the
// runtime's DEL or GC has run: the plugin SIGKILLed at staggered moments
// of its ADD (before, during and after IPAM and the daemon's child), then
// DEL; and the daemon stopped (SIGTERM) while ADDs are in flight and
// started again, then GC with no valid attachment.
func TestAddInterrupted(t *testing.T) {
	build(t)
	c := upCluster(t, "cnifault", 1, 1, "--softib-pkeys", "0xffff,0x8001")
	h := newNode(t, c, 1)
	readme := readmeConf(t)
	readme["cniVersion"] = "1.1.0" // GC is 1.1's
	net := netConf(t, readme, h.dir, nil)
	const n = 12

	var ps []*pod
	for range n {
		ps = append(ps, h.newPod(net))
	}
	killed := make([]bool, n)
	forAll(ps, n, func(k int, p *pod) {
		var cmd *exec.Cmd
		h.in(func() {
			cmd = exec.Command(filepath.Join(bins, "ipoibd-cni"))
			cmd.Env = append(os.Environ(), "CNI_COMMAND=ADD", "CNI_CONTAINERID="+p.id, "CNI_NETNS="+p.path(), "CNI_IFNAME=net1", "CNI_PATH="+bins)
			cmd.Stdin = bytes.NewReader(net.Plugins[0].Bytes)
			if err := cmd.Start(); err != nil {
				t.Error(err)
				cmd = nil
			}
		})
		if cmd == nil {
			return
		}
		// Kill points 0, 100, ..., 1100 ms span a whole ADD (about 0.5 s
		// alone, longer with the others at once).
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(time.Duration(k) * 100 * time.Millisecond):
			_ = cmd.Process.Kill()
			killed[k] = true
			<-done
		}
	})
	nKilled, left, kept := 0, 0, 0
	for k, p := range ps {
		if killed[k] {
			nKilled++
			left += len(slices.DeleteFunc(h.children(), func(c child) bool { return !strings.Contains(c.Owner, "/"+p.id+"/") }))
			if _, err := os.Stat(filepath.Join(h.dir, "ipoibd-cni", "ib-8001", p.id+"@net1.json")); err == nil {
				kept++
			}
		}
	}
	t.Logf("%d of %d ADDs killed at staggered moments; before DEL they left %d children and %d kept states", nKilled, n, left, kept)
	forAll(ps, n, func(_ int, p *pod) {
		if err := p.del(); err != nil {
			t.Errorf("DEL %s after its ADD was killed: %v", p.id, err)
		}
	})
	assertEmpty(t, h, "ib-8001")

	// The daemon stopped while ADDs are in flight: once the first ADD
	// returns, the others are on their way.
	ps = ps[:0]
	for range n {
		ps = append(ps, h.newPod(net))
	}
	first := make(chan struct{})
	var once sync.Once
	var ok atomic.Int32
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		forAll(ps, n, func(_ int, p *pod) {
			var err error
			h.in(func() { _, err = h.cni.AddNetworkList(context.Background(), p.net, p.rt()) })
			if err == nil {
				ok.Add(1)
			}
			once.Do(func() { close(first) })
		})
	}()
	<-first
	if err := c.Stop(1, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	t.Logf("%d of %d ADDs returned a result before the daemon stopped", ok.Load(), n)
	if err := c.Start(1, "--softib-pkeys", "0xffff,0x8001"); err != nil {
		t.Fatal(err)
	}
	fresh := libcni.NewCNIConfigWithCacheDir([]string{bins}, t.TempDir(), nil)
	var err error
	h.in(func() { err = fresh.GCNetworkList(context.Background(), net, &libcni.GCArgs{}) })
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	assertEmpty(t, h, "ib-8001")
}
