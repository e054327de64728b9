package cni_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/ipoibd/ipoibd/internal/testnet"
)

// TestErrorsAreCNIErrors runs the plugin binary as a runtime does, on a
// node where no ipoibd runs: every refusal is a CNI error object with the
// spec's code, DEL and GC of nothing succeed, VERSION lists 1.1.0.
func TestErrorsAreCNIErrors(t *testing.T) {
	build(t)
	plugin := filepath.Join(bins, "ipoibd-cni")
	net := testnet.New(t, testnet.Config{Hosts: 1})
	pod := "cnipod-err-" + filepath.Base(net.Hosts[0].NS)
	if out, err := exec.Command("ip", "netns", "add", pod).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", pod).Run() })
	notNS := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notNS, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := func(edit func(m map[string]any)) []byte {
		m := readmeConf(t)
		m["cniVersion"] = "1.1.0" // STATUS and GC are 1.1's
		m["dataDir"] = filepath.Join(dir, "ipoibd-cni")
		m["ipam"].(map[string]any)["dataDir"] = filepath.Join(dir, "host-local")
		if edit != nil {
			edit(m)
		}
		b, _ := json.Marshal(m)
		return b
	}
	for _, tc := range []struct {
		name, cmd string
		conf      []byte
		netns     string
		want      int // the CNI error code; -1: success
	}{
		{"not JSON", "ADD", []byte("{"), "/run/netns/" + pod, 6},
		{"a version from the future", "ADD", conf(func(m map[string]any) { m["cniVersion"] = "9.9.9" }), "/run/netns/" + pod, 1},
		{"no master", "ADD", conf(func(m map[string]any) { delete(m, "master") }), "/run/netns/" + pod, 7},
		{"no partition in the P_Key", "ADD", conf(func(m map[string]any) { m["pkey"] = "0x8000" }), "/run/netns/" + pod, 7},
		{"unknown mode", "ADD", conf(func(m map[string]any) { m["mode"] = "fast" }), "/run/netns/" + pod, 7},
		{"a typo in a key", "ADD", conf(func(m map[string]any) { m["pkye"] = m["pkey"]; delete(m, "pkey") }), "/run/netns/" + pod, 7},
		{"no ipam", "ADD", conf(func(m map[string]any) { delete(m, "ipam") }), "/run/netns/" + pod, 7},
		{"negative MTU", "ADD", conf(func(m map[string]any) { m["mtu"] = -1 }), "/run/netns/" + pod, 7},
		{"netns is no namespace", "ADD", conf(nil), notNS, 8},
		{"no daemon: ADD", "ADD", conf(nil), "/run/netns/" + pod, 11},
		{"no daemon: STATUS", "STATUS", conf(nil), "", 50},
		{"CHECK without prevResult", "CHECK", conf(nil), "/run/netns/" + pod, 7},
		{"no daemon: DEL of nothing", "DEL", conf(nil), "/run/netns/" + pod, -1},
		{"DEL without a namespace", "DEL", conf(nil), "", -1},
		{"no daemon: GC", "GC", conf(nil), "", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := &invoke.Args{Command: tc.cmd, ContainerID: "errtest", NetNS: tc.netns, IfName: "net1", Path: bins}
			var err error
			net.In(0, func() {
				if tc.cmd == "ADD" {
					_, err = invoke.ExecPluginWithResult(context.Background(), plugin, tc.conf, args, nil)
				} else {
					err = invoke.ExecPluginWithoutResult(context.Background(), plugin, tc.conf, args, nil)
				}
			})
			if got := cniCode(err); got != tc.want || (tc.want == -1 && err != nil) {
				t.Errorf("%s: %v (code %d), want code %d", tc.cmd, err, got, tc.want)
			}
		})
	}
	info, err := invoke.GetVersionInfo(context.Background(), plugin, nil)
	if err != nil || !slices.Contains(info.SupportedVersions(), "1.1.0") || !slices.Contains(info.SupportedVersions(), "0.3.1") {
		t.Errorf("VERSION: %v %v", info, err)
	}
}
