package main

import (
	"bufio"
	be "encoding/binary"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/ibsim"
	"github.com/ipoibd/ipoibd/softib/ibfwd"
)

// ibSubnetTopology is the simulated subnet of TestIBSubnet: two switches
// linked by their ports 7, h1 and h3 (and OpenSM's node sm) on sw1, h2 and
// h4 on sw2, so that the RC pair h1-h2 and the UC pair h3-h4 cross both.
const ibSubnetTopology = `Switch	8 "sw1"
[1]	"h1"[1]
[3]	"h3"[1]
[5]	"sm"[1]
[7]	"sw2"[7]

Switch	8 "sw2"
[2]	"h2"[1]
[4]	"h4"[1]
[7]	"sw1"[7]

Hca	1 "h1"
[1]	"sw1"[1]

Hca	1 "h2"
[1]	"sw2"[2]

Hca	1 "h3"
[1]	"sw1"[3]

Hca	1 "h4"
[1]	"sw2"[4]

Hca	1 "sm"
[1]	"sw1"[5]
`

// ibBinaries builds what the InfiniBand subnet needs once: ipoibd with
// libibumad (-tags rdma: the port is read and the SA asked through it)
// and the fabric forwarder.
var ibBinaries = sync.OnceValues(func() ([2]string, error) {
	dir, err := os.MkdirTemp("", "ipoibd-ib")
	if err != nil {
		return [2]string{}, err
	}
	bins := [2]string{filepath.Join(dir, "ipoibd"), filepath.Join(dir, "softib-ibfwd")}
	for i, b := range [][]string{{"-tags", "rdma", "-o", bins[0], "."}, {"-o", bins[1], "../softib/ibfwd/cmd/softib-ibfwd"}} {
		if out, err := exec.Command("go", append([]string{"build"}, b...)...).CombinedOutput(); err != nil {
			return bins, fmt.Errorf("go build %s: %v\n%s", bins[i], err, out)
		}
	}
	return bins, nil
})

// runOnFabric makes hosts 1..n of c run the rdma-tagged ipoibd as nodes
// h1..hn of fab; the daemons leave before the simulator (their exit tells
// it).
// daemonsOnFabric starts the fabric forwarder on host fabHost for hosts
// 1..n (their ports as ibstat reads them) and a daemon on each, over
// --softib-link ib: the hosts' ports.
func daemonsOnFabric(t *testing.T, c *cluster, fab *ibsim.Fabric, fabHost, n int) map[int]ibNode {
	t.Helper()
	nodes := map[int]ibNode{}
	for k := 1; k <= n; k++ {
		nodes[k] = ibstatPort(t, fab, fmt.Sprintf("h%d", k))
	}
	fwdAddr := fmt.Sprintf("%s:4790", c.tn.Underlay(fabHost))
	args := []string{"-listen", fwdAddr, "-sm-node", "sm", "-refresh", "300ms"}
	for k := 1; k <= n; k++ {
		args = append(args, "-port", fmt.Sprintf("%#x,%d@%s:4791", nodes[k].guid, nodes[k].lid, c.underlay(k)))
	}
	startForwarder(t, c, fabHost, fab, args)
	runOnFabric(t, c, fab, n)
	for k := 1; k <= n; k++ {
		c.start(k, "--softib-link", "ib", "--softib-fabric", fwdAddr)
	}
	return nodes
}

func runOnFabric(t *testing.T, c *cluster, fab *ibsim.Fabric, n int) {
	t.Helper()
	bins, err := ibBinaries()
	if err != nil {
		t.Fatal(err)
	}
	c.tn.Daemon = bins[0]
	c.tn.Env = func(k int) []string { return fab.NodeEnv(fmt.Sprintf("h%d", k)) }
	c.tn.Dir = fab.Dir()
	t.Cleanup(func() {
		for k := 1; k <= n; k++ {
			c.stop(k, "TERM")
		}
	})
}

// ibNode is a host's port as the subnet manager's SA reports it.
type ibNode struct {
	lid  uint16
	guid uint64
}

// TestIBSubnet runs four ipoibd on InfiniBand-link softib ports that are
// nodes of an ibsim subnet OpenSM brought up: ports, joins, paths, LIDs
// and multicast are the subnet's, packets go by OpenSM's forwarding
// tables (softib-ibfwd reads them back by SMP). The judges: traffic of
// every kind between every pair, OpenSM's own records of the LIDs, its
// MFT for the broadcast group, and a capture of every CM MAD: LID-routed,
// no GRH, nothing malformed.
func TestIBSubnet(t *testing.T) {
	ibsim.Need(t, "saquery", "smpquery", "ibroute", "ibswitches", "tshark")
	c := newCluster(t, "ibsn", 5) // host 5: the fabric (ibsim, OpenSM, forwarder)
	// Built before the fabric: a build error fails at once.
	if _, err := ibBinaries(); err != nil {
		t.Fatal(err)
	}
	fabHost := 5
	fab := ibsim.UpWith(t, ibsim.Options{Topology: ibSubnetTopology, SMNode: "sm", Netns: c.host(fabHost), Server: c.tn.Underlay(fabHost)})
	nodes := map[int]ibNode{}
	sm := ibstatPort(t, fab, "sm")
	for k := 1; k <= 4; k++ {
		// The port as the node reads it (sysfs, through umad2sim) and
		// the SA's path to it: the same LID.
		n := ibstatPort(t, fab, fmt.Sprintf("h%d", k))
		path := ibsim.Dump(fab.Output(t, "sm", exec.Command("saquery", "-p", "--sgid-to-dgid", ibGID(sm.guid)+"-"+ibGID(n.guid))))
		if path["dlid"] != strconv.Itoa(int(n.lid)) {
			t.Fatalf("h%d: ibstat says LID %d, the SA's path record %v", k, n.lid, path)
		}
		nodes[k] = n
	}
	fwdAddr := fmt.Sprintf("%s:4790", c.tn.Underlay(fabHost))
	mads := filepath.Join(fab.Dir(), "mads.pcap")
	args := []string{"-listen", fwdAddr, "-sm-node", "sm", "-refresh", "300ms", "-capture", mads}
	for k := 1; k <= 4; k++ {
		args = append(args, "-port", fmt.Sprintf("%#x,%d@%s:4791", nodes[k].guid, nodes[k].lid, c.underlay(k)))
	}
	fwd := startForwarder(t, c, fabHost, fab, args)

	runOnFabric(t, c, fab, 4)
	ibFlags := func(k int) []string {
		f := []string{"--softib-link", "ib", "--softib-fabric", fwdAddr}
		if k >= 3 {
			f = append(f, "--cm-modes", "uc") // h3-h4 is a UC pair; RC and UD serve the others
		}
		return f
	}
	for k := 1; k <= 4; k++ {
		c.start(k, ibFlags(k)...)
	}

	// The LIDs our ports use are the SA's.
	lidRE := regexp.MustCompile(`softib port on the InfiniBand subnet.* lid=(\d+)`)
	for k := 1; k <= 4; k++ {
		log, _ := os.ReadFile(c.tn.LogPath(k))
		m := lidRE.FindSubmatch(log)
		if m == nil || string(m[1]) != strconv.Itoa(int(nodes[k].lid)) {
			t.Errorf("h%d: port LID %q, saquery says %d", k, m, nodes[k].lid)
		}
		if s := c.show(k); s.Subnet != "sa" {
			t.Errorf("h%d: subnet %q, want the SA's joins and paths", k, s.Subnet)
		}
	}

	// The groups the daemons joined are forwarded before the first ping:
	// OpenSM programmed them, and the forwarder read them back.
	var mlids []string
	for _, sw := range []string{"sw1", "sw2"} {
		mlids = append(mlids, mftMLIDs(fab.Output(t, "sm", exec.Command("ibroute", "-M", fab.SwitchLIDOf(t, sw))))...)
	}
	fwd.await(t, mlids, 20*time.Second)

	start := time.Now()
	for a := 1; a <= 4; a++ {
		for b := 1; b <= 4; b++ {
			if a == b {
				continue
			}
			// The first packet to a peer may wait on joins (the
			// solicited-node group's, send-only) and on OpenSM's new
			// MFT entry reaching the forwarder at its next read of
			// every switch (seconds on a loaded machine): until one
			// ping is answered, each asking a failed neighbor again;
			// then none may be lost.
			for _, dst := range []string{c.ip4(b), c.ip6(b)} {
				reachWithin(t, c, a, dst, time.Now(), 30*time.Second)
				c.ping(a, dst, 2)
			}
		}
	}
	t.Logf("every pair pinged over IPv4 and IPv6 in %.1f s", time.Since(start).Seconds())
	// ARP and ND went over the broadcast group's MLID: every peer resolved.
	for k := 1; k <= 4; k++ {
		neigh := c.neighbors(k)
		for p := 1; p <= 4; p++ {
			for _, ip := range []string{c.ip4(p), c.ip6(p)} {
				if n, ok := neigh[ip]; p != k && (!ok || n.LinkAddr == "") {
					t.Errorf("h%d: neighbor %s unresolved: %+v", k, ip, n)
				}
			}
		}
	}
	// OpenSM programmed the groups our joins asked for: some MLID forwards
	// to both hosts' ports of each switch and over the link between them.
	for sw, ports := range map[string][]int{"sw1": {1, 3, 7}, "sw2": {2, 4, 7}} {
		if mft := fab.Output(t, "sm", exec.Command("ibroute", "-M", fab.SwitchLIDOf(t, sw))); !mftHasAll(mft, ports...) {
			t.Errorf("no MFT entry of %s reaches ports %v:\n%s", sw, ports, mft)
		}
	}

	c.on(1, "ping", "-c", "2", "-i", "0.1", "-W", "2", "-M", "do", "-s", "65000", c.ip4(2))
	c.on(3, "ping", "-c", "2", "-i", "0.1", "-W", "2", "-M", "do", "-s", "65000", c.ip4(4))
	for pair, via := range map[[2]int]string{{1, 2}: "RC", {3, 4}: "UC"} {
		if n := c.neighbors(pair[0])[c.ip4(pair[1])]; n.Via != via {
			t.Errorf("h%d neighbor h%d = %+v, want via %s", pair[0], pair[1], n, via)
		}
	}
	rtt := c.on(1, "ping", "-c", "5", "-i", "0.1", "-W", "2", c.ip4(2))
	gbps := iperf3(t, c, 1, 2, c.ip4(2), 3)
	t.Logf("IB subnet: ping h1->h2 over RC: %s; iperf3 h1->h2 over RC %.2f Gbit/s", rtt[strings.LastIndex(rtt, "rtt"):], gbps)
	for _, k := range []int{1, 2} {
		var notable []string
		for name, v := range c.stats(k) {
			if v != 0 && (strings.Contains(name, "drop") || strings.Contains(name, "retr") || strings.Contains(name, "timeout") || strings.Contains(name, "nak")) {
				notable = append(notable, fmt.Sprintf("%s=%d", name, v))
			}
		}
		slices.Sort(notable)
		t.Logf("h%d after iperf3: %s", k, strings.Join(notable, " "))
	}
	for _, k := range []int{1, 2, fabHost} {
		t.Logf("h%d UDP: %s", k, udpErrors(c.on(k, "cat", "/proc/net/snmp")))
	}

	// A peer killed and restarted: a new port client on the same node,
	// traffic comes back.
	c.stop(2, "KILL")
	c.start(2, ibFlags(2)...)
	restarted := time.Now()
	// One ping a time, each waiting up to a second, until one answers:
	// over IPv4, then IPv6 (h1's neighbor entries of the old h2 go
	// separately).
	for _, dst := range []string{c.ip4(2), c.ip6(2)} {
		for {
			if _, err := c.try(1, "ping", "-c", "1", "-W", "1", dst); err == nil {
				break
			}
			if time.Since(restarted) > 20*time.Second {
				t.Fatalf("h1 could not reach the restarted h2 at %s within 20 s", dst)
			}
		}
		t.Logf("traffic to %s back %.2f s after h2's restart", dst, time.Since(restarted).Seconds())
	}
	c.ping(2, c.ip6(1), 2)
	c.ping(2, c.ip4(3), 2)
	c.on(2, "ping", "-c", "2", "-i", "0.1", "-W", "2", "-M", "do", "-s", "65000", c.ip4(1))

	checkCMCapture(t, mads, nodes)
}

// udpErrors is the Udp line pair of /proc/net/snmp as name=value.
func udpErrors(snmp string) string {
	var rows [][]string
	for _, l := range strings.Split(snmp, "\n") {
		if strings.HasPrefix(l, "Udp: ") {
			rows = append(rows, strings.Fields(l)[1:])
		}
	}
	if len(rows) != 2 {
		return "?"
	}
	var out []string
	for i, n := range rows[0] {
		if i < len(rows[1]) && rows[1][i] != "0" {
			out = append(out, n+"="+rows[1][i])
		}
	}
	return strings.Join(out, " ")
}

// ibstatPort reads a node's port LID and GUID with ibstat.
func ibstatPort(t *testing.T, fab *ibsim.Fabric, node string) ibNode {
	t.Helper()
	out := fab.Output(t, node, exec.Command("ibstat"))
	field := func(name string) uint64 {
		m := regexp.MustCompile(`(?m)^\s*` + name + `:\s*(\S+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("ibstat on %s: no %s:\n%s", node, name, out)
		}
		v, err := strconv.ParseUint(m[1], 0, 64)
		if err != nil {
			t.Fatalf("ibstat on %s: %s %q", node, name, m[1])
		}
		return v
	}
	return ibNode{lid: uint16(field("Base lid")), guid: field("Port GUID")}
}

// ibGID is the link-local GID of a port GUID, as saquery writes GIDs.
func ibGID(guid uint64) string {
	var g ib.GID
	be.BigEndian.PutUint64(g[:8], 0xfe80<<48)
	be.BigEndian.PutUint64(g[8:], guid)
	return g.String()
}

// forwarder follows what softib-ibfwd prints: "tables:" when the tables
// it forwards by change, "path:" for each pair's way (-paths),
// "crossed:" and "alone:" for each held REQ (-cross-reqs), and
// "counters:" on SIGUSR1 and at its end.
type forwarder struct {
	cmd       *exec.Cmd
	mu        sync.Mutex
	tables    string                         // the newest "tables:" line
	counters  []string                       // every "counters:" line
	paths     map[[2]uint16]ibfwd.PathRecord // the newest way of each (SLID, DLID)
	crossings []string
	changed   chan struct{} // capacity one: a line came
}

func (f *forwarder) line(l string) {
	f.mu.Lock()
	switch {
	case strings.HasPrefix(l, "tables:"):
		f.tables = l
	case strings.HasPrefix(l, "counters:"):
		f.counters = append(f.counters, l)
	case strings.HasPrefix(l, "path:"):
		if p, err := ibfwd.ParsePathRecord(strings.TrimPrefix(l, "path:")); err == nil {
			f.paths[[2]uint16{p.SLID, p.DLID}] = p
		}
	case strings.HasPrefix(l, "crossed:"), strings.HasPrefix(l, "alone:"):
		f.crossings = append(f.crossings, l)
	}
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// wait waits until done, called under f.mu, holds; it fails the test
// after timeout, saying what it waited for.
func (f *forwarder) wait(t *testing.T, what string, timeout time.Duration, done func() bool) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		f.mu.Lock()
		ok := done()
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-f.changed:
		case <-deadline:
			f.mu.Lock()
			last := f.tables
			f.mu.Unlock()
			t.Fatalf("softib-ibfwd: no %s within %v (its last %q)", what, timeout, last)
		}
	}
}

// await waits until the forwarder's tables carry every MLID in mlids.
func (f *forwarder) await(t *testing.T, mlids []string, timeout time.Duration) {
	t.Helper()
	f.wait(t, fmt.Sprintf("tables with MLIDs %v", mlids), timeout, func() bool {
		have := strings.Fields(f.tables)
		return !slices.ContainsFunc(mlids, func(m string) bool { return !slices.Contains(have, m) })
	})
}

// Counters asks the forwarder for its counters (SIGUSR1).
func (f *forwarder) Counters(t *testing.T) map[string]uint64 {
	t.Helper()
	f.mu.Lock()
	n := len(f.counters)
	f.mu.Unlock()
	if err := f.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	f.wait(t, "counters", 10*time.Second, func() bool { return len(f.counters) > n })
	f.mu.Lock()
	defer f.mu.Unlock()
	return parseCounters(f.counters[n])
}

// parseCounters reads "counters: name=value ...".
func parseCounters(l string) map[string]uint64 {
	m := map[string]uint64{}
	for _, kv := range strings.Fields(strings.TrimPrefix(l, "counters:")) {
		k, v, _ := strings.Cut(kv, "=")
		m[k], _ = strconv.ParseUint(v, 10, 64)
	}
	return m
}

// path waits for the way the forwarder saw packets from slid to dlid go.
func (f *forwarder) path(t *testing.T, slid, dlid uint16, timeout time.Duration) ibfwd.PathRecord {
	t.Helper()
	var p ibfwd.PathRecord
	f.wait(t, fmt.Sprintf("path from LID %d to %d", slid, dlid), timeout, func() bool {
		var ok bool
		p, ok = f.paths[[2]uint16{slid, dlid}]
		return ok
	})
	return p
}

// mftMLIDs lists the MLIDs an ibroute -M dump holds.
func mftMLIDs(dump string) []string {
	var m []string
	for _, l := range strings.Split(dump, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "0x") {
			m = append(m, strings.ToLower(f[0]))
		}
	}
	return m
}

// startForwarder runs softib-ibfwd on host k, as the fabric reaches it,
// and waits for it to have read the tables.
func startForwarder(t *testing.T, c *cluster, k int, fab *ibsim.Fabric, args []string) *forwarder {
	t.Helper()
	bins, err := ibBinaries()
	if err != nil {
		t.Fatal(err)
	}
	cmd := c.command(k, bins[1], args...)
	// The forwarder preloads umad2sim into its diag commands itself.
	for _, e := range fab.NodeEnv("sm") {
		if strings.HasPrefix(e, "IBSIM_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(os.Environ(), cmd.Env...)
	cmd.Dir = fab.Dir()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	fwd := &forwarder{cmd: cmd, paths: map[[2]uint16]ibfwd.PathRecord{}, changed: make(chan struct{}, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		<-lines // its output read to the end, the counters at its end included
		_ = cmd.Wait()
		fwd.mu.Lock()
		if n := len(fwd.counters); n > 0 {
			var nonzero []string
			for _, kv := range strings.Fields(strings.TrimPrefix(fwd.counters[n-1], "counters:")) {
				if !strings.HasSuffix(kv, "=0") {
					nonzero = append(nonzero, kv)
				}
			}
			t.Logf("softib-ibfwd counters: %s", strings.Join(nonzero, ", "))
		}
		fwd.mu.Unlock()
		if t.Failed() {
			t.Logf("softib-ibfwd stderr:\n%s", stderr.String())
		}
	})
	ready := make(chan string, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "forwarding on") {
				ready <- sc.Text()
				break
			}
		}
		close(ready)
		for sc.Scan() {
			fwd.line(sc.Text())
		}
	}()
	select {
	case l, ok := <-ready:
		if !ok {
			t.Fatalf("softib-ibfwd ended before forwarding: %s", stderr.String())
		}
		t.Log(l)
	case <-time.After(20 * time.Second):
		t.Fatalf("softib-ibfwd did not start forwarding: %s", stderr.String())
	}
	return fwd
}

// mftHasAll reports whether some row of ibroute -M's dump forwards to
// every one of the switch ports.
func mftHasAll(dump string, ports ...int) bool {
	var header string
	for _, l := range strings.Split(dump, "\n") {
		if strings.Contains(l, "Ports:") {
			header = l
			continue
		}
		if !strings.HasPrefix(l, "0x") || header == "" {
			continue
		}
		all := true
		for _, p := range ports {
			s := " " + strconv.Itoa(p) + " "
			i := strings.Index(header+" ", s)
			end := i + len(s) - 2 // the port number's last digit
			if i < 0 || end >= len(l) || l[end] != 'x' {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

// cmMAD is one CM MAD of a capture: its attribute's name and LIDs.
type cmMAD struct {
	attr       string
	slid, dlid uint16
}

func (m cmMAD) String() string { return fmt.Sprintf("%s %d>%d", m.attr, m.slid, m.dlid) }

var cmAttrNames = map[string]string{"0x0010": "REQ", "0x0011": "MRA", "0x0012": "REJ", "0x0013": "REP", "0x0014": "RTU", "0x0015": "DREQ", "0x0016": "DREP"}

// checkCMCapture reads the forwarder's capture of the ports' MADs with
// tshark: every one is a CM MAD (the SA's go through umad2sim, not the
// forwarder), LID-routed between two hosts' LIDs without a GRH, and
// nothing is malformed. It returns the MADs in the capture's order.
func checkCMCapture(t *testing.T, file string, nodes map[int]ibNode) []cmMAD {
	t.Helper()
	fields := []string{"infiniband.lrh.lnh", "infiniband.lrh.slid", "infiniband.lrh.dlid", "infiniband.bth.destqp",
		"infiniband.mad.mgmtclass", "infiniband.mad.attributeid", "infiniband.grh.sgid"}
	rows, opts := readIBCapture(t, file, fields...)
	file = opts[0]
	lids := map[string]bool{}
	for _, n := range nodes {
		lids[strconv.Itoa(int(n.lid))] = true
	}
	attrs := map[string]int{}
	sent := map[string]bool{}
	var ex []cmMAD
	for i, f := range rows {
		lnh, slid, dlid, qp, class, attr, sgid := f[0], f[1], f[2], f[3], f[4], f[5], f[6]
		s, _ := strconv.ParseUint(slid, 10, 16)
		d, _ := strconv.ParseUint(dlid, 10, 16)
		name, ok := cmAttrNames[attr]
		if !ok {
			name = attr
		}
		ex = append(ex, cmMAD{name, uint16(s), uint16(d)})
		switch {
		case lnh != "0x02" || sgid != "":
			t.Errorf("frame %d: LNH %s, SGID %q: a CM MAD with a GRH", i+1, lnh, sgid)
		case !lids[slid] || !lids[dlid]:
			t.Errorf("frame %d: SLID %s DLID %s, not hosts' LIDs %v", i+1, slid, dlid, lids)
		case qp != "0x000001" || class != "0x07":
			t.Errorf("frame %d: QP %s class %s, want a CM MAD (class 0x07) to QP1", i+1, qp, class)
		}
		attrs[attr]++
		sent[slid] = true
	}
	t.Logf("CM MADs captured: %d, by attribute %v, from LIDs %v", len(rows), attrs, slices.Sorted(maps.Keys(sent)))
	for attr, name := range map[string]string{"0x0010": "REQ", "0x0013": "REP", "0x0014": "RTU"} {
		if attrs[attr] == 0 {
			t.Errorf("no CM %s (attribute %s) captured", name, attr)
		}
	}
	bad, err := exec.Command("tshark", append([]string{"-r", file, "-Y", "_ws.malformed || _ws.expert.severity >= warning"}, opts[1:]...)...).Output()
	if err != nil || strings.TrimSpace(string(bad)) != "" {
		t.Errorf("tshark finds malformed CM frames (%v):\n%s", err, bad)
	}
	return ex
}

// pcapRecords counts the records of a pcap file as written so far.
func pcapRecords(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for off := 24; off+16 <= len(b); n++ {
		off += 16 + int(be.LittleEndian.Uint32(b[off+8:]))
	}
	return n
}

// tsharkLacks247 reports whether tshark lacks pcap link type 247 (before
// Wireshark 4.2), asked once with a capture of no frame.
var tsharkLacks247 = sync.OnceValue(func() bool {
	f, err := os.CreateTemp("", "ipoibd-247-*.pcap")
	if err != nil {
		return false
	}
	defer os.Remove(f.Name())
	var h [24]byte
	be.LittleEndian.PutUint32(h[0:], 0xa1b2c3d4)
	be.LittleEndian.PutUint16(h[4:], 2)
	be.LittleEndian.PutUint16(h[6:], 4)
	be.LittleEndian.PutUint32(h[16:], 65535)
	be.LittleEndian.PutUint32(h[20:], 247)
	_, err = f.Write(h[:])
	f.Close()
	if err != nil {
		return false
	}
	probe, _ := exec.Command("tshark", "-r", f.Name()).CombinedOutput()
	return strings.Contains(string(probe), "network type 247 unknown")
})

// readIBCapture reads fields of every frame of a capture of link type 247
// with tshark: a row per frame. It also returns how to read the file
// again: the file tshark can read and its options (Wireshark before 4.2
// has the dissector but not the link type: the same records as DLT_USER0,
// handed to it).
func readIBCapture(t *testing.T, file string, fields ...string) (rows [][]string, fileAndOpts []string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 24 {
		t.Fatalf("capture %s: %d octets", file, len(b))
	}
	var opts []string
	if tsharkLacks247() {
		be.LittleEndian.PutUint32(b[20:], 147)
		file = filepath.Join(t.TempDir(), "user0.pcap")
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
		opts = []string{"-o", `uat:user_dlts:"User 0 (DLT=147)","infiniband","0","","0",""`}
	}
	args := append([]string{"-r", file, "-T", "fields", "-E", "occurrence=f"}, opts...)
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	for i, r := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if r == "" { // no frame yet
			break
		}
		f := strings.Split(r, "\t")
		if len(f) != len(fields) {
			t.Fatalf("frame %d: %q", i+1, r)
		}
		rows = append(rows, f)
	}
	return rows, append([]string{file}, opts...)
}
