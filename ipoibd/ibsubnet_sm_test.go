package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/internal/ibsim"
)

// TestIBSubnetSMRestart: two ipoibd on an ibsim subnet (h1 on sw1, h2 on
// sw2), traffic over RC; OpenSM is stopped and started on another node
// (h4) with a guid2lid that swaps the daemons' LIDs, keeping every other
// node's. Without a daemon restart, each daemon sees its port move (its
// SMA read on the bounded poll) and the SM's LID change, follows (paths,
// joins, connections made again, the SA asked at the SM's new LID, which
// the sysfs umad2sim filled at start does not tell) and pings over IPv4
// and IPv6 come back over RC within a bound; the LIDs the daemons took
// are the ones the new SM's SA reports.
func TestIBSubnetSMRestart(t *testing.T) {
	ibsim.Need(t, "saquery", "smpquery", "ibroute", "ibswitches")
	const daemons, fabHost = 2, 3
	c := newCluster(t, "ibsm", fabHost)
	// Built before the fabric: a build error fails at once.
	if _, err := ibBinaries(); err != nil {
		t.Fatal(err)
	}
	fab := ibsim.UpWith(t, ibsim.Options{Topology: ibSubnetTopology, SMNode: "sm", Netns: c.host(fabHost), Server: c.tn.Underlay(fabHost)})
	sm := ibstatPort(t, fab, "sm")
	nodes := daemonsOnFabric(t, c, fab, fabHost, daemons)
	pairs := [][2]int{{1, 2}, {2, 1}}
	// The first packets wait on joins and on OpenSM's MFT entries
	// reaching the forwarder, which a loaded machine slows.
	warm := time.Now()
	for _, p := range pairs {
		for _, dst := range []string{c.ip4(p[1]), c.ip6(p[1])} {
			reachWithin(t, c, p[0], dst, time.Now(), 20*time.Second)
			c.ping(p[0], dst, 2)
		}
	}
	t.Logf("before the restart: every pair pinged over IPv4 and IPv6 in %.1f s", time.Since(warm).Seconds())
	for _, p := range pairs {
		if n := c.neighbors(p[0])[c.ip4(p[1])]; n.Via != "RC" {
			t.Fatalf("before the restart: h%d's neighbor h%d = %+v, want via RC", p[0], p[1], n)
		}
	}

	// The first SM's cache names every node's LID: the new one keeps
	// the switches' and swaps the hosts'. It runs on h4 (no daemon
	// there): the SM's LID moves to h4's, and the daemons' SA requests
	// must follow it.
	cache, err := os.ReadFile(filepath.Join(fab.Dir(), "guid2lid"))
	if err != nil {
		t.Fatalf("the first OpenSM's LID cache: %v", err)
	}
	newSMLID := ibstatPort(t, fab, "h4").lid
	moved := map[uint64]uint16{
		nodes[1].guid: nodes[2].lid, nodes[2].guid: nodes[1].lid,
	}
	guid2lid := swapLIDs(t, string(cache), moved)
	fab.MoveSM(t, "h4", "", map[string]string{"guid2lid": guid2lid})
	restarted := time.Now()

	// The new SM's word on each host's LID: its SA's path from the SM.
	for k := 1; k <= daemons; k++ {
		// Right after SUBNET UP the SA is busy with every port's joins
		// again: a query that times out is asked again.
		var path map[string]string
		for try := 0; ; try++ {
			out, errOut, err := fab.Run("sm", exec.Command("saquery", "-p", "--sgid-to-dgid", ibGID(sm.guid)+"-"+ibGID(nodes[k].guid)))
			if err == nil {
				path = ibsim.Dump(out)
				break
			}
			if try == 5 {
				t.Fatalf("saquery for h%d after the restart: %v: %s", k, err, errOut)
			}
		}
		if want := strconv.Itoa(int(moved[nodes[k].guid])); path["dlid"] != want {
			t.Fatalf("h%d: the new SA's path record %v, want DLID %s from the guid2lid", k, path, want)
		}
	}

	// Traffic may flow on the old LIDs until the forwarder reads the new
	// tables; what is judged is traffic once each daemon followed its
	// move (its SMA read, the interface's connections torn down).
	const bound = 20 * time.Second
	for k := 1; k <= daemons; k++ {
		for !strings.Contains(readLog(c, k), "the SM moved our port to another LID") {
			if time.Since(restarted) > bound {
				t.Fatalf("h%d did not follow its LID change within %v", k, bound)
			}
			time.Sleep(100 * time.Millisecond) // the daemon's log is the only sign
		}
		t.Logf("h%d followed its LID change %.2f s after OpenSM's restart", k, time.Since(restarted).Seconds())
	}
	for _, p := range pairs {
		for _, dst := range []string{c.ip4(p[1]), c.ip6(p[1])} {
			reachWithin(t, c, p[0], dst, restarted, bound)
			t.Logf("h%d -> %s back %.2f s after OpenSM's restart", p[0], dst, time.Since(restarted).Seconds())
		}
	}
	// The connections torn down at the LID change are made again by
	// the new paths: traffic goes over RC again.
	for _, p := range pairs {
		for {
			c.ping(p[0], c.ip4(p[1]), 1)
			n := c.neighbors(p[0])[c.ip4(p[1])]
			if n.Via == "RC" {
				break
			}
			if time.Since(restarted) > bound {
				t.Fatalf("h%d's neighbor h%d = %+v %v after OpenSM's restart, want via RC", p[0], p[1], n, bound)
			}
			time.Sleep(200 * time.Millisecond) // the CM's exchange, which no event of ours tells
		}
		t.Logf("h%d -> h%d over RC again %.2f s after OpenSM's restart", p[0], p[1], time.Since(restarted).Seconds())
		for _, dst := range []string{c.ip4(p[1]), c.ip6(p[1])} {
			c.ping(p[0], dst, 3) // none lost now
		}
	}
	c.on(1, "ping", "-c", "2", "-i", "0.1", "-W", "2", "-M", "do", "-s", "65000", c.ip4(2))

	// The LID each daemon took from its SMA is the new SM's, and the
	// interface tore down the connections made from the old one.
	changed := regexp.MustCompile(`the subnet manager changed the port.* events=(\S+) lid=(\d+) lmc=\d+ sm_lid=(\d+)`)
	for k := 1; k <= daemons; k++ {
		log, _ := os.ReadFile(c.tn.LogPath(k))
		m := changed.FindAllSubmatch(log, -1)
		if len(m) == 0 {
			t.Errorf("h%d: no port change in the daemon's log", k)
			continue
		}
		last := m[len(m)-1]
		if want := strconv.Itoa(int(moved[nodes[k].guid])); string(last[2]) != want || !strings.Contains(string(last[1]), "lid_change") {
			t.Errorf("h%d: the daemon took LID %s (events %s), the SA says %s", k, last[2], last[1], want)
		}
		// The SM's new LID, where the SA requests of the paths asked
		// again went (the traffic above needed them).
		if string(last[3]) != strconv.Itoa(int(newSMLID)) || !strings.Contains(string(last[1]), "sm_change") {
			t.Errorf("h%d: the daemon took SM LID %s (events %s), the SM moved to %d", k, last[3], last[1], newSMLID)
		}
		if !strings.Contains(string(log), "the SM moved our port to another LID") {
			t.Errorf("h%d: the interface did not follow its LID change", k)
		}
		t.Logf("h%d: LID %d -> %s (%s)", k, nodes[k].lid, last[2], last[1])
	}
}

// readLog is host k's daemon log so far.
func readLog(c *cluster, k int) string {
	b, _ := os.ReadFile(c.tn.LogPath(k))
	return string(b)
}

// reachWithin pings dst from host k, one ping a time waiting up to a
// second each, until one answers; it fails the test when none has by
// bound after since.
func reachWithin(t *testing.T, c *cluster, k int, dst string, since time.Time, bound time.Duration) {
	t.Helper()
	if err := reach(c, k, dst, since, bound); err != nil {
		t.Fatal(err)
	}
}

// reach is reachWithin for any goroutine: it says when none answered.
func reach(c *cluster, k int, dst string, since time.Time, bound time.Duration) error {
	for {
		if _, err := c.try(k, "ping", "-c", "1", "-W", "1", dst); err == nil {
			return nil
		}
		if time.Since(since) > bound {
			return fmt.Errorf("h%d could not reach %s within %v", k, dst, bound)
		}
	}
}

// swapLIDs rewrites OpenSM's guid2lid cache (lines "GUID MINLID MAXLID")
// giving each port GUID in moved its new LID; every other line is kept.
func swapLIDs(t *testing.T, cache string, moved map[uint64]uint16) string {
	t.Helper()
	var b strings.Builder
	seen := 0
	for _, l := range strings.Split(cache, "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		guid, err := strconv.ParseUint(f[0], 0, 64)
		if err != nil {
			t.Fatalf("guid2lid line %q", l)
		}
		if lid, ok := moved[guid]; ok {
			fmt.Fprintf(&b, "0x%016x 0x%04x 0x%04x\n", guid, lid, lid)
			seen++
			continue
		}
		b.WriteString(l + "\n")
	}
	if seen != len(moved) {
		t.Fatalf("guid2lid names %d of the %d ports to move:\n%s", seen, len(moved), cache)
	}
	return b.String()
}
