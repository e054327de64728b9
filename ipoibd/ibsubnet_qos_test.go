package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/internal/ibsim"
)

// TestIBSubnetQoS: OpenSM's QoS policy gives every path and the broadcast
// group SL 1 and maps SL 0 to VL15 on every switch port, where the
// switches drop it. Whatever goes by the path's SL (UD, multicast, RC and
// UC data, the CM's MADs) still crosses both switches.
func TestIBSubnetQoS(t *testing.T) {
	ibsim.Need(t, "saquery")
	sl2vl := "15,1,2,3,4,5,6,7,0,1,2,3,4,5,6,7"
	c, fab, nodes := ibSubnetUnder(t, "ibqs", func(dir string, _ func(int) uint64) string {
		policy := filepath.Join(dir, "qos-policy.conf")
		parts := filepath.Join(dir, "partitions.conf")
		for file, text := range map[string]string{
			policy: "qos-ulps\n    default : 1\nend-qos-ulps\n",
			parts:  "Default=0x7fff, ipoib, sl=1 : ALL=full ;\n",
		} {
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return "qos TRUE\nqos_max_vls 8\nqos_policy_file " + policy + "\npartition_config_file " + parts +
			"\nqos_swe_sl2vl " + sl2vl + "\nqos_sl2vl " + sl2vl + "\n"
	})
	// The policy is in force: the SA's paths and broadcast group say SL 1
	// (TestOpenSMSubnetQoS shows this configuration maps SL 0 to VL15).
	path := ibsim.Dump(fab.Output(t, "sm", exec.Command("saquery", "-p", "--sgid-to-dgid", ibGID(nodes[1].guid)+"-"+ibGID(nodes[2].guid))))
	if path["sl"] != "0x1" && path["sl"] != "1" {
		t.Fatalf("the SA's path h1 to h2 has SL %q, want 1: %v", path["sl"], path)
	}
	if groups := fab.Output(t, "sm", exec.Command("saquery", "-g")); !strings.Contains(groups, "SL......................0x1") {
		t.Fatalf("the broadcast group is not on SL 1:\n%s", groups)
	}
	for _, pair := range [][2]int{{1, 2}, {2, 1}, {3, 4}, {1, 4}} {
		for _, dst := range []string{c.ip4(pair[1]), c.ip6(pair[1])} {
			reachWithin(c.t, c, pair[0], dst, time.Now(), 30*time.Second)
			c.ping(pair[0], dst, 2)
		}
	}
	c.on(1, "ping", "-c", "2", "-i", "0.1", "-W", "2", "-M", "do", "-s", "65000", c.ip4(2))
	if n := c.neighbors(1)[c.ip4(2)]; n.Via != "RC" {
		t.Errorf("h1 neighbor h2 = %+v, want via RC", n)
	}
	t.Logf("SL 0 to VL15 (%s): every pair pinged over SL 1", sl2vl)
}
