package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ipoib"
)

// unitCaps returns the capabilities dist/ipoibd@.service.in gives the
// daemon, checking that its bounding and ambient sets agree.
func unitCaps(t *testing.T) []string {
	t.Helper()
	unit, err := os.ReadFile("../dist/ipoibd@.service.in")
	if err != nil {
		t.Fatal(err)
	}
	sets := map[string][]string{}
	for _, l := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && (k == "CapabilityBoundingSet" || k == "AmbientCapabilities") {
			sets[k] = strings.Fields(v)
		}
	}
	if len(sets["CapabilityBoundingSet"]) == 0 || !slices.Equal(sets["CapabilityBoundingSet"], sets["AmbientCapabilities"]) {
		t.Fatalf("the unit's capability sets %v: want one non-empty list, the same for bounding and ambient", sets)
	}
	return sets["CapabilityBoundingSet"]
}

// capBits are the capability numbers of linux/capability.h the unit may name.
var capBits = map[string]uint{"CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_NET_BIND_SERVICE": 10, "CAP_IPC_LOCK": 14, "CAP_SYS_ADMIN": 21}

// TestServiceCapabilities starts a daemon as systemd would: with exactly
// the unit's capabilities (setpriv drops every other one, also from the
// bounding set), a NOTIFY_SOCKET, a watchdog and JOURNAL_STREAM. It must
// announce readiness, ping its watchdog, serve pings both ways without
// entering a namespace (ip netns exec puts it in its host's; no --netns),
// log SIGHUP and keep running, and say STOPPING=1 on SIGTERM.
func TestServiceCapabilities(t *testing.T) {
	c := newCluster(t, "svccap", 2)
	if _, err := lookTools("setpriv"); err != nil {
		t.Skip(err)
	}
	caps := unitCaps(t)
	var list []string
	var mask uint64
	for _, cp := range caps {
		bit, ok := capBits[cp]
		if !ok {
			t.Fatalf("the unit names %s, which this test does not know", cp)
		}
		mask |= 1 << bit
		list = append(list, "+"+strings.ToLower(strings.TrimPrefix(cp, "CAP_")))
	}
	set := "-all," + strings.Join(list, ",")

	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_ = ln.SetReadDeadline(time.Now().Add(30 * time.Second))
	next := func(want string) {
		t.Helper()
		buf := make([]byte, 256)
		for {
			k, err := ln.Read(buf)
			if err != nil {
				t.Fatalf("waiting for %s on NOTIFY_SOCKET: %v", want, err)
			}
			if strings.HasPrefix(string(buf[:k]), want) {
				return
			}
			if !strings.HasPrefix(string(buf[:k]), "WATCHDOG=1") { // pings may come between
				t.Fatalf("NOTIFY_SOCKET got %q, want %s", buf[:k], want)
			}
		}
	}

	d := exec.Command("ip", "netns", "exec", "svccap-h1",
		"setpriv", "--inh-caps="+set, "--ambient-caps="+set, "--bounding-set="+set,
		binary, "run", "--underlay", c.underlay(1), "--addr", c.ip4(1)+"/24", "--addr", c.ip6(1)+"/64")
	d.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=200000", "JOURNAL_STREAM=8:1")
	stderr, err := d.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1000)
	var log bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	exited := false
	defer func() {
		if !exited {
			_ = d.Process.Kill()
			_ = d.Wait()
		}
		for l := range lines {
			log.WriteString(l + "\n")
		}
		if t.Failed() {
			t.Logf("capability-limited daemon's log:\n%s", log.String())
		}
	}()
	// waitLine reads the log up to a line containing s.
	waitLine := func(s string) string {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the daemon's log ended before %q", s)
				}
				log.WriteString(l + "\n")
				if strings.Contains(l, s) {
					return l
				}
			case <-timeout:
				t.Fatalf("no log line with %q in 30 s", s)
			}
		}
	}

	next("READY=1")
	up := waitLine("msg=up")
	if !strings.HasPrefix(up, "<6>level=INFO") || strings.Contains(up, "time=") {
		t.Errorf("journal line %q: want the <6> priority and no timestamp", up)
	}
	next("WATCHDOG=1")

	// The daemon holds exactly the unit's capabilities.
	pid := strconv.Itoa(d.Process.Pid) // setpriv and ip netns exec exec, so this is the daemon
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"CapEff", "CapBnd", "CapAmb"} {
		m := regexp.MustCompile(field + `:\s+([0-9a-f]+)`).FindSubmatch(status)
		got, _ := strconv.ParseUint(string(m[1]), 16, 64)
		if got != mask {
			t.Errorf("%s %#x, want the unit's %#x", field, got, mask)
		}
	}

	c.start(2)
	c.ping(1, c.ip4(2), 3)
	c.ping(2, c.ip4(1), 3)
	c.ping(1, c.ip6(2), 3)

	if err := d.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if l := waitLine("SIGHUP"); !strings.Contains(l, "connections=") {
		t.Errorf("SIGHUP logged %q, want the state", l)
	}
	c.on(1, binary, "show") // still serving

	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next("STOPPING=1")
	for range lines {
	}
	exited = true
	if err := d.Wait(); err != nil {
		t.Errorf("the daemon exited with %v after SIGTERM", err)
	}
	// Without --netns nothing may have needed CAP_SYS_ADMIN.
	if strings.Contains(log.String(), "not permitted") {
		// Netlink subscriptions with Namespace set setns even into the
		// daemon's own namespace: pass it only with --netns.
		t.Errorf("something needed a capability the unit does not give (CAP_SYS_ADMIN for a setns?):\n%s", log.String())
	}
}

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

// TestUnitSecurity: the unit systemd would run scores 3.0 or better in
// systemd-analyze security, and make unit puts ExecStart under PREFIX.
func TestUnitSecurity(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed (scripts/deps.sh installs the systemd package)")
	}
	dir := t.TempDir()
	unit := filepath.Join(dir, "ipoibd@.service")
	out, err := exec.Command("make", "-s", "-C", "..", "unit", "UNIT="+unit, "PREFIX=/opt/ipoibd-test").CombinedOutput()
	if err != nil {
		t.Fatalf("make unit: %v\n%s", err, out)
	}
	text, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "\nExecStart=/opt/ipoibd-test/sbin/ipoibd run ") || strings.Contains(string(text), "@SBINDIR@") {
		t.Errorf("make unit PREFIX=/opt/ipoibd-test did not put ExecStart under the prefix:\n%s", text)
	}
	for _, want := range []string{"\nType=notify\n", "\nWatchdogSec=", "\nNotifyAccess=main\n"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("the unit lacks %q", strings.TrimSpace(want))
		}
	}
	out, err = exec.Command("systemd-analyze", "security", "--offline=yes", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	if score > 3.0 {
		t.Errorf("exposure %.1f, want at most 3.0:\n%s", score, out)
	}
	t.Logf("systemd-analyze security: %.1f", score)
}
