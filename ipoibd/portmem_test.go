package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ipoib"
)

// podsForMemory is how many pods' children TestPodMemory makes: the
// issue's N.
const podsForMemory = 60

// maxRSSPerPod bounds the daemon's resident memory per pod's child. A
// child with its own 52 MiB slab, SRQ and CQs cost about 54 MiB; one that
// shares its port's receive pool and registers small rings it does not
// touch while quiet costs well under 2 MiB (BENCHMARKS.md). The bound
// leaves room for what the Go runtime keeps.
const maxRSSPerPod = 4 << 20

// TestPodMemory: 60 pods' children on one port (each in a namespace of
// its own, as the CNI plugin makes them through `ipoibd child add
// --netns`) cost the daemon at most 4 MiB of resident memory each: they
// share the port's registered slab, SRQ and receive CQ, and their small
// rings stay out of memory until used. The figures it logs are
// BENCHMARKS.md's: RSS per pod = (RSS with N pods − RSS with none) / N,
// and registered memory per pod alike.
func TestPodMemory(t *testing.T) {
	c := newCluster(t, "pmem", 2)
	c.start(1, "--softib-pkeys", "0xffff,0x8001")
	c.start(2, "--softib-pkeys", "0xffff,0x8001")
	podIP := func(k int) string { return fmt.Sprintf("172.24.%d.%d", c.net, k) }
	c.on(2, binary, "child", "add", "0x8001", "--addr", podIP(250)+"/24")
	c.ping(1, c.ip4(2), 2)
	pid, err := c.tn.Pid(1)
	if err != nil {
		t.Fatal(err)
	}
	rss0, reg0, kern0 := settledRSS(t, pid), c.registered(1), kernelUnreclaimable(t)

	pods := make([]string, podsForMemory)
	for k := range pods {
		pods[k] = fmt.Sprintf("ipoibd-pm%d-%d", c.net, k+1)
		_ = exec.Command("ip", "netns", "del", pods[k]).Run() // a leftover of an interrupted run
		if out, err := exec.Command("ip", "netns", "add", pods[k]).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v\n%s", pods[k], err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", pods[k]).Run() })
	}
	start := time.Now()
	for k, ns := range pods {
		c.on(1, binary, "child", "add", "0x8001", "--name", "net1", "--netns", ns, "--owner", fmt.Sprintf("pod%d", k+1),
			"--addr", podIP(k+1)+"/24")
	}
	t.Logf("%d children added in %v", len(pods), time.Since(start).Round(time.Millisecond))
	// Pods carry traffic, over UD and over their own RC connections into
	// the port's SRQ.
	for _, k := range []int{0, len(pods) / 2, len(pods) - 1} {
		out, err := exec.Command("ip", "netns", "exec", pods[k], "ping", "-c", "2", "-i", "0.2", "-W", "2", "-s", "60000", podIP(250)).CombinedOutput()
		if err != nil {
			t.Fatalf("ping from %s: %v\n%s", pods[k], err, out)
		}
	}
	rss1, reg1, kern1 := settledRSS(t, pid), c.registered(1), kernelUnreclaimable(t)
	perPod := float64(rss1-rss0) / float64(len(pods))
	regPerPod := float64(reg1-reg0) / float64(len(pods))
	t.Logf("daemon RSS %.1f MiB with no pod, %.1f MiB with %d: %.2f MiB a pod; registered %.1f → %.1f MiB: %.2f MiB a pod",
		mib(rss0), mib(rss1), len(pods), perPod/(1<<20), mib(reg0), mib(reg1), regPerPod/(1<<20))
	// The whole machine's: only a figure when nothing else runs.
	t.Logf("the kernel's unreclaimable memory (SUnreclaim) %.1f → %.1f MiB: %.2f MiB a pod, namespace included",
		mib(kern0), mib(kern1), float64(kern1-kern0)/float64(len(pods))/(1<<20))
	if perPod > maxRSSPerPod {
		t.Errorf("%.2f MiB of RSS a pod, want at most %.0f", perPod/(1<<20), float64(maxRSSPerPod)/(1<<20))
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// kernelUnreclaimable is the machine's SUnreclaim (/proc/meminfo), in
// octets: the kernel's slab and large kmalloc memory, where a TUN's
// queues and qdiscs live.
func kernelUnreclaimable(t *testing.T) int64 { return procKiB(t, "/proc/meminfo", "SUnreclaim") }

// registered is what host k's port has registered with its device.
func (c *cluster) registered(k int) int64 {
	c.t.Helper()
	var info ipoib.Info
	c.queryIf(k, "show", "ib0", &info)
	return info.PortRegistered
}

// settledRSS is pid's resident memory (VmRSS) once it has held still
// for a second, at most 10 s: the Go runtime returns what a burst of work
// left behind.
func settledRSS(t *testing.T, pid int) int64 {
	t.Helper()
	last := vmRSS(t, pid)
	for range 10 {
		time.Sleep(time.Second)
		now := vmRSS(t, pid)
		if now >= last-last/100 && now <= last+last/100 {
			return now
		}
		last = now
	}
	return last
}

// vmRSS reads VmRSS from /proc/PID/status, in octets.
func vmRSS(t *testing.T, pid int) int64 {
	return procKiB(t, fmt.Sprintf("/proc/%d/status", pid), "VmRSS")
}

// procKiB reads the line "key: N kB" of a /proc file, in octets.
func procKiB(t *testing.T, path, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == key+":" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in %s", key, path)
	return 0
}
