package cni_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/ipoib"
)

// The end-to-end tests run the plugin as a runtime does, through libcni,
// with host-local for IPAM, against real daemons on internal/testnet's
// hosts (softib); each pod is a network namespace of its own.

// bins holds ipoibd, ipoibd-cni and host-local, built once for the tests.
var (
	buildOnce sync.Once
	bins      string
	buildErr  error
)

func build(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("end-to-end tests need root (network namespaces, TUN devices)")
	}
	for _, tool := range []string{"ip", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(err)
		}
	}
	buildOnce.Do(func() {
		if bins, buildErr = os.MkdirTemp("", "ipoibd-cni-e2e"); buildErr != nil {
			return
		}
		for _, b := range [][2]string{
			{"ipoibd", "../ipoibd"},
			{"ipoibd-cni", "./cmd/ipoibd-cni"},
			{"host-local", "github.com/containernetworking/plugins/plugins/ipam/host-local"},
			// The reference runtime tool, at the version go.mod requires.
			{"cnitool", "github.com/containernetworking/cni/cnitool"},
		} {
			args := []string{"build", "-o", filepath.Join(bins, b[0]), b[1]}
			if b[0] == "ipoibd" && os.Getenv("IPOIBD_TEST_RACE") != "" {
				args = slices.Insert(args, 1, "-race") // the daemon's data races end up in its log
			}
			if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("building %s: %v\n%s", b[0], err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bins
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bins != "" {
		os.RemoveAll(bins)
	}
	os.Exit(code)
}

// readmeConflist is the README's .conflist, as a user copies it.
func readmeConflist(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "<!-- cni-conflist:")
	if ok {
		_, after, ok = strings.Cut(after, "```json\n")
	}
	js, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no ```json block after <!-- cni-conflist:")
	}
	return []byte(js)
}

// readmeConf is the plugin's configuration in the README's .conflist,
// with the list's cniVersion and name, as a runtime hands it over.
func readmeConf(t *testing.T) map[string]any {
	t.Helper()
	var l struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(readmeConflist(t), &l); err != nil || len(l.Plugins) != 1 {
		t.Fatalf("the README's .conflist (%v): %s", err, readmeConflist(t))
	}
	m := l.Plugins[0]
	m["cniVersion"], m["name"] = l.CNIVersion, l.Name
	return m
}

// netConf is conf (a copy) with the plugin's and host-local's state in
// dir, as each node keeps its own, and edits applied.
func netConf(t *testing.T, conf map[string]any, dir string, edit func(top, ipam map[string]any)) *libcni.NetworkConfigList {
	t.Helper()
	b, _ := json.Marshal(conf)
	var c map[string]any
	_ = json.Unmarshal(b, &c)
	ipam := c["ipam"].(map[string]any)
	c["dataDir"] = filepath.Join(dir, "ipoibd-cni")
	ipam["dataDir"] = filepath.Join(dir, "host-local")
	if edit != nil {
		edit(c, ipam)
	}
	// As a runtime reads it: a list with the one plugin.
	b, _ = json.Marshal(map[string]any{"cniVersion": c["cniVersion"], "name": c["name"], "plugins": []any{c}})
	l, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testSlot lets checkouts run these tests on one machine at once, as
// ipoibd's: IPOIBD_TEST_SLOT=1..4 puts the digit after every cluster name
// and gives the run cluster numbers of its own (240 + 2 × slot, and the
// next), outside the ipoibd tests' blocks (40-239): testnet kills stray
// daemons by their underlay address, so two runs must never share one.
var testSlot, slotNet = func() (string, int) {
	if n := testutil.Slot; n > 0 {
		return strconv.Itoa(n), 240 + 2*n
	}
	return "", 240
}()

// upCluster makes the cluster name (the slot's) of hosts with the slot's
// cluster number plus net (0 or 1) and starts a daemon with flags on each; Cleanup takes it down.
func upCluster(t *testing.T, name string, hosts, net int, flags ...string) *testnet.Cluster {
	t.Helper()
	name += testSlot
	if err := testnet.Down(name); err != nil { // leftovers of an interrupted run
		t.Fatal(err)
	}
	c, err := testnet.Up(name, hosts, slotNet+net)
	if err != nil {
		t.Fatal(err)
	}
	c.Daemon = filepath.Join(bins, "ipoibd")
	t.Cleanup(func() {
		for k := 1; k <= hosts; k++ {
			out, _ := os.ReadFile(c.LogPath(k))
			if bytes.Contains(out, []byte("WARNING: DATA RACE")) {
				t.Errorf("h%d's daemon (built with IPOIBD_TEST_RACE) found a data race", k)
			}
			if t.Failed() {
				t.Logf("daemon log of h%d:\n%s", k, out)
			}
		}
		if err := testnet.Down(name); err != nil {
			t.Error(err)
		}
		for k := 1; k <= hosts; k++ {
			for _, pid := range c.Stragglers(k) {
				t.Errorf("h%d's daemon (pid %d) outlived its cluster", k, pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	for k := 1; k <= hosts; k++ {
		if err := c.Start(k, flags...); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// node is one testnet host as a runtime sees it: libcni with its cache.
type node struct {
	t    *testing.T
	c    *testnet.Cluster
	k    int
	dir  string
	cni  *libcni.CNIConfig
	pods []*pod // every pod made on the node
}

func newNode(t *testing.T, c *testnet.Cluster, k int) *node {
	dir := t.TempDir()
	return &node{t: t, c: c, k: k, dir: dir, cni: libcni.NewCNIConfigWithCacheDir([]string{bins}, filepath.Join(dir, "cache"), nil)}
}

// in runs f in the node's namespace, where the plugin must run (the
// daemon's control socket is there); plugins inherit the thread's.
func (n *node) in(f func()) { testnet.InNamed(n.t, n.c.Host(n.k), f) }

// pod is a network namespace attached to a network on a node.
type pod struct {
	n    *node
	ns   string // the namespace's name, as ip netns knows it
	id   string // the container ID
	net  *libcni.NetworkConfigList
	res  *current.Result
	addr string
}

// newPod makes an empty namespace; Cleanup removes it.
func (n *node) newPod(net *libcni.NetworkConfigList) *pod {
	n.t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := fmt.Sprintf("cnipod-%d-%s", os.Getpid(), hex.EncodeToString(r[:]))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		n.t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	n.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	p := &pod{n: n, ns: name, id: fmt.Sprintf("h%dpod%d-%s", n.k, len(n.pods)+1, hex.EncodeToString(r[:])), net: net}
	n.pods = append(n.pods, p)
	return p
}

// held lists the node's pods whose network namespace its daemon holds
// open (it does while it serves a child there).
func (n *node) held() []string {
	n.t.Helper()
	pid, err := n.c.Pid(n.k)
	if err != nil {
		n.t.Fatal(err)
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	open := map[[2]uint64]bool{}
	for _, fd := range fds {
		var st syscall.Stat_t
		if syscall.Stat(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()), &st) == nil {
			open[[2]uint64{st.Dev, st.Ino}] = true
		}
	}
	var out []string
	for _, p := range n.pods {
		var st syscall.Stat_t
		if syscall.Stat(p.path(), &st) == nil && open[[2]uint64{st.Dev, st.Ino}] {
			out = append(out, p.id)
		}
	}
	return out
}

func (p *pod) path() string { return "/run/netns/" + p.ns }

func (p *pod) rt() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: p.id, NetNS: p.path(), IfName: "net1"}
}

// add is the runtime's ADD; it checks the result and returns it.
func (p *pod) add() *current.Result {
	t := p.n.t
	t.Helper()
	var res types.Result
	var err error
	p.n.in(func() { res, err = p.n.cni.AddNetworkList(context.Background(), p.net, p.rt()) })
	if err != nil {
		t.Fatalf("ADD %s on h%d: %v", p.id, p.n.k, err)
	}
	if res.Version() != p.net.CNIVersion {
		t.Errorf("ADD answered version %s to a %s configuration", res.Version(), p.net.CNIVersion)
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	// Results before 0.3.0 name no interface.
	old, _ := version.GreaterThan("0.3.0", p.net.CNIVersion)
	if len(r.IPs) == 0 || (!old && (len(r.Interfaces) != 1 || r.Interfaces[0].Name != "net1" || r.Interfaces[0].Sandbox != p.path())) {
		t.Fatalf("ADD result: %s", r)
	}
	p.res, p.addr = r, r.IPs[0].Address.IP.String()
	return r
}

func (p *pod) check() error {
	var err error
	p.n.in(func() { err = p.n.cni.CheckNetworkList(context.Background(), p.net, p.rt()) })
	return err
}

func (p *pod) del() error {
	var err error
	p.n.in(func() { err = p.n.cni.DelNetworkList(context.Background(), p.net, p.rt()) })
	return err
}

// exec runs a command in the pod.
func (p *pod) inPod(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", p.ns}, args...)...).CombinedOutput()
	return string(out), err
}

// awaitPing pings until one goes through at size with DF set, for a
// path that is being set up again (a new link address to resolve, a
// connection to make), and says how long that took.
func (p *pod) awaitPing(to *pod, size int, within time.Duration) time.Duration {
	p.n.t.Helper()
	start := time.Now()
	for {
		out, err := p.inPod("ping", "-c", "1", "-W", "1", "-s", fmt.Sprint(size), "-M", "do", to.addr)
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > within {
			p.n.t.Fatalf("ping -s %d from %s to %s failed for %v:\n%s", size, p.addr, to.addr, within, out)
		}
		time.Sleep(100 * time.Millisecond) // a failed ping with a local error returns at once
	}
}

func (p *pod) ping(to *pod, size int) {
	p.n.t.Helper()
	if out, err := p.inPod("ping", "-c", "2", "-i", "0.2", "-W", "3", "-s", fmt.Sprint(size), "-M", "do", to.addr); err != nil {
		p.n.t.Fatalf("ping -s %d from %s (h%d) to %s (h%d): %v\n%s", size, p.addr, p.n.k, to.addr, to.n.k, err, out)
	}
}

// child is one of a daemon's children, as show -j lists them.
type child struct {
	Name, Netns, Owner string
	PKey               uint16
}

// children is the node's daemon's list of its children.
func (n *node) children() []child {
	n.t.Helper()
	out, err := n.c.Command(n.k, n.c.Daemon, "show", "-j").CombinedOutput()
	if err != nil {
		n.t.Fatalf("ipoibd show on h%d: %v\n%s", n.k, err, out)
	}
	var show struct {
		Children []child `json:"children"`
	}
	if err := json.Unmarshal(out, &show); err != nil {
		n.t.Fatal(err)
	}
	return show.Children
}

// owns reports whether the node's daemon serves a child for pod p.
func (n *node) owns(p *pod) bool {
	return slices.ContainsFunc(n.children(), func(c child) bool {
		return strings.Contains(c.Owner, "/"+p.id+"/")
	})
}

// allocated lists the addresses host-local holds for network name.
func (n *node) allocated(name string) []string {
	entries, _ := os.ReadDir(filepath.Join(n.dir, "host-local", name))
	var out []string
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// cniCode is the code of a CNI error object, -1 for anything else.
func cniCode(err error) int {
	var e *types.Error
	if errors.As(err, &e) {
		return int(e.Code)
	}
	return -1
}

// TestPodsOnTwoNodes: pods get P_Key children from their node's daemon,
// reach each other in a partition on one node and across nodes over RC at
// 65520, and not across partitions; CHECK, a daemon restart, DEL, GC and
// every result version, as libcni drives them.
func TestPodsOnTwoNodes(t *testing.T) {
	build(t)
	flags := []string{"--softib-pkeys", "0xffff,0x8001,0x8002"}
	c := upCluster(t, "cnipods", 2, 0, flags...)
	h1, h2 := newNode(t, c, 1), newNode(t, c, 2)

	// The README's network as written on h1; h2 gets its own slice of the
	// subnet (host-local allocates per node), and a second network on
	// partition 0x8002 claims the same subnet.
	readme := readmeConf(t)
	if readme["master"] != "ib0" || readme["pkey"] != "0x8001" || readme["cniVersion"] != "1.0.0" {
		t.Fatalf("the README's configuration changed: %v", readme)
	}
	// The host-local built from the module speaks CNI 1.1, with GC and
	// STATUS (the README's 1.0.0 is for Debian's: TestCnitool).
	readme["cniVersion"] = "1.1.0"
	net1 := netConf(t, readme, h1.dir, nil)
	net2 := netConf(t, readme, h2.dir, func(_, ipam map[string]any) {
		ipam["rangeStart"], ipam["rangeEnd"] = "172.30.1.100", "172.30.1.149"
	})
	other := netConf(t, readme, h2.dir, func(top, ipam map[string]any) {
		top["name"], top["pkey"] = "ib-8002", "0x8002"
		ipam["rangeStart"], ipam["rangeEnd"] = "172.30.1.150", "172.30.1.199"
	})

	// libcni's own checks of the configuration: the plugin and its IPAM
	// exist and speak its version.
	if caps, err := h1.cni.ValidateNetworkList(context.Background(), net1); err != nil {
		t.Fatalf("libcni refuses the README's configuration: %v (capabilities %v)", err, caps)
	}
	var err2 error
	h1.in(func() { err2 = h1.cni.GetStatusNetworkList(context.Background(), net1) })
	if err2 != nil {
		t.Fatalf("STATUS with the daemon up: %v", err2)
	}

	a1, a2, b1, x1 := h1.newPod(net1), h1.newPod(net1), h2.newPod(net2), h2.newPod(other)
	for _, p := range []*pod{a1, a2, b1, x1} {
		r := p.add()
		if r.Interfaces[0].Mtu != ipoib.ConnectedMTU {
			t.Errorf("ADD result: MTU %d, want %d", r.Interfaces[0].Mtu, ipoib.ConnectedMTU)
		}
		if out, err := p.inPod("ip", "-o", "link", "show", "net1"); err != nil || !strings.Contains(out, fmt.Sprintf("mtu %d", ipoib.ConnectedMTU)) {
			t.Errorf("net1 in %s: %v\n%s", p.ns, err, out)
		}
	}
	if held := h1.held(); !slices.Contains(held, a1.id) || !slices.Contains(held, a2.id) {
		t.Errorf("h1's daemon holds the namespaces of %v, want a1's and a2's", held)
	}
	if a1.addr == a2.addr || !strings.HasPrefix(a1.addr, "172.30.1.") || !strings.HasPrefix(b1.addr, "172.30.1.1") {
		t.Fatalf("addresses: a1 %s a2 %s b1 %s", a1.addr, a2.addr, b1.addr)
	}

	// A child the daemon refuses (a P_Key outside the port's table) fails
	// ADD with the daemon's reason and leaves no address or state behind.
	bad := netConf(t, readme, h1.dir, func(top, _ map[string]any) { top["name"], top["pkey"] = "ib-8003", "0x8003" })
	z := h1.newPod(bad)
	var zerr error
	h1.in(func() { _, zerr = h1.cni.AddNetworkList(context.Background(), bad, z.rt()) })
	if cniCode(zerr) != int(types.ErrInternal) || !strings.Contains(zerr.Error(), "P_Key table") {
		t.Errorf("ADD on a P_Key outside the port's table: %v", zerr)
	}
	if kept, _ := filepath.Glob(filepath.Join(h1.dir, "ipoibd-cni", "ib-8003", "*")); len(h1.allocated("ib-8003")) != 0 || len(kept) != 0 {
		t.Errorf("the failed ADD left addresses %v and state %v", h1.allocated("ib-8003"), kept)
	}

	// One partition: two pods on one node (two children with one P_Key),
	// and across nodes over RC at the connected MTU.
	a1.ping(a2, 56)
	a1.ping(b1, 65000)
	b1.ping(a2, 65000)
	out, err := a1.inPod(c.Daemon, "conn", "net1", "-j")
	var conns []ipoib.ConnInfo
	if err != nil || json.Unmarshal([]byte(out), &conns) != nil {
		t.Fatalf("ipoibd conn net1 in a1: %v\n%s", err, out)
	}
	if !slices.ContainsFunc(conns, func(cn ipoib.ConnInfo) bool {
		return cn.Peer == b1.res.Interfaces[0].Mac && cn.Type == "RC" && cn.State == "established" && cn.MTU == ipoib.ConnectedMTU
	}) {
		t.Errorf("a1 has no established RC connection at MTU %d to b1 (%s): %+v", ipoib.ConnectedMTU, b1.res.Interfaces[0].Mac, conns)
	}
	// Another partition, though in the same subnet, is out of reach.
	if out, err := x1.inPod("ping", "-c", "2", "-i", "0.2", "-W", "1", b1.addr); err == nil {
		t.Fatalf("a pod on P_Key 0x8002 reached one on 0x8001:\n%s", out)
	}
	for _, p := range []*pod{a1, a2, b1, x1} {
		if err := p.check(); err != nil {
			t.Errorf("CHECK %s: %v", p.id, err)
		}
	}
	// A runtime that retries ADD without DEL gets the same result: the
	// same child (its link address), the same address, the connection
	// kept.
	before, _ := json.Marshal(b1.res)
	b1.add()
	if again, _ := json.Marshal(b1.res); string(again) != string(before) {
		t.Errorf("ADD again gave %s, before %s", again, before)
	}
	if err := b1.check(); err != nil {
		t.Errorf("CHECK after ADD again: %v", err)
	}
	a1.ping(b1, 65000)
	// CHECK sees what changed in the pod since ADD.
	for _, tc := range []struct{ change, undo []string }{
		{[]string{"ip", "link", "set", "net1", "mtu", "4000"}, []string{"ip", "link", "set", "net1", "mtu", fmt.Sprint(ipoib.ConnectedMTU)}},
		{[]string{"ip", "addr", "del", a1.res.IPs[0].Address.String(), "dev", "net1"}, []string{"ip", "addr", "add", a1.res.IPs[0].Address.String(), "dev", "net1"}},
	} {
		if out, err := a1.inPod(tc.change...); err != nil {
			t.Fatalf("%v: %v\n%s", tc.change, err, out)
		}
		if err := a1.check(); err == nil {
			t.Errorf("CHECK after %v passed", tc.change)
		}
		if out, err := a1.inPod(tc.undo...); err != nil {
			t.Fatalf("%v: %v\n%s", tc.undo, err, out)
		}
		if err := a1.check(); err != nil {
			t.Errorf("CHECK after %v: %v", tc.undo, err)
		}
	}
	// The daemon keeps pods' children apart from the operator's: by P_Key
	// or name child del takes only its own namespace's, and a namespace's
	// names and the owners are unique.
	a1Owner := "cni/ib-8001/" + a1.id + "/net1"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"child", "del", "0x8001"}, "no child"},
		{[]string{"child", "del", "net1"}, "no child"},
		{[]string{"child", "add", "0x8001", "--netns", a1.path(), "--name", "net1"}, "net1 exists in " + a1.path()},
		{[]string{"child", "add", "0x8001", "--netns", a2.path(), "--name", "net9", "--owner", a1Owner}, "already has net1"},
		{[]string{"child", "add", "0x8001", "--owner", "someone"}, "give its netns too"},
		{[]string{"child", "add", "0x8001", "--netns", "/run/netns/cnipod-none", "--name", "net9"}, "no such file"},
	} {
		out, err := c.Command(1, c.Daemon, tc.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("ipoibd %v on h1: %v, %q, want an error with %q", tc.args, err, out, tc.want)
		}
	}
	if !h1.owns(a1) || !h1.owns(a2) || len(h1.children()) != 2 {
		t.Errorf("h1's children after the refusals: %+v", h1.children())
	}
	if out, err := c.Command(1, c.Daemon, "show").CombinedOutput(); err != nil || !strings.Contains(string(out), "child net1 pkey 0x8001 netns "+a1.path()+" owner "+a1Owner+"\n") {
		t.Errorf("ipoibd show on h1 does not name a1's child, its namespace and owner (%v):\n%s", err, out)
	}

	// While the daemon restarts CHECK and STATUS say it is away; the next
	// one takes the pods' interfaces back with their addresses, no ADD
	// called (restart_test.go measures it).
	if err := c.Stop(1, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	h1.in(func() { err2 = h1.cni.GetStatusNetworkList(context.Background(), net1) })
	if cniCode(err2) != int(types.ErrPluginNotAvailable) {
		t.Errorf("STATUS with no daemon: %v, want code %d", err2, types.ErrPluginNotAvailable)
	}
	if err := a1.check(); cniCode(err) != int(types.ErrTryAgainLater) {
		t.Errorf("CHECK with no daemon: %v, want code %d", err, types.ErrTryAgainLater)
	}
	if err := c.Start(1, flags...); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*pod{a1, a2} {
		if err := p.check(); err != nil {
			t.Errorf("CHECK after a daemon restart: %v", err)
		}
	}
	// h2's children held a1's old link address; a1's announcement names
	// it, so they move to the new one at once.
	t.Logf("a1 reached b1 at 65000 octets %v after its daemon restarted", a1.awaitPing(b1, 65000, 10*time.Second))
	a2.ping(a1, 56)

	// DEL leaves nothing behind, however often it comes.
	for range 2 {
		if err := a2.del(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	if out, err := a2.inPod("ip", "link", "show", "net1"); err == nil {
		t.Errorf("net1 outlived DEL:\n%s", out)
	}
	if h1.owns(a2) || slices.Contains(h1.allocated("ib-8001"), a2.addr) {
		t.Errorf("after DEL: h1's children %+v, host-local holds %v (a2 had %s)", h1.children(), h1.allocated("ib-8001"), a2.addr)
	}
	if kept, _ := filepath.Glob(filepath.Join(h1.dir, "ipoibd-cni", "ib-8001", a2.id+"@*")); len(kept) != 0 {
		t.Errorf("after DEL the plugin still keeps %v", kept)
	}

	// GC from a runtime that lost its cache: only the plugin knows a3.
	a3 := h1.newPod(net1)
	a3.add()
	fresh := libcni.NewCNIConfigWithCacheDir([]string{bins}, t.TempDir(), nil)
	h1.in(func() {
		err2 = fresh.GCNetworkList(context.Background(), net1, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: a1.id, IfName: "net1"}}})
	})
	if err2 != nil {
		t.Fatalf("GC: %v", err2)
	}
	if h1.owns(a3) || !h1.owns(a1) || slices.Contains(h1.allocated("ib-8001"), a3.addr) || !slices.Contains(h1.allocated("ib-8001"), a1.addr) {
		t.Errorf("after GC keeping a1: children %+v, host-local holds %v (a1 %s, a3 %s)", h1.children(), h1.allocated("ib-8001"), a1.addr, a3.addr)
	}
	if kept, _ := filepath.Glob(filepath.Join(h1.dir, "ipoibd-cni", "ib-8001", "*@net1.json")); len(kept) != 1 || !strings.Contains(kept[0], a1.id) {
		t.Errorf("after GC keeping a1 the plugin keeps %v", kept)
	}
	a1.ping(b1, 56)

	// Dual stack: host-local hands out an IPv4 and a global IPv6 address,
	// and IPv6 crosses nodes at the connected MTU too.
	dual := func(dir, v4, v6 string) *libcni.NetworkConfigList {
		return netConf(t, readme, dir, func(top, ipam map[string]any) {
			top["name"] = "ib-dual"
			for _, k := range []string{"subnet", "rangeStart", "rangeEnd"} {
				delete(ipam, k)
			}
			ipam["ranges"] = []any{
				[]any{map[string]any{"subnet": "172.30.2.0/24", "rangeStart": v4, "rangeEnd": v4}},
				[]any{map[string]any{"subnet": "fd30:2::/64", "rangeStart": v6, "rangeEnd": v6}},
			}
		})
	}
	d1 := h1.newPod(dual(h1.dir, "172.30.2.11", "fd30:2::11"))
	d2 := h2.newPod(dual(h2.dir, "172.30.2.12", "fd30:2::12"))
	for _, p := range []*pod{d1, d2} {
		if r := p.add(); len(r.IPs) != 2 {
			t.Fatalf("dual stack: %s", r)
		}
	}
	d1.ping(d2, 65000)
	d1.addr = "fd30:2::11"
	d2.ping(d1, 65000)
	for _, p := range []*pod{d1, d2} {
		if err := p.check(); err != nil {
			t.Errorf("CHECK dual stack: %v", err)
		}
		if err := p.del(); err != nil {
			t.Errorf("DEL dual stack: %v", err)
		}
	}

	// Datagram mode: the UD MTU, no connection.
	udConf := func(dir, v4 string) *libcni.NetworkConfigList {
		return netConf(t, readme, dir, func(top, ipam map[string]any) {
			top["name"], top["mode"] = "ib-ud", "datagram"
			delete(top, "mtu")
			ipam["rangeStart"], ipam["rangeEnd"] = v4, v4
		})
	}
	u1, u2 := h1.newPod(udConf(h1.dir, "172.30.1.201")), h2.newPod(udConf(h2.dir, "172.30.1.202"))
	for _, p := range []*pod{u1, u2} {
		if r := p.add(); r.Interfaces[0].Mtu != 4092 {
			t.Errorf("datagram mode: MTU %d, want softib's UD MTU 4092", r.Interfaces[0].Mtu)
		}
	}
	u1.ping(u2, 4092-28)
	if out, err := u1.inPod(c.Daemon, "conn", "net1", "-j"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("a datagram-mode pod has connections (%v): %s", err, out)
	}
	for _, p := range []*pod{u1, u2} {
		if err := p.del(); err != nil {
			t.Errorf("DEL datagram mode: %v", err)
		}
	}

	// ipoib-cni's shape (no pkey, mode or mtu): the master's partition
	// and mode, the mode's MTU.
	plain := netConf(t, readme, h2.dir, func(top, ipam map[string]any) {
		delete(top, "pkey")
		delete(top, "mode")
		delete(top, "mtu")
		top["name"] = "ib-plain"
	})
	q := h2.newPod(plain)
	if r := q.add(); r.Interfaces[0].Mtu != ipoib.ConnectedMTU {
		t.Errorf("ipoib-cni's shape: MTU %d", r.Interfaces[0].Mtu)
	}
	if i := slices.IndexFunc(h2.children(), func(c child) bool { return strings.Contains(c.Owner, "/"+q.id+"/") }); i < 0 || h2.children()[i].PKey != 0xffff {
		t.Errorf("ipoib-cni's shape: h2's children %+v, want %s's on P_Key 0xffff", h2.children(), q.id)
	}
	if err := q.del(); err != nil {
		t.Errorf("DEL: %v", err)
	}

	// Every result version a runtime may ask for.
	for _, v := range []string{"0.1.0", "0.2.0", "0.3.1", "0.4.0", "1.0.0"} {
		vnet := netConf(t, readme, h2.dir, func(top, ipam map[string]any) {
			top["cniVersion"] = v
			ipam["rangeStart"], ipam["rangeEnd"] = "172.30.1.100", "172.30.1.149"
		})
		p := h2.newPod(vnet)
		p.add()
		p.ping(a1, 56)
		if hasCheck, _ := version.GreaterThanOrEqualTo(v, "0.4.0"); hasCheck {
			if err := p.check(); err != nil {
				t.Errorf("CHECK at %s: %v", v, err)
			}
		}
		if err := p.del(); err != nil {
			t.Errorf("DEL at %s: %v", v, err)
		}
	}

	for _, p := range []*pod{a1, b1, x1} {
		if err := p.del(); err != nil {
			t.Errorf("DEL %s: %v", p.id, err)
		}
	}
	for _, n := range []*node{h1, h2} {
		if ch := n.children(); len(ch) != 0 || len(n.allocated("ib-8001"))+len(n.allocated("ib-8002")) != 0 {
			t.Errorf("h%d after every DEL: children %+v, host-local holds %v %v", n.k, ch, n.allocated("ib-8001"), n.allocated("ib-8002"))
		}
		if held := n.held(); len(held) != 0 {
			t.Errorf("h%d's daemon still holds the namespaces of %v", n.k, held)
		}
	}
}
