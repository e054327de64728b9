package testnet

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// RunDir holds each cluster's state, in a directory named for it: its
// number (net), and each daemon's pid (hK.pid) and log (hK.log). Being on
// disk, it lets a later process, or Down after a crash, find what an
// earlier one started.
const RunDir = "/run/ipoibd-cluster"

// DefaultNet is the cluster number of the demo (CLUSTER_NET's default).
const DefaultNet = 77

// ClusterMTU is the underlay MTU of every cluster (the bench's 9000).
const ClusterMTU = 9000

// Cluster is a named set of hosts on one bridge that outlives the process
// that made it. With name NAME and number N0, host K is the namespace
// NAME-hK with eth0 at 10.N0.0.K/24, joined by the veth NAME-vK to the
// bridge in the namespace NAME-br; the ipoibd that Start runs there gets
// ib0 with 192.168.N0.K/24 and fd00:N0::K/64.
type Cluster struct {
	Name string
	Net  int
	// Daemon is the ipoibd binary that Start runs and asks.
	Daemon string
	// Env, if set, gives host k's daemon environment beyond the
	// caller's (ibsim's variables for --softib-link ib), and Dir, if
	// set, its working directory.
	Env func(k int) []string
	Dir string
	dir string
	// ends holds, per host, how the daemons Start ran ended (a
	// daemonEnd): what a test reports when its daemon is gone.
	ends sync.Map
}

// clusterName: a name that makes namespace and interface names (NAME-vK
// must fit the kernel's 15 characters).
var clusterName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.]*$`)

func checkName(name string, hosts int) error {
	if !clusterName.MatchString(name) {
		return fmt.Errorf("cluster name %q: want lower-case letters, digits, '_' and '.'", name)
	}
	if l := len(name) + len("-v") + len(strconv.Itoa(hosts)); l > 15 {
		return fmt.Errorf("cluster name %q is too long: its interface names need %d of the kernel's 15 characters", name, l)
	}
	return nil
}

// Up makes the bridge and hosts 1..hosts of the cluster name with number
// net. An existing cluster of that name is an error; on any error, what
// was made is removed.
func Up(name string, hosts, net int) (*Cluster, error) {
	if err := checkName(name, hosts); err != nil {
		return nil, err
	}
	if hosts < 1 || hosts > 254 {
		return nil, fmt.Errorf("cluster %s: %d hosts, want 1 to 254", name, hosts)
	}
	if net < 1 || net > 255 {
		return nil, fmt.Errorf("cluster %s: number %d, want 1 to 255", name, net)
	}
	c := &Cluster{Name: name, Net: net, dir: filepath.Join(RunDir, name)}
	if _, err := os.Stat(c.dir); err == nil {
		return nil, fmt.Errorf("cluster %s exists; take it down first", name)
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, err
	}
	err := os.WriteFile(filepath.Join(c.dir, "net"), []byte(strconv.Itoa(net)+"\n"), 0o644)
	if err == nil {
		var links []hostLink
		for k := 1; k <= hosts; k++ {
			links = append(links, hostLink{ns: c.Host(k), port: c.Port(k), addr: netip.PrefixFrom(c.Underlay(k), 24)})
		}
		err = build(c.Switch(), links, ClusterMTU)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("cluster %s: %w", name, err), Down(name))
	}
	return c, nil
}

// Open finds the cluster that Up made, from its state in RunDir.
func Open(name string) (*Cluster, error) {
	if err := checkName(name, 1); err != nil {
		return nil, err
	}
	c := &Cluster{Name: name, dir: filepath.Join(RunDir, name)}
	b, err := os.ReadFile(filepath.Join(c.dir, "net"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no cluster %s (none in %s)", name, RunDir)
	}
	if err != nil {
		return nil, err
	}
	if c.Net, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		return nil, fmt.Errorf("cluster %s: bad number: %w", name, err)
	}
	return c, nil
}

// Down stops every daemon of the cluster name and removes its namespaces
// and state. It removes what it finds, so it also cleans up after a
// process that crashed half-way, and does nothing when there is nothing.
func Down(name string) error {
	if err := checkName(name, 1); err != nil {
		return err
	}
	var errs []error
	c := &Cluster{Name: name, dir: filepath.Join(RunDir, name)}
	if oc, err := Open(name); err == nil {
		c = oc // its net number names its hosts' underlay addresses
	}
	pids, _ := filepath.Glob(filepath.Join(c.dir, "h*.pid"))
	for _, p := range pids {
		k, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "h"), ".pid"))
		if err == nil {
			errs = append(errs, c.stopForGood(k))
		}
	}
	mine := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `-(br|h[0-9]+)$`)
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if mine.MatchString(e.Name()) {
			if out, err := exec.Command("ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", e.Name(), err, strings.TrimSpace(string(out))))
			}
		}
	}
	errs = append(errs, os.RemoveAll(c.dir))
	return errors.Join(errs...)
}

// Host is the namespace of host k.
func (c *Cluster) Host(k int) string { return fmt.Sprintf("%s-h%d", c.Name, k) }

// Switch is the namespace of the bridge br0.
func (c *Cluster) Switch() string { return c.Name + "-br" }

// Port is host k's veth end on the bridge, in Switch.
func (c *Cluster) Port(k int) string { return fmt.Sprintf("%s-v%d", c.Name, k) }

// Underlay is host k's eth0 address (in a /24).
func (c *Cluster) Underlay(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(c.Net), 0, byte(k)})
}

// IPv4 is the IPv4 address Start gives host k's ib0 (in a /24).
func (c *Cluster) IPv4(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{192, 168, byte(c.Net), byte(k)})
}

// IPv6 is the IPv6 address Start gives host k's ib0 (in a /64): the
// decimal digits of the cluster number and of k read as hex, so that
// host 12 of cluster 77 is fd00:77::12 as it is in IPv4.
func (c *Cluster) IPv6(k int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("fd00:%d::%d", c.Net, k))
}

// Command runs name with args on host k.
func (c *Cluster) Command(k int, name string, args ...string) *exec.Cmd {
	return nsCommand(c.Host(k), name, args...)
}

// Loss makes host k drop percent of the fabric's datagrams it receives;
// 0 ends the loss.
func (c *Cluster) Loss(k, percent int) error {
	return setLoss(c.Host(k), percent)
}
