package cni_test

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/ipoibd/ipoibd/ipoib"
)

// TestCnitool: the reference runtime tool, cnitool (built from the
// containernetworking/cni module go.mod requires, as build does), runs the
// README's .conflist as written (dataDirs at their defaults, under a
// private /var/lib) from a configuration directory with CNI_PATH holding
// ipoibd-cni and host-local, as an operator would try the plugin by hand,
// once with Debian 12's own host-local (containernetworking-plugins 1.1.1,
// CNI up to 1.0.0) and once with the one built from the module: ADD gives
// the pod net1 with the connected MTU and an address of the README's
// range, CHECK passes (and fails once the pod's MTU is changed), DEL
// leaves no interface, child, address, plugin state or cnitool cache
// entry behind, and a second DEL succeeds.
func TestCnitool(t *testing.T) {
	build(t)
	c := upCluster(t, "cnitool", 1, 1, "--softib-pkeys", "0xffff,0x8001")
	h := newNode(t, c, 1)
	for _, tc := range []struct{ name, hostLocal string }{
		{"debian", debianHostLocal},
		{"built", filepath.Join(bins, "host-local")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(tc.hostLocal); err != nil {
				t.Fatalf("%v (scripts/deps.sh installs containernetworking-plugins)", err)
			}
			h.t = t
			runCnitool(t, h, tc.hostLocal, readmeConflist(t))
		})
	}
	// The README's example before it said 1.0.0: Debian's host-local
	// refuses 1.1.0, and the error is host-local's, attributed to it.
	t.Run("debian refuses 1.1.0", func(t *testing.T) {
		h.t = t
		conflist := strings.Replace(string(readmeConflist(t)), `"cniVersion": "1.0.0"`, `"cniVersion": "1.1.0"`, 1)
		out, err := runCnitoolAdd(t, h, debianHostLocal, []byte(conflist))
		if err == nil || !strings.Contains(out, "IPAM plugin host-local (ADD)") || !strings.Contains(out, "incompatible CNI versions") {
			t.Errorf("cnitool add at 1.1.0 with Debian's host-local: %v\n%s", err, out)
		}
	})
}

// debianHostLocal is host-local of Debian's containernetworking-plugins.
const debianHostLocal = "/usr/lib/cni/host-local"

// cnitoolBed is a pod on node h, and cnitool set up to attach it with a
// .conflist and a host-local.
type cnitoolBed struct {
	p            *pod
	name, varLib string
	run          func(cmd string) (string, error)
}

func newCnitoolBed(t *testing.T, h *node, hostLocal string, conflist []byte) *cnitoolBed {
	readme := readmeConf(t)
	name := readme["name"].(string)
	confDir, cniPath := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "10-"+name+".conflist"), conflist, 0o644); err != nil {
		t.Fatal(err)
	}
	for dst, src := range map[string]string{"ipoibd-cni": filepath.Join(bins, "ipoibd-cni"), "host-local": hostLocal} {
		if err := os.Symlink(src, filepath.Join(cniPath, dst)); err != nil {
			t.Fatal(err)
		}
	}
	b := &cnitoolBed{p: h.newPod(nil), name: name, varLib: t.TempDir()}
	// cnitool names the attachment after the namespace's path.
	sum := sha512.Sum512([]byte(b.p.path()))
	b.p.id = "cnitool-" + hex.EncodeToString(sum[:10])
	// cnitool keeps its results where runtimes do, in libcni's default
	// /var/lib/cni, and the plugins their state in theirs beside it
	// (/var/lib/cni/networks, /var/lib/cni/ipoibd): a private mount
	// namespace puts a directory of the test's there, so the machine's
	// stays untouched.
	b.run = func(cmd string) (string, error) {
		var out []byte
		var err error
		h.in(func() {
			c := exec.Command("unshare", "--mount", "--propagation", "private", "--",
				"sh", "-c", `mount --bind "$0" /var/lib && exec "$@"`,
				b.varLib, filepath.Join(bins, "cnitool"), cmd, name, b.p.path())
			c.Env = append(os.Environ(), "CNI_PATH="+cniPath, "NETCONFPATH="+confDir, "CNI_IFNAME=net1")
			out, err = c.CombinedOutput()
		})
		return string(out), err
	}
	return b
}

// allocated lists the addresses host-local holds, in its default dataDir.
func (b *cnitoolBed) allocated() []string {
	entries, _ := os.ReadDir(filepath.Join(b.varLib, "cni", "networks", b.name))
	var out []string
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// kept lists what the plugin keeps in its default dataDir.
func (b *cnitoolBed) kept() []string {
	var out []string
	_ = filepath.WalkDir(filepath.Join(b.varLib, "cni", "ipoibd"), func(path string, _ os.DirEntry, err error) error {
		if err == nil && path != filepath.Join(b.varLib, "cni", "ipoibd") {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// runCnitoolAdd is a cnitool add that must fail, leaving no address,
// plugin state or child; it returns cnitool's output.
func runCnitoolAdd(t *testing.T, h *node, hostLocal string, conflist []byte) (string, error) {
	b := newCnitoolBed(t, h, hostLocal, conflist)
	out, err := b.run("add")
	if err != nil && (len(b.allocated()) != 0 || len(b.kept()) != 0 || len(h.children()) != 0) {
		t.Errorf("the failed add left addresses %v, plugin state %v, children %+v", b.allocated(), b.kept(), h.children())
	}
	return out, err
}

// runCnitool runs conflist, the README's, through cnitool on node h with
// the host-local at hostLocal.
func runCnitool(t *testing.T, h *node, hostLocal string, conflist []byte) {
	b := newCnitoolBed(t, h, hostLocal, conflist)
	p, name, cnitool, readme := b.p, b.name, b.run, readmeConf(t)
	owner := "cni/" + name + "/" + p.id + "/net1"
	cache := filepath.Join(b.varLib, "cni", "results", name+"-"+p.id+"-net1")
	// ADD: the result names net1 in the pod, at the connected MTU, with an
	// address of the README's range; the pod has it, the daemon serves it.
	out, err := cnitool("add")
	if err != nil {
		t.Fatalf("cnitool add: %v\n%s", err, out)
	}
	res, err := current.NewResult([]byte(out))
	if err != nil {
		t.Fatalf("cnitool add printed no %s result: %v\n%s", readme["cniVersion"], err, out)
	}
	r := res.(*current.Result)
	if r.CNIVersion != readme["cniVersion"] || len(r.Interfaces) != 1 || r.Interfaces[0].Name != "net1" || r.Interfaces[0].Sandbox != p.path() ||
		r.Interfaces[0].Mtu != ipoib.ConnectedMTU || len(r.IPs) != 1 {
		t.Fatalf("cnitool add's result: %s", out)
	}
	addr, _ := netip.AddrFromSlice(r.IPs[0].Address.IP.To4())
	lo, hi := netip.MustParseAddr("172.30.1.10"), netip.MustParseAddr("172.30.1.99")
	if ones, _ := r.IPs[0].Address.Mask.Size(); ones != 24 || addr.Less(lo) || hi.Less(addr) {
		t.Errorf("cnitool add gave %s, want an address of 172.30.1.10-99/24", r.IPs[0].Address.String())
	}
	if out, err := p.inPod("ip", "-o", "link", "show", "net1"); err != nil || !strings.Contains(out, fmt.Sprintf(" mtu %d ", ipoib.ConnectedMTU)) {
		t.Errorf("net1 in the pod (%v): %s", err, out)
	}
	if out, err := p.inPod("ip", "-o", "-4", "addr", "show", "dev", "net1"); err != nil || !strings.Contains(out, " inet "+r.IPs[0].Address.String()+" ") {
		t.Errorf("net1's addresses in the pod, want %s (%v): %s", r.IPs[0].Address.String(), err, out)
	}
	if ch := h.children(); len(ch) != 1 || ch[0].Owner != owner || ch[0].Netns != p.path() || ch[0].PKey != 0x8001 {
		t.Errorf("the daemon's children %+v, want one on P_Key 0x8001 in %s owned by %s", ch, p.path(), owner)
	}
	if _, err := os.Stat(cache); err != nil {
		t.Errorf("cnitool cached no result: %v", err)
	}

	// CHECK against the cached result, and against a pod that changed.
	if out, err := cnitool("check"); err != nil {
		t.Errorf("cnitool check: %v\n%s", err, out)
	}
	if out, err := p.inPod("ip", "link", "set", "net1", "mtu", "4000"); err != nil {
		t.Fatalf("ip link set net1 mtu 4000: %v\n%s", err, out)
	}
	if out, err := cnitool("check"); err == nil {
		t.Errorf("cnitool check passed with net1 at MTU 4000:\n%s", out)
	}

	// DEL leaves nothing, and again.
	for i := range 2 {
		if out, err := cnitool("del"); err != nil {
			t.Fatalf("cnitool del (%d): %v\n%s", i+1, err, out)
		}
	}
	if out, err := p.inPod("ip", "link", "show", "net1"); err == nil {
		t.Errorf("net1 outlived cnitool del:\n%s", out)
	}
	kept := b.kept()
	if ch, a := h.children(), b.allocated(); len(ch) != 0 || len(a) != 0 || len(kept) != 0 {
		t.Errorf("after cnitool del: children %+v, host-local holds %v, the plugin keeps %v", ch, a, kept)
	}
	if held := h.held(); len(held) != 0 {
		t.Errorf("the daemon still holds the pod's namespace after cnitool del")
	}
	if _, err := os.Stat(cache); !os.IsNotExist(err) {
		t.Errorf("cnitool's cache entry outlived del: %v", err)
	}
}
