package verbs

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// fakeSysfs lays out files (path relative to the root → content).
func fakeSysfs(t *testing.T, files map[string]string) sysfs {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return sysfs(root)
}

func TestSysfs(t *testing.T) {
	port := "class/infiniband/rxe0/ports/1/"
	s := fakeSysfs(t, map[string]string{
		port + "gid_attrs/types/0":        "IB/RoCE v1\n",
		port + "gid_attrs/types/1":        "RoCE v2\n",
		port + "gid_attrs/ndevs/1":        "va\n",
		"class/net/va/ifindex":            "7\n",
		port + "hw_counters/sent_pkts":    "12\n",
		port + "hw_counters/rcvd_pkts":    "34\n",
		port + "hw_counters/lifespan":     "10\n",
		port + "hw_counters/not_a_number": "n/a\n",
	})
	if v2, err := s.gidType("rxe0", 1, 1); err != nil || !v2 {
		t.Errorf("gidType(1) = %v, %v", v2, err)
	}
	if v2, err := s.gidType("rxe0", 1, 0); err != nil || v2 {
		t.Errorf("gidType(0) = %v, %v", v2, err)
	}
	if _, err := s.gidType("rxe0", 1, 5); err == nil {
		t.Error("gidType of a missing index succeeded")
	}
	if n, err := s.netdevIndex("rxe0", 1, 1); err != nil || n != 7 {
		t.Errorf("netdevIndex = %d, %v", n, err)
	}
	want := []ib.Counter{{Name: "hw_lifespan", Value: 10}, {Name: "hw_rcvd_pkts", Value: 34}, {Name: "hw_sent_pkts", Value: 12}}
	if got := s.hwCounters("rxe0", 1); !reflect.DeepEqual(got, want) {
		t.Errorf("hwCounters = %v, want %v", got, want)
	}
	if got := s.hwCounters("rxe1", 1); got != nil {
		t.Errorf("hwCounters of a port without them = %v", got)
	}
}

func TestPortActive(t *testing.T) {
	for _, tc := range []struct {
		state string // "" : no state file
		want  bool
	}{
		{"4: ACTIVE\n", true},
		{"1: DOWN\n", false},
		{"2: INIT\n", false},
		{"3: ARMED\n", false},
		{"", false},
	} {
		files := map[string]string{"class/infiniband/rxe0/ports/1/gids/0": "x"}
		if tc.state != "" {
			files["class/infiniband/rxe0/ports/1/state"] = tc.state
		}
		if got := fakeSysfs(t, files).portActive("rxe0", 1); got != tc.want {
			t.Errorf("state %q: active %v, want %v", tc.state, got, tc.want)
		}
	}
}
