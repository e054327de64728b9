package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/internal/ibsim"
)

// ibPartitions is OpenSM's partitions.conf of TestIBSubnetPartitions for
// the port GUIDs of h1..h4: 0x8001 with h1 and h2 full members and h3 a
// limited one, 0x8002 with h1 and h2 limited members only; h4 is in
// neither.
func ibPartitions(guid func(k int) uint64) string {
	return fmt.Sprintf(`Default=0x7fff, ipoib : ALL=full ;
P1=0x8001, ipoib : %#x=full, %#x=full, %#x=limited ;
P2=0x8002, ipoib : %#x=limited, %#x=limited ;
`, guid(1), guid(2), guid(3), guid(1), guid(2))
}

// TestIBSubnetPartitions: OpenSM's partitions.conf decides which P_Key
// children work. The P_Key tables the daemons use are the ones OpenSM
// programmed (smpquery reads them back); full members reach each other
// (IPv4, IPv6, a 65000-octet DF ping over RC) and limited members; two
// limited members of a partition do not reach each other; a port outside
// a partition cannot start its child.
func TestIBSubnetPartitions(t *testing.T) {
	ibsim.Need(t, "smpquery", "saquery")
	c, fab, nodes := ibSubnetUnder(t, "ibpk", func(dir string, guid func(k int) uint64) string {
		parts := filepath.Join(dir, "partitions.conf")
		if err := os.WriteFile(parts, []byte(ibPartitions(guid)), 0o644); err != nil {
			t.Fatal(err)
		}
		return "partition_config_file " + parts + "\n"
	})

	// The table each daemon's port holds is the one OpenSM programmed.
	wantTables := map[int]string{1: "[0xffff 0x8001 0x0002]", 2: "[0xffff 0x8001 0x0002]", 3: "[0xffff 0x0001]", 4: "[0xffff]"}
	tableRE := regexp.MustCompile(`softib port on the InfiniBand subnet.* pkeys="?\[([^\]]*)\]`)
	for k := 1; k <= 4; k++ {
		sm := smpPKeys(t, fab, nodes[k].lid)
		log, _ := os.ReadFile(c.tn.LogPath(k))
		m := tableRE.FindSubmatch(log)
		if m == nil || "["+string(m[1])+"]" != sm {
			t.Errorf("h%d: the daemon's P_Key table %q, smpquery says %s", k, m, sm)
		}
		if sm != wantTables[k] {
			t.Errorf("h%d: OpenSM set P_Key table %s, partitions.conf asks for %s", k, sm, wantTables[k])
		}
	}

	addr := func(part, k int) (string, string) {
		return fmt.Sprintf("172.%d.%d.%d", 15+part, c.net, k), fmt.Sprintf("fd0%d:%d::%d", part, c.net, k)
	}
	for _, ch := range []struct{ part, k int }{{1, 1}, {1, 2}, {1, 3}, {2, 1}, {2, 2}} {
		v4, v6 := addr(ch.part, ch.k)
		pkey := fmt.Sprintf("0x800%d", ch.part)
		out := c.on(ch.k, binary, "child", "add", pkey, "--addr", v4+"/24", "--addr", v6+"/64")
		if want := "ib0.800" + fmt.Sprint(ch.part) + " added"; strings.TrimSpace(out) != want {
			t.Fatalf("h%d: child add %s said %q", ch.k, pkey, out)
		}
	}
	// h4 is in no partition but the default: its child is refused, saying
	// where P_Keys come from.
	if out, err := c.try(4, binary, "child", "add", "0x8001"); err == nil || !strings.Contains(out, "not in the port's P_Key table") || !strings.Contains(out, "partitions.conf") {
		t.Errorf("h4 (no member of 0x8001): child add said %q (%v)", out, err)
	}

	// Full members reach each other and the limited member, both ways.
	for _, pair := range [][2]int{{1, 2}, {2, 1}, {1, 3}, {3, 1}, {2, 3}, {3, 2}} {
		v4, v6 := addr(1, pair[1])
		for _, dst := range []string{v4, v6} {
			reachWithin(c.t, c, pair[0], dst, time.Now(), 30*time.Second)
			c.ping(pair[0], dst, 2)
		}
	}
	for _, pair := range [][2]int{{1, 2}, {3, 1}} {
		v4, _ := addr(1, pair[1])
		c.on(pair[0], "ping", "-c", "2", "-i", "0.1", "-W", "2", "-M", "do", "-s", "65000", v4)
		var ns []struct {
			IP  string `json:"ip"`
			Via string `json:"via"`
		}
		c.queryIf(pair[0], "neigh", "ib0.8001", &ns)
		via := ""
		for _, n := range ns {
			if n.IP == v4 {
				via = n.Via
			}
		}
		if via != "RC" {
			t.Errorf("h%d's child reaches %s via %q, want RC: %+v", pair[0], v4, via, ns)
		}
	}

	// Two limited members do not reach each other: nothing h1's child on
	// 0x8002 sends is accepted by h2's port, in either direction.
	before := c.stats(2)["dev_rx_drop_pkey"]
	for _, pair := range [][2]int{{1, 2}, {2, 1}} {
		v4, v6 := addr(2, pair[1])
		for _, dst := range []string{v4, v6} {
			if out, err := c.try(pair[0], "ping", "-c", "2", "-i", "0.2", "-W", "1", dst); err == nil {
				t.Errorf("h%d reached limited member h%d at %s on 0x8002:\n%s", pair[0], pair[1], dst, out)
			}
		}
	}
	if after := c.stats(2)["dev_rx_drop_pkey"]; after <= before {
		t.Errorf("h2 counted no P_Key drop (%d, then %d) while limited h1 sent on 0x8002", before, after)
	}
}

// ibSubnetUnder brings up TestIBSubnet's subnet in testnet cluster name
// (host 5 the fabric) with OpenSM restarted on the configuration that
// conf returns (lines of opensm.conf; it may write files in dir, given the
// port GUIDs of h1..h4), and four daemons on it; it returns the cluster,
// the fabric and the hosts' ports as the SM assigned them.
func ibSubnetUnder(t *testing.T, name string, conf func(dir string, guid func(k int) uint64) string) (*cluster, *ibsim.Fabric, map[int]ibNode) {
	t.Helper()
	c := newCluster(t, name, 5)
	// Built before the fabric: a build error fails at once.
	if _, err := ibBinaries(); err != nil {
		t.Fatal(err)
	}
	fabHost := 5
	fab := ibsim.UpWith(t, ibsim.Options{Topology: ibSubnetTopology, SMNode: "sm", Netns: c.host(fabHost), Server: c.tn.Underlay(fabHost)})
	guids := map[int]uint64{}
	for k := 1; k <= 4; k++ {
		guids[k] = ibstatPort(t, fab, fmt.Sprintf("h%d", k)).guid
	}
	fab.RestartSM(t, conf(fab.Dir(), func(k int) uint64 { return guids[k] }), nil)
	nodes := daemonsOnFabric(t, c, fab, fabHost, 4)
	return c, fab, nodes
}

// smpPKeys is the P_Key table OpenSM programmed into the port at lid, as
// smpquery reads it, without the empty entries at its end: "[0xffff ...]".
func smpPKeys(t *testing.T, fab *ibsim.Fabric, lid uint16) string {
	t.Helper()
	out := fab.Output(t, "sm", exec.Command("smpquery", "pkeys", fmt.Sprint(lid)))
	var keys []string
	for _, line := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.Contains(line, "0x") {
			continue
		}
		keys = append(keys, strings.Fields(rest)...)
	}
	for len(keys) > 0 && (keys[len(keys)-1] == "0x0000" || keys[len(keys)-1] == "0x8000") {
		keys = keys[:len(keys)-1]
	}
	return "[" + strings.Join(keys, " ") + "]"
}
