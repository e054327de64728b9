package cni

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// TestLoadConf: the configurations a user may write, and the mistakes
// each refused with CNI error 7 naming what is wrong.
func TestLoadConf(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{
			"cniVersion": "1.0.0", "name": "ib-8001", "type": "ipoibd-cni",
			"master": "ib0", "pkey": "0x8001", "mode": "connected", "mtu": 65520,
			"ipam": map[string]any{"type": "host-local", "subnet": "172.30.1.0/24", "anyKey": "is host-local's"},
		}
	}
	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
		code uint   // 0: accepted
		want string // in the error's details
	}{
		{"the README's", nil, 0, ""},
		{"ipoib-cni's shape", func(m map[string]any) { delete(m, "pkey"); delete(m, "mode"); delete(m, "mtu") }, 0, ""},
		{"what a runtime adds", func(m map[string]any) {
			m["runtimeConfig"] = map[string]any{}
			m["args"] = map[string]any{}
			m["prevResult"] = map[string]any{"cniVersion": "1.0.0"}
			m["cni.dev/valid-attachments"] = []any{}
			m["cni.dev/attachments"] = []any{}
			m["capabilities"] = map[string]any{}
			m["dns"] = map[string]any{}
			m["dataDir"] = "/tmp/x"
		}, 0, ""},
		{"a swapped pkey", func(m map[string]any) { m["pkye"] = m["pkey"]; delete(m, "pkey") }, 7, `unknown key "pkye" (did you mean "pkey"?)`},
		{"a misspelt master", func(m map[string]any) { m["mastr"] = "ib0" }, 7, `unknown key "mastr" (did you mean "master"?)`},
		{"a key far from any", func(m map[string]any) { m["partition"] = "0x8001" }, 7, `unknown key "partition"`},
		{"a wrong case", func(m map[string]any) { m["MTU"] = 4000 }, 7, `unknown key "MTU" (did you mean "mtu"?)`},
		{"no ipam", func(m map[string]any) { delete(m, "ipam") }, 7, "ipam is missing"},
		{"ipam without a type", func(m map[string]any) { m["ipam"] = map[string]any{"subnet": "172.30.1.0/24"} }, 7, "ipam is missing"},
		{"no master", func(m map[string]any) { delete(m, "master") }, 7, "master is missing"},
		{"no name", func(m map[string]any) { delete(m, "name") }, 7, "name is missing"},
		{"a bad P_Key", func(m map[string]any) { m["pkey"] = "0x8000" }, 7, "pkey"},
		{"a bad mode", func(m map[string]any) { m["mode"] = "fast" }, 7, `mode "fast"`},
		{"a negative MTU", func(m map[string]any) { m["mtu"] = -1 }, 7, "mtu -1"},
		{"a master with a slash", func(m map[string]any) { m["master"] = "ib/0" }, 7, "not an interface name"},
		{"a master too long", func(m map[string]any) { m["master"] = "abcdefghijklmnop" }, 7, "not an interface name"},
		{"a P_Key out of range", func(m map[string]any) { m["pkey"] = "0x18001" }, 7, "pkey"},
		{"a P_Key not a number", func(m map[string]any) { m["pkey"] = "eight" }, 7, "pkey"},
		{"an MTU as a string", func(m map[string]any) { m["mtu"] = "65520" }, 6, "mtu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base()
			if tc.edit != nil {
				tc.edit(m)
			}
			b, _ := json.Marshal(m)
			n, err := loadConf(b)
			if tc.code == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if want, _ := m["dataDir"].(string); n.DataDir != want && (want != "" || n.DataDir != defaultDataDir) {
					t.Errorf("dataDir %q", n.DataDir)
				}
				return
			}
			e, ok := err.(*types.Error)
			if !ok || e.Code != tc.code || !strings.Contains(e.Details, tc.want) {
				t.Errorf("got %#v, want code %d with %q", err, tc.code, tc.want)
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"pkey", "pkey", 0}, {"pkye", "pkey", 1}, {"mastr", "master", 1}, {"", "abc", 3}, {"mode", "mtu", 3}} {
		if d := editDistance(tc.a, tc.b); d != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, d, tc.d)
		}
	}
}
