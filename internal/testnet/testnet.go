// Package testnet is the one place that builds throw-away networks of Linux
// network namespaces: N hosts, each with one veth link into a bridge that
// lives in a namespace of its own, so nothing touches the machine's own
// interfaces; an underlay at MTU 9000 by default; and loss on the fabric's
// UDP port with nftables.
//
// Two shapes share that one builder. A Net (New) belongs to one Go test
// and is removed when it ends, also when it fails. A Cluster (Up) is
// named, outlives the process that made it and runs one ipoibd per host:
// the ipoibd end-to-end tests use it directly, and the demo and the bench
// through the command in cmd/testnet.
package testnet

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Net is a bridge with hosts attached.
type Net struct {
	t      testing.TB
	prefix string
	Hosts  []Host
}

// Host is one namespace with its underlay link "eth0".
type Host struct {
	NS   string
	Addr netip.Addr
}

// Config shapes the network.
type Config struct {
	Hosts int
	MTU   int  // underlay MTU (default 9000)
	IPv6  bool // fd00:77::N/64 instead of 10.77.0.N/24
}

// New builds the network or skips the test when it cannot (not root, no
// `ip`).
func New(t testing.TB, cfg Config) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2")
	}
	if cfg.MTU == 0 {
		cfg.MTU = 9000
	}
	removeOrphans()
	var id [3]byte
	_, _ = rand.Read(id[:])
	// The owner's pid is in the name, so that a later run can remove the
	// namespaces of a test process that was killed before its cleanup ran.
	n := &Net{t: t, prefix: fmt.Sprintf("%s%d-%s-", namePrefix, os.Getpid(), hex.EncodeToString(id[:]))}
	t.Cleanup(n.destroy)
	var hosts []hostLink
	for i := 0; i < cfg.Hosts; i++ {
		addr := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, 0, byte(i + 1)}), 24)
		if cfg.IPv6 {
			addr = netip.PrefixFrom(netip.MustParseAddr(fmt.Sprintf("fd00:77::%d", i+1)), 64)
		}
		hosts = append(hosts, hostLink{ns: fmt.Sprintf("%sh%d", n.prefix, i), port: fmt.Sprintf("p%d", i), addr: addr})
		n.Hosts = append(n.Hosts, Host{NS: hosts[i].ns, Addr: addr.Addr()})
	}
	if err := build(n.prefix+"sw", hosts, cfg.MTU); err != nil {
		t.Fatal(err)
	}
	return n
}

// Exec runs a command inside host i and fails the test if it fails.
func (n *Net) Exec(i int, name string, args ...string) string {
	n.t.Helper()
	out, err := nsCommand(n.Hosts[i].NS, name, args...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("%s %s in %s: %v: %s", name, strings.Join(args, " "), n.Hosts[i].NS, err, out)
	}
	return string(out)
}

// Loss drops percent of the fabric's datagrams host i receives, at random.
func (n *Net) Loss(i int, percent int) {
	n.t.Helper()
	if err := setLoss(n.Hosts[i].NS, percent); err != nil {
		n.t.Fatal(err)
	}
}

// In runs f on an OS thread that is inside host i's namespace. Sockets f
// opens stay in that namespace after it returns.
func (n *Net) In(i int, f func()) {
	n.t.Helper()
	InNamed(n.t, n.Hosts[i].NS, f)
}

// InNamed runs f on an OS thread inside the network namespace that `ip
// netns` knows as name: the one way the tests enter a namespace. Sockets
// and TUN devices f opens stay in it after f returns.
func InNamed(t testing.TB, name string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open("/run/netns/" + name)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("setns %s: %v", name, err)
	}
	defer func() {
		// A thread that cannot go home must not run other goroutines:
		// leaving it locked makes the runtime end it.
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	f()
}

// namePrefix starts the name of every namespace this package makes:
// ipoibt<pid>-<random>-<sw|hN>.
const namePrefix = "ipoibt"

// destroy removes every namespace of this network, also those of a New
// that failed half-way.
func (n *Net) destroy() {
	deleteNetns(func(name string) bool { return strings.HasPrefix(name, n.prefix) })
}

// removeOrphans removes the namespaces of test processes that are gone.
func removeOrphans() {
	deleteNetns(func(name string) bool {
		pid, _, ok := strings.Cut(strings.TrimPrefix(name, namePrefix), "-")
		if !strings.HasPrefix(name, namePrefix) || !ok {
			return false
		}
		_, err := os.Stat("/proc/" + pid)
		return os.IsNotExist(err)
	})
}

// deleteNetns deletes the named network namespaces that match.
func deleteNetns(match func(name string) bool) {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if match(e.Name()) {
			_ = exec.Command("ip", "netns", "del", e.Name()).Run()
		}
	}
}
