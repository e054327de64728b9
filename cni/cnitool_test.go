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
// README's configuration from a configuration directory with CNI_PATH
// holding ipoibd-cni and host-local, as an operator would try the plugin
// by hand: ADD gives the pod net1 with the connected MTU and an address of
// the README's range, CHECK passes (and fails once the pod's MTU is
// changed), DEL leaves no interface, child, address, plugin state or
// cnitool cache entry behind, and a second DEL succeeds.
func TestCnitool(t *testing.T) {
	build(t)
	c := upCluster(t, "cnitool", 1, 1, "--softib-pkeys", "0xffff,0x8001")
	h := newNode(t, c, 1)
	readme := readmeConf(t)
	name := readme["name"].(string)
	net := netConf(t, readme, h.dir, nil)
	confDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "10-"+name+".conflist"), net.Bytes, 0o644); err != nil {
		t.Fatal(err)
	}
	p := h.newPod(net)
	// cnitool names the attachment after the namespace's path.
	sum := sha512.Sum512([]byte(p.path()))
	p.id = "cnitool-" + hex.EncodeToString(sum[:10])
	owner := "cni/" + name + "/" + p.id + "/net1"

	// cnitool keeps its results where runtimes do, in libcni's default
	// /var/lib/cni: a private mount namespace puts a directory of the
	// test's there, so the machine's stays untouched.
	varLib := t.TempDir()
	cache := filepath.Join(varLib, "cni", "results", name+"-"+p.id+"-net1")
	cnitool := func(cmd string) (string, error) {
		var out []byte
		var err error
		h.in(func() {
			c := exec.Command("unshare", "--mount", "--propagation", "private", "--",
				"sh", "-c", `mount --bind "$0" /var/lib && exec "$@"`,
				varLib, filepath.Join(bins, "cnitool"), cmd, name, p.path())
			c.Env = append(os.Environ(), "CNI_PATH="+bins, "NETCONFPATH="+confDir, "CNI_IFNAME=net1")
			out, err = c.CombinedOutput()
		})
		return string(out), err
	}

	// ADD: the result names net1 in the pod, at the connected MTU, with an
	// address of the README's range; the pod has it, the daemon serves it.
	out, err := cnitool("add")
	if err != nil {
		t.Fatalf("cnitool add: %v\n%s", err, out)
	}
	res, err := current.NewResult([]byte(out))
	if err != nil {
		t.Fatalf("cnitool add printed no %s result: %v\n%s", net.CNIVersion, err, out)
	}
	r := res.(*current.Result)
	if r.CNIVersion != "1.1.0" || len(r.Interfaces) != 1 || r.Interfaces[0].Name != "net1" || r.Interfaces[0].Sandbox != p.path() ||
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
	kept, _ := filepath.Glob(filepath.Join(h.dir, "ipoibd-cni", name, "*"))
	if ch, a := h.children(), h.allocated(name); len(ch) != 0 || len(a) != 0 || len(kept) != 0 {
		t.Errorf("after cnitool del: children %+v, host-local holds %v, the plugin keeps %v", ch, a, kept)
	}
	if held := h.held(); len(held) != 0 {
		t.Errorf("the daemon still holds the pod's namespace after cnitool del")
	}
	if _, err := os.Stat(cache); !os.IsNotExist(err) {
		t.Errorf("cnitool's cache entry outlived del: %v", err)
	}
}
