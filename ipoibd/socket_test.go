package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ipoib"
)

// jsonKeys returns the keys of a JSON object.
func jsonKeys(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, raw)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// wantKeys fails unless raw is an object with exactly the JSON keys of
// the struct v, each a number where numbers lists it.
func wantKeys(t *testing.T, what string, raw json.RawMessage, v any, numbers ...string) {
	t.Helper()
	full, _ := json.Marshal(v)
	if got, want := jsonKeys(t, raw), jsonKeys(t, full); !slices.Equal(got, want) {
		t.Errorf("%s keys %v, want %v", what, got, want)
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	for _, n := range numbers {
		if _, ok := m[n].(float64); !ok {
			t.Errorf("%s %q = %#v, want a number", what, n, m[n])
		}
	}
	for k, x := range m {
		if x == nil {
			t.Errorf("%s %q is null", what, k)
		}
	}
}

// TestQueryJSON: the JSON of every query has the same keys with no
// connection and with one, lists are [] and never null, P_Keys, QPNs and
// ages are numbers, stats is one {name: number} object with the same keys
// in the same order before any traffic, with a connection and after it is
// gone, and no counter goes backwards when the peer leaves. -j is --json.
func TestQueryJSON(t *testing.T) {
	c := newCluster(t, "qjson", 2)
	c.start(1, "--ifname", "ib7")
	c.start(2, "--ifname", "ib7")
	get := func(k int, args ...string) json.RawMessage {
		t.Helper()
		return json.RawMessage(c.on(k, append([]string{binary}, args...)...))
	}
	for _, cmd := range []string{"neigh", "conn"} {
		if got := strings.TrimSpace(string(get(1, cmd, "ib7", "-j"))); got != "[]" {
			t.Errorf("%s -j with nothing to list: %s, want []", cmd, got)
		}
	}
	show := get(1, "show", "ib7", "-j")
	wantKeys(t, "show", show, showReply{}, "pkey", "mtu", "ud_mtu", "ib_mtu", "neighbors", "candidates", "connections")
	if !bytes.Equal(show, get(1, "show", "--ifname", "ib7", "--json")) {
		t.Errorf("-j and --json differ")
	}
	var info showReply
	if err := json.Unmarshal(show, &info); err != nil || info.Name != "ib7" || info.PKey != 0xffff {
		t.Errorf("show ib7: %+v, %v", info, err)
	}
	if out, err := c.try(1, binary, "show"); err == nil || !strings.Contains(out, "no ipoibd serves ib0") {
		t.Errorf("show without IFNAME asked ib0's daemon? %v\n%s", err, out)
	}
	var statsKeys [][]string // of every stats() call, in the daemon's order
	stats := func() map[string]uint64 {
		t.Helper()
		raw := get(1, "stats", "ib7", "-j")
		var m map[string]uint64 // every value a number
		dec := json.NewDecoder(bytes.NewReader(raw))
		if err := dec.Decode(&m); err != nil || len(m) == 0 {
			t.Fatalf("stats -j: %v\n%s", err, raw)
		}
		statsKeys = append(statsKeys, orderedKeys(t, raw))
		return m
	}
	before := stats()
	for _, name := range []string{"conn_tx_packets", "conn_retransmits", "cm_rej_sent_consumer", "cm_unknown_rep"} {
		if v, ok := before[name]; !ok || v != 0 {
			t.Errorf("before any connection: %s = %d (present %v), want 0", name, v, ok)
		}
	}

	c.on(1, "ping", "-c", "3", "-i", "0.1", "-W", "2", c.ip4(2))
	var conns []json.RawMessage
	if err := json.Unmarshal(get(1, "conn", "ib7", "-j"), &conns); err != nil || len(conns) == 0 {
		t.Fatalf("conn -j after a ping: %v, %d connections", err, len(conns))
	}
	for _, raw := range conns {
		wantKeys(t, "conn", raw, ipoib.ConnInfo{}, "local_qpn", "remote_qpn", "age_seconds", "mtu", "packets")
		var ci ipoib.ConnInfo
		_ = json.Unmarshal(raw, &ci)
		if ci.State == "established" && (ci.LocalQPN == 0 || ci.RemoteQPN == 0) {
			t.Errorf("established connection without both QPNs: %s", raw)
		}
	}
	var neighs []json.RawMessage
	if err := json.Unmarshal(get(1, "neigh", "ib7", "-j"), &neighs); err != nil || len(neighs) == 0 {
		t.Fatalf("neigh -j after a ping: %v, %d neighbors", err, len(neighs))
	}
	for _, raw := range neighs {
		wantKeys(t, "neigh", raw, ipoib.NeighInfo{}, "qpn", "mtu", "pending")
	}
	wantKeys(t, "show", get(1, "show", "ib7", "-j"), showReply{}, "pkey", "connections")
	during := stats()

	// The peer leaves: its connection goes, its counts stay.
	c.stop(2, "TERM")
	deadline := time.Now().Add(10 * time.Second)
	for {
		after := stats()
		for name, v := range during {
			if after[name] < v {
				t.Errorf("%s went back from %d to %d", name, v, after[name])
			}
		}
		for name := range before {
			if _, ok := after[name]; !ok {
				t.Errorf("counter %s vanished", name)
			}
		}
		if t.Failed() || strings.TrimSpace(string(get(1, "conn", "ib7", "-j"))) == "[]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connection to the stopped peer is still listed after 10 s")
		}
		time.Sleep(100 * time.Millisecond) // polling the daemon's state; it announces nothing
	}
	if after := stats(); after["conn_tx_packets"] < during["conn_tx_packets"] || after["conn_tx_packets"] == 0 {
		t.Errorf("counters after the peer left: %v, before: %v", after, during)
	}
	for k, keys := range statsKeys {
		if !slices.Equal(keys, statsKeys[0]) {
			t.Errorf("stats keys changed (query %d of %d):\nfirst %v\nthen  %v", k+1, len(statsKeys), statsKeys[0], keys)
			break
		}
	}
}

// orderedKeys returns the keys of a JSON object in the order they come.
func orderedKeys(t *testing.T, raw []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	var keys []string
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %v\n%s", err, raw)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%v\n%s", err, raw)
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%v\n%s", err, raw)
		}
	}
	return keys
}

// TestQueryPermission: a query by a user other than root is refused with
// the same clear message every time (not EPIPE when the daemon answers
// before reading).
func TestQueryPermission(t *testing.T) {
	c := newCluster(t, "qperm", 1)
	if _, err := lookTools("setpriv"); err != nil {
		t.Skip(err)
	}
	c.start(1)
	// nobody must be able to run the binary: the test build's directory
	// is root's alone.
	dir, err := os.MkdirTemp("", "ipoibd-perm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "ipoibd")
	data, err := os.ReadFile(binary)
	if err == nil {
		err = os.WriteFile(bin, data, 0o755)
	}
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	const want = "ipoibd: permission denied: only root may query ipoibd (run it with sudo)\n"
	for k := range 20 {
		cmd := c.command(1, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, []string{"show", "neigh", "conn", "stats"}[k%4])
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err == nil || stdout.Len() != 0 || stderr.String() != want {
			t.Fatalf("query %d as nobody: %v, stdout %q, stderr %q; want exit 1 and %q", k, err, stdout.String(), stderr.String(), want)
		}
	}
}
