package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/ipoib"
)

// The end-to-end tests run real daemons in network namespaces made by
// internal/testnet (the same hosts the demo uses), and judge them with
// ping, iperf3, tracepath, tshark and the daemon's own tables.

var binary string // the ipoibd built for these tests

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "ipoibd-e2e")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binary = filepath.Join(dir, "ipoibd")
		if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building ipoibd: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}())
}

// clusterNet hands each test its own underlay and IPoIB subnets, so that
// tests never see each other's hosts: numbers 40 to 79 in turn. Numbers
// are what testnet kills stray daemons by (their --underlay), so no other
// user takes one of these blocks: the cni tests take 240-249, bench.sh
// 250, bench-ab.sh 251, soak.sh 252, testnet's own tests 31-35, the demo
// 77 (never beside the tests).
var clusterNet atomic.Int32

// testSlot lets up to five checkouts run these tests on one machine at
// once: IPOIBD_TEST_SLOT=1..4 moves the cluster numbers to a block of
// their own (80, 120, 160, 200) and puts the digit after every cluster
// name, so that no run takes down or kills another's hosts.
var testSlot = testutil.Slot

// nextNet is the next cluster number of this run's block.
func nextNet() int { return 40*(testSlot+1) + int(clusterNet.Add(1)-1)%40 }

// cluster is one set of hosts made by internal/testnet, with helpers that
// fail the test t.
type cluster struct {
	t    *testing.T
	name string
	net  int
	tn   *testnet.Cluster
}

func newCluster(t *testing.T, name string, hosts int) *cluster {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("end-to-end tests need root (network namespaces, TUN devices)")
	}
	if _, err := lookTools("ip", "ping", "iperf3"); err != nil {
		t.Skip(err)
	}
	if testSlot != 0 {
		name += strconv.Itoa(testSlot)
	}
	if err := testnet.Down(name); err != nil { // leftovers of an interrupted run
		t.Fatal(err)
	}
	tn, err := testnet.Up(name, hosts, nextNet())
	if err != nil {
		t.Fatal(err)
	}
	tn.Daemon = binary
	c := &cluster{t: t, name: name, net: tn.Net, tn: tn}
	t.Cleanup(func() {
		if t.Failed() {
			for k := 1; k <= hosts; k++ {
				out, _ := os.ReadFile(tn.LogPath(k))
				t.Logf("daemon log of h%d%s:\n%s", k, c.ended(k), out)
			}
		}
		if err := testnet.Down(name); err != nil {
			t.Error(err)
		}
		for k := 1; k <= hosts; k++ {
			for _, pid := range tn.Stragglers(k) {
				t.Errorf("h%d's daemon (pid %d) outlived its cluster", k, pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return c
}

// forTest is the same cluster with helpers that fail t.
func (c *cluster) forTest(t *testing.T) *cluster {
	d := *c
	d.t = t
	return &d
}

// command runs a command on host k.
func (c *cluster) command(k int, name string, args ...string) *exec.Cmd {
	return c.tn.Command(k, name, args...)
}

// host is host k's network namespace.
func (c *cluster) host(k int) string { return c.tn.Host(k) }

// start runs ipoibd on host k with extra flags and waits until it answers.
func (c *cluster) start(k int, flags ...string) {
	c.t.Helper()
	if err := c.tn.Start(k, flags...); err != nil {
		c.t.Fatal(err)
	}
}

// stop sends sig (TERM, KILL, ...) to host k's daemon and waits for it to exit.
func (c *cluster) stop(k int, sig string) {
	c.t.Helper()
	s, err := testnet.ParseSignal(sig)
	if err == nil {
		err = c.tn.Stop(k, s)
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// loss makes host k drop percent of the fabric's datagrams it receives.
func (c *cluster) loss(k, percent int) {
	c.t.Helper()
	if err := c.tn.Loss(k, percent); err != nil {
		c.t.Fatal(err)
	}
}

// on runs a command on host k and returns its output; a failure fails the test.
func (c *cluster) on(k int, args ...string) string {
	c.t.Helper()
	out, err := c.try(k, args...)
	if err != nil {
		c.t.Fatalf("h%d: %s: %v\n%s", k, strings.Join(args, " "), err, out)
	}
	return out
}

// try runs a command on host k and returns its output and error.
func (c *cluster) try(k int, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := c.command(k, args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// ip4 and ip6 are host k's IPoIB addresses; underlay its eth0 address.
func (c *cluster) ip4(k int) string      { return c.tn.IPv4(k).String() }
func (c *cluster) ip6(k int) string      { return c.tn.IPv6(k).String() }
func (c *cluster) underlay(k int) string { return c.tn.Underlay(k).String() }

// query asks host k's daemon (ipoibd CMD --json) and decodes the answer.
func (c *cluster) query(k int, cmd string, v any) {
	c.t.Helper()
	out, err := c.try(k, binary, cmd, "--json")
	if err != nil {
		c.t.Fatalf("h%d: ipoibd %s: %v%s\n%s", k, cmd, err, c.ended(k), out)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("h%d: ipoibd %s: %v\n%s", k, cmd, err, out)
	}
}

// ended tells, for a failure message, how host k's daemon ended, if it did.
func (c *cluster) ended(k int) string {
	if e := c.tn.Ended(k); e != "" {
		return " (its daemon ended: " + e + ")"
	}
	return ""
}

func (c *cluster) neighbors(k int) map[string]ipoib.NeighInfo {
	var ns []ipoib.NeighInfo
	c.query(k, "neigh", &ns)
	m := map[string]ipoib.NeighInfo{}
	for _, n := range ns {
		if _, ok := m[n.IP]; !ok { // the active port's, not a rail's (RAIL)
			m[n.IP] = n
		}
	}
	return m
}

// railNeighbors are host k's Rail entries: its neighbors' other ports,
// where its second rail sends.
func (c *cluster) railNeighbors(k int) map[string]ipoib.NeighInfo {
	var ns []ipoib.NeighInfo
	c.query(k, "neigh", &ns)
	m := map[string]ipoib.NeighInfo{}
	for _, n := range ns {
		if n.State == "RAIL" {
			m[n.IP] = n
		}
	}
	return m
}

func (c *cluster) conns(k int) []ipoib.ConnInfo {
	var cs []ipoib.ConnInfo
	c.query(k, "conn", &cs)
	return cs
}

func (c *cluster) stats(k int) map[string]uint64 {
	m := map[string]uint64{}
	c.query(k, "stats", &m)
	return m
}

func (c *cluster) show(k int) ipoib.Info {
	var i ipoib.Info
	c.query(k, "show", &i)
	return i
}

// ping sends count pings and fails the test if any is lost.
func (c *cluster) ping(from int, dst string, count int) {
	c.t.Helper()
	c.on(from, "ping", "-c", fmt.Sprint(count), "-i", "0.1", "-W", "2", dst)
}

// lookTools reports the first of the tools that is not installed.
func lookTools(names ...string) (string, error) {
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			return n, fmt.Errorf("%s not installed (make test installs it)", n)
		}
	}
	return "", nil
}
