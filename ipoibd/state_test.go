package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/control"
	"github.com/ipoibd/ipoibd/ipoib"
)

// A state file as a restart finds it: written by this version, truncated
// anywhere, from a newer version, garbage, empty, naming a namespace that
// is gone, or left by a namespace that is gone. Each problem is one log
// line; the children on whole lines are taken back (here: asked for), and
// nothing panics.
func TestStateFileRobustness(t *testing.T) {
	dir := t.TempDir()
	kids := []stateChild{
		{ChildRequest: control.ChildRequest{PKey: "0x8001", Name: "ib0.8001", Addrs: []string{"172.16.9.1/24"}}, LinkAddr: "80:00:00:48:fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:01"},
		{ChildRequest: control.ChildRequest{PKey: "0x8002", Name: "net1", Netns: "/run/netns/ipoibd-test-gone", Owner: "cni/x/c1/net1"}, NetnsIno: 7},
		{ChildRequest: control.ChildRequest{PKey: "0x8003", Name: "ib0.8003"}},
	}
	good := filepath.Join(dir, "good")
	h := stateHeader{Parent: "ib0", NetnsCookie: 42, NetnsIno: 1}
	if err := writeState(good, h, kids); err != nil {
		t.Fatal(err)
	}
	whole, _ := os.ReadFile(good)
	lines := strings.SplitAfter(string(whole), "\n")
	newer := strings.Replace(string(whole), `"version":1`, `"version":7`, 1)
	newer = strings.Replace(newer, `"pkey":"0x8003"`, `"pkey":"0x8003","future":{"x":1}`, 1)
	for _, tc := range []struct {
		name     string
		content  string
		cookie   uint64
		want     []string // the names asked for
		warnings []string // a substring of each log line, in order
	}{
		{"as written", string(whole), 42, []string{"ib0.8001", "ib0.8003"}, []string{`child not taken back" if=net1`}},
		{"truncated in the last line", string(whole[:len(whole)-20]), 42, []string{"ib0.8001"}, []string{"line 4 unreadable (truncated?)", `child not taken back" if=net1`}},
		{"truncated in the header", lines[0][:10], 42, nil, []string{"not a state file"}},
		{"empty", "", 42, nil, []string{"empty (truncated?)"}},
		{"from a newer version", newer, 42, []string{"ib0.8001", "ib0.8003"}, []string{"newer ipoibd (version 7", `child not taken back" if=net1`}},
		{"garbage", "\x00\x01 not json\n{{{\n", 42, nil, []string{"not a state file"}},
		{"left by a namespace that is gone", string(whole), 43, nil, []string{"left by a namespace that is gone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "ib0.state")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			d := &daemon{base: ipoib.Config{Name: "ib0", Log: slog.New(slog.NewTextHandler(&log, nil))}}
			d.rs.path, d.rs.header = filepath.Join(dir, "unwritten"), stateHeader{NetnsCookie: tc.cookie}
			d.rs.path = path
			d.loadState()
			d.rs.path = filepath.Join(dir, "rewritten")
			var asked []string
			adoptAll(d, func(c stateChild) error {
				if c.Netns != "" {
					return d.checkNetns(c)
				}
				asked = append(asked, c.Name)
				return nil
			})
			if strings.Join(asked, ",") != strings.Join(tc.want, ",") {
				t.Errorf("took back %v, want %v", asked, tc.want)
			}
			got := strings.Split(strings.TrimSpace(log.String()), "\n")
			if log.Len() == 0 {
				got = nil
			}
			if len(got) != len(tc.warnings) {
				t.Fatalf("%d log lines, want %d:\n%s", len(got), len(tc.warnings), log.String())
			}
			for k, w := range tc.warnings {
				if !strings.Contains(got[k], w) {
					t.Errorf("log line %d %q, want %q in it", k, got[k], w)
				}
			}
		})
	}
}

// TestNotTakenBackIsShown: a pod's child that could not be taken back
// while its namespace still exists is listed as unserved (its interface
// is there, unreachable) until a child add serves it; one whose namespace
// is gone is not (its interface went with it).
func TestNotTakenBackIsShown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		shown bool
	}{
		{"refused", errors.New("P_Key 0x8002 is not in the port's P_Key table"), true},
		{"namespace gone", fmt.Errorf("%w: stat: no such file", errNamespaceGone), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &daemon{base: ipoib.Config{Name: "ib0", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
			d.rs.kids = []stateChild{{ChildRequest: control.ChildRequest{PKey: "0x8002", Name: "net1", Netns: "/proc/self/ns/net", Owner: "cni/x/c1/net1"}}}
			adoptAll(d, func(stateChild) error { return tc.err })
			shown := slices.ContainsFunc(d.unserved(), func(u unservedInfo) bool {
				return u.Name == "net1" && u.Owner == "cni/x/c1/net1" && strings.Contains(u.Why, "P_Key 0x8002")
			})
			if shown != tc.shown {
				t.Errorf("net1 listed as unserved: %v, want %v (%+v)", shown, tc.shown, d.unserved())
			}
		})
	}
}
