package testnet

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// hostLink is one host of a bridge: its namespace, the name of its veth
// end on the bridge, and the address of its other end, eth0.
type hostLink struct {
	ns, port string
	addr     netip.Prefix
}

// build makes the namespace sw holding the bridge br0 and, for each host,
// a namespace joined to br0 by a veth pair, all at MTU mtu. Nothing is
// made outside these namespaces, so deleting them removes everything; on
// an error, what was made stays for the caller to delete.
func build(sw string, hosts []hostLink, mtu int) error {
	m := fmt.Sprint(mtu)
	steps := [][]string{
		{"netns", "add", sw},
		// No multicast snooping: the bridge floods multicast to every
		// port, so a group's first datagrams do not depend on whether the
		// members' IGMP/MLD reports were seen yet (a flaky multicast test).
		{"-n", sw, "link", "add", "br0", "mtu", m, "type", "bridge", "mcast_snooping", "0"},
		{"-n", sw, "link", "set", "br0", "up"},
	}
	for _, h := range hosts {
		steps = append(steps,
			[]string{"netns", "add", h.ns},
			[]string{"-n", sw, "link", "add", h.port, "mtu", m, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
			[]string{"-n", sw, "link", "set", h.port, "master", "br0", "up"},
			[]string{"-n", h.ns, "link", "set", "lo", "up"},
			[]string{"-n", h.ns, "link", "set", "eth0", "mtu", m, "up"},
			[]string{"-n", h.ns, "addr", "add", h.addr.String(), "dev", "eth0", "nodad"})
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// FabricPort is the UDP port softib's fabric runs on (RoCEv2's), the
// traffic that loss drops.
const FabricPort = 4791

// setLoss makes namespace ns drop percent of the fabric's datagrams it
// receives, at random, with nftables, replacing any earlier share. (tc
// netem would also reorder and duplicate, but kernels built without
// sch_netem, like this project's CI machines, lack it.)
func setLoss(ns string, percent int) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("loss %d %%: want 0 to 100", percent)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("loss needs nft (package nftables): %w", err)
	}
	// Declaring the table first makes the delete succeed on the first
	// call; the file is one transaction. numgen draws 0..999, so 100 %
	// needs no draw, and 0 % no table.
	rules := "table inet fabricloss\ndelete table inet fabricloss\n"
	if percent > 0 {
		draw := fmt.Sprintf("numgen random mod 1000 < %d ", percent*10)
		if percent == 100 {
			draw = ""
		}
		rules += fmt.Sprintf(`table inet fabricloss {
	chain input {
		type filter hook input priority 0;
		udp dport %d %scounter drop
	}
}
`, FabricPort, draw)
	}
	cmd := nsCommand(ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %v: %s", ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// nsCommand runs name with args inside the network namespace ns, through
// `ip netns exec`, which also mounts the namespace's own /sys.
func nsCommand(ns, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}
