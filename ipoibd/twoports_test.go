package main

import (
	"bufio"
	"fmt"
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

	"github.com/ipoibd/ipoibd/ipoib"
)

// Two rails: the cluster's bridge (eth0, 10.N.0.K) is rail A; railB adds
// a second bridge (eth1, 10.N.1.K on each host given) joined to the first
// by an inter-switch link, as the two switches of one InfiniBand subnet:
// every port reaches every other, so a host whose rail-A link is down
// reaches its peers' rail-A ports from its rail-B one.
func railB(t *testing.T, c *cluster, hosts ...int) {
	t.Helper()
	sw := c.tn.Switch()
	steps := [][]string{
		{"-n", sw, "link", "add", "br1", "mtu", "9000", "type", "bridge", "mcast_snooping", "0"},
		{"-n", sw, "link", "add", "isl0", "mtu", "9000", "type", "veth", "peer", "name", "isl1"},
		{"-n", sw, "link", "set", "isl0", "master", "br0", "up"},
		{"-n", sw, "link", "set", "isl1", "master", "br1", "up"},
		{"-n", sw, "link", "set", "br1", "up"},
	}
	for _, k := range hosts {
		h, port := c.host(k), fmt.Sprintf("b%d", k)
		steps = append(steps,
			[]string{"-n", sw, "link", "add", port, "mtu", "9000", "type", "veth", "peer", "name", "eth1", "netns", h},
			[]string{"-n", sw, "link", "set", port, "master", "br1", "up"},
			[]string{"-n", h, "link", "set", "eth1", "mtu", "9000", "up"},
			[]string{"-n", h, "addr", "add", railBAddr(c, k) + "/24", "dev", "eth1"},
			// Two links of one host on one L2 domain: each answers ARP
			// only for its own address (no ARP flux), or a peer may cache
			// the MAC of the link that then goes down.
			[]string{"netns", "exec", h, "sysctl", "-q", "-w", "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2"},
			// Each rail's subnet through the other link too, at a worse
			// metric: what a link down leaves.
			[]string{"-n", h, "route", "add", fmt.Sprintf("10.%d.0.0/24", c.net), "dev", "eth1", "metric", "100"},
			[]string{"-n", h, "route", "add", fmt.Sprintf("10.%d.1.0/24", c.net), "dev", "eth0", "metric", "100"})
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
}

func railBAddr(c *cluster, k int) string { return fmt.Sprintf("10.%d.1.%d", c.net, k) }

// railUp brings host k's link to a rail (eth0: A, eth1: B) up again with
// its route to the other rail's subnet, which the kernel removed with the
// link.
func railUp(c *cluster, k int, dev string) {
	c.t.Helper()
	other := map[string]string{"eth0": "1", "eth1": "0"}[dev]
	c.on(k, "ip", "link", "set", dev, "up")
	c.on(k, "ip", "route", "replace", fmt.Sprintf("10.%d.%s.0/24", c.net, other), "dev", dev, "metric", "100")
}

// activePort is the device of host k's active port, "" if none.
func activePort(i ipoib.Info) string {
	for _, p := range i.Ports {
		if p.State == "active" {
			return p.Device
		}
	}
	return ""
}

// portState is the state show gives host k's port dev.
func portState(i ipoib.Info, dev string) string {
	for _, p := range i.Ports {
		if p.Device == dev {
			return p.State
		}
	}
	return ""
}

// pinger runs ping at 0.1 s from host k to dst until stop, and tells the
// longest run of replies that never came.
type pinger struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	seqs []int
	sent int
}

func startPinger(t *testing.T, c *cluster, k int, dst string) *pinger {
	t.Helper()
	p := &pinger{cmd: c.command(k, "ping", "-i", "0.1", "-W", "1", dst), done: make(chan struct{})}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seq, sent := regexp.MustCompile(`icmp_seq=(\d+) `), regexp.MustCompile(`(\d+) packets transmitted`)
	go func() {
		defer close(p.done)
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			if m := seq.FindStringSubmatch(lines.Text()); m != nil {
				n, _ := strconv.Atoi(m[1])
				p.mu.Lock()
				p.seqs = append(p.seqs, n)
				p.mu.Unlock()
			}
			if m := sent.FindStringSubmatch(lines.Text()); m != nil {
				p.sent, _ = strconv.Atoi(m[1])
			}
		}
	}()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

// stop ends the pings and returns how many were sent, answered, and the
// longest run of unanswered ones.
func (p *pinger) stop() (sent, answered, longestGap int) {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	<-p.done
	_ = p.cmd.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	seqs := slices.Clone(p.seqs)
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	last := 0
	for _, s := range seqs {
		longestGap = max(longestGap, s-last-1)
		last = s
	}
	longestGap = max(longestGap, p.sent-last)
	return p.sent, len(seqs), longestGap
}

// TestTwoPortsFailover runs h1 and h2 over two ports each, rail A and rail
// B (h1 spreading flows, the default; h2 in active-backup), and h3 on
// rail A alone; h1 and h2 have a P_Key child each, over both ports. With an iperf3 stream from h2 to h1 and pings
// from h2 and h3, h1's rail-A link goes down: h1 moves to rail B within a
// second (at most 10 pings at 0.1 s lost in a row, iperf3 ends well),
// says so in show and stats, and its peers follow; rail A back, the
// primary takes over again (--primary-reselect always); both rails down,
// the carrier is off. h2, with --primary-reselect failure, stays on rail
// B when its rail A comes back. A capture on rail B decodes whole in
// tshark, the sibling trailer and option included.
func TestTwoPortsFailover(t *testing.T) {
	c := newCluster(t, "rails", 3)
	railB(t, c, 1, 2, 3)
	c.start(1, "--underlay", railBAddr(c, 1), "--softib-pkeys", "0xffff,0x8001")
	c.start(2, "--underlay", railBAddr(c, 2), "--primary-reselect", "failure", "--bond-mode", "active-backup", "--softib-pkeys", "0xffff,0x8001")
	c.start(3)
	// P_Key children run over both ports too, and fail over with ib0.
	child := func(k int) string { return fmt.Sprintf("172.16.%d.%d", c.net, k) }
	for k := 1; k <= 2; k++ {
		c.on(k, binary, "child", "add", "0x8001", "--addr", child(k)+"/24")
	}
	for k, second := range map[int]string{1: "rail", 2: "standby"} {
		if s := c.show(k); len(s.Ports) != 2 || activePort(s) != "softib0" || portState(s, "softib1") != second {
			t.Fatalf("h%d at start: ports %+v, want softib0 active and softib1 %s", k, s.Ports, second)
		}
	}
	c.ping(2, c.ip4(1), 2)
	c.ping(3, c.ip4(1), 2)
	// h2 and h3 learned h1's rail-B port from h1's own ARP.
	h1 := c.show(1)
	if n := c.neighbors(2)[c.ip4(1)]; n.Sibling != h1.Ports[1].LinkAddr {
		t.Fatalf("h2 knows h1's other port as %q, want %s", n.Sibling, h1.Ports[1].LinkAddr)
	}

	dump := startDump(t, c, 2, "eth1")
	iperf3Server(t, c, 1, c.ip4(1), "-1")
	iperfDone := make(chan error, 1)
	var iperfOut string
	go func() {
		out, err := c.try(2, "iperf3", "-c", c.ip4(1), "-t", "20")
		iperfOut = out
		iperfDone <- err
	}()
	c.ping(2, child(1), 1)
	p2, p3, pc := startPinger(t, c, 2, c.ip4(1)), startPinger(t, c, 3, c.ip4(1)), startPinger(t, c, 2, child(1))
	await(t, 10*time.Second, "h2's first pings answered", func() bool { p2.mu.Lock(); defer p2.mu.Unlock(); return len(p2.seqs) >= 20 })
	c.on(1, "ip", "link", "set", "eth0", "down")
	await(t, 5*time.Second, "h1 on rail B", func() bool { return activePort(c.show(1)) == "softib1" })
	if err := <-iperfDone; err != nil {
		t.Fatalf("iperf3 across the failover: %v\n%s", err, iperfOut)
	}
	for _, p := range []struct {
		from string
		p    *pinger
	}{{"h2", p2}, {"h3", p3}, {"h2's child", pc}} {
		sent, got, gap := p.p.stop()
		t.Logf("%s's pings across the failover: %d sent, %d answered, at most %d in a row lost", p.from, sent, got, gap)
		if gap > 10 {
			t.Errorf("%s lost %d pings in a row across the failover, want at most 10", p.from, gap)
		}
	}
	var ch ipoib.Info
	c.queryIf(1, "show", "ib0.8001", &ch)
	if activePort(ch) != "softib1" || ch.Failovers != 1 {
		t.Errorf("h1's child after the failover: ports %+v, failovers %d", ch.Ports, ch.Failovers)
	}
	s := c.show(1)
	if s.Failovers != 1 || portState(s, "softib0") != "down" || s.LinkAddr != s.Ports[1].LinkAddr {
		t.Errorf("h1 after the failover: failovers %d, ports %+v, link %s", s.Failovers, s.Ports, s.LinkAddr)
	}
	t.Logf("h1's failover took %.3f ms", s.LastFailoverMs)
	if st := c.stats(1); st["failovers"] != 1 {
		t.Errorf("h1's stats: failovers %d, want 1", st["failovers"])
	}
	if st := c.stats(2); st["neigh_moved_to_sibling"] == 0 {
		t.Errorf("h2 did not follow h1's move at once (neigh_moved_to_sibling 0)")
	}
	if !strings.Contains(c.on(1, "ip", "link", "show", "ib0"), "LOWER_UP") {
		t.Errorf("h1's carrier went off with one port left")
	}
	checkDump(t, dump)

	// The primary back: always takes over again.
	railUp(c, 1, "eth0")
	await(t, 5*time.Second, "h1 back on rail A", func() bool { return activePort(c.show(1)) == "softib0" })
	c.ping(2, c.ip4(1), 3)
	// failure: h2 stays on rail B once its rail A is back.
	c.on(2, "ip", "link", "set", "eth0", "down")
	await(t, 5*time.Second, "h2 on rail B", func() bool { return activePort(c.show(2)) == "softib1" })
	railUp(c, 2, "eth0")
	await(t, 5*time.Second, "h2's rail-A port up again", func() bool { return portState(c.show(2), "softib0") == "standby" })
	if s := c.show(2); activePort(s) != "softib1" || s.Failovers != 1 {
		t.Errorf("h2 (--primary-reselect failure) after its rail A came back: ports %+v, failovers %d", s.Ports, s.Failovers)
	}
	c.ping(1, c.ip4(2), 3)

	// Both rails down: no carrier, as a NIC without link.
	c.on(1, "ip", "link", "set", "eth0", "down")
	c.on(1, "ip", "link", "set", "eth1", "down")
	await(t, 5*time.Second, "h1's carrier off", func() bool { return !c.show(1).Carrier })
	railUp(c, 1, "eth1")
	await(t, 5*time.Second, "h1's carrier on with rail B", func() bool { s := c.show(1); return s.Carrier && activePort(s) == "softib1" })
	back := time.Now()
	await(t, 5*time.Second, "h2's pings answered again after both of h1's rails were down", func() bool {
		_, err := c.try(2, "ping", "-c", "1", "-W", "1", c.ip4(1))
		return err == nil
	})
	t.Logf("after both rails down, h2's pings were answered again %v after h1's carrier came back", time.Since(back).Round(time.Millisecond))
}

// startDump captures the fabric on host k's link dev until checkDump.
type dumpRun struct {
	cmd  *exec.Cmd
	file string
}

func startDump(t *testing.T, c *cluster, k int, dev string) dumpRun {
	t.Helper()
	if _, err := lookTools("tshark", "dumpcap"); err != nil {
		t.Skip(err)
	}
	file := filepath.Join(t.TempDir(), dev+".pcap")
	d := dumpRun{cmd: c.command(k, "dumpcap", "-q", "-i", dev, "-s", "256", "-f", "udp port 4791", "-P", "-w", file), file: file}
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	for lines.Scan() && !strings.Contains(lines.Text(), "Capturing on") {
	}
	go func() {
		for lines.Scan() {
		}
	}()
	t.Cleanup(func() { _ = d.cmd.Process.Kill(); _ = d.cmd.Wait() })
	return d
}

// checkDump ends the capture and has tshark judge it: every frame
// decodes, and ARP from a host over two ports is there.
func checkDump(t *testing.T, d dumpRun) {
	t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	_ = d.cmd.Wait()
	if bad := expertFindings(t, d.file, "_ws.malformed || _ws.expert.severity >= error"); bad != "" {
		t.Errorf("tshark finds malformed frames in the rail-B capture:\n%s", bad)
	}
	if !captured(d.file, "arp") {
		t.Errorf("no ARP in the rail-B capture: the failover's announcement is missing")
	}
}

// TestTwoPortsUnreachable: h1's rail-A port stays up but reaches nothing
// (nftables drops its softib datagrams): every connection on h1's active
// port fails, to h2 and to h3, and h1 moves to rail B, where its peers
// follow; pings from h1 to both are answered again.
func TestTwoPortsUnreachable(t *testing.T) {
	if _, err := lookTools("nft"); err != nil {
		t.Skip(err)
	}
	c := newCluster(t, "unreach", 3)
	railB(t, c, 1, 2, 3)
	c.start(1, "--underlay", railBAddr(c, 1), "--bond-mode", "active-backup")
	c.start(2)
	c.start(3)
	c.ping(1, c.ip4(2), 2)
	c.ping(1, c.ip4(3), 2)
	p2, p3 := startPinger(t, c, 1, c.ip4(2)), startPinger(t, c, 1, c.ip4(3))
	cut := time.Now()
	// Port A's datagrams, by its underlay address: routing may send port
	// B's out of eth0 too (the underlay's routes, not a rail's cable).
	a := c.underlay(1)
	c.on(1, "nft", "add table inet cut; add chain inet cut out { type filter hook output priority 0; }; add chain inet cut in { type filter hook input priority 0; };"+
		" add rule inet cut out ip saddr "+a+" udp dport 4791 drop; add rule inet cut in ip daddr "+a+" udp dport 4791 drop")
	await(t, 60*time.Second, "h1 on rail B", func() bool { return activePort(c.show(1)) == "softib1" })
	moved := time.Since(cut)
	for k, p := range map[int]*pinger{2: p2, 3: p3} {
		p.mu.Lock()
		n := len(p.seqs)
		p.mu.Unlock()
		await(t, 10*time.Second, fmt.Sprintf("h1's pings to h%d answered again", k), func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return len(p.seqs) >= n+5
		})
		sent, got, gap := p.stop()
		t.Logf("h1's pings to h%d: %d sent, %d answered, at most %d in a row lost", k, sent, got, gap)
		// Detection: the connections' transport retries, then the
		// neighbors' unanswered probes (3 s).
		if gap > 100 {
			t.Errorf("h1 lost %d pings in a row to h%d, want at most 100 (10 s)", gap, k)
		}
	}
	s := c.show(1)
	t.Logf("h1 moved to rail B %v after its rail A stopped forwarding; ports %+v", moved.Round(time.Millisecond), s.Ports)
	if s.Failovers != 1 || portState(s, "softib0") != "unreachable" || !s.Carrier {
		t.Errorf("h1 after the move: failovers %d, ports %+v, carrier %v", s.Failovers, s.Ports, s.Carrier)
	}
}
