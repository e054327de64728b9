//go:build linux && rdma

package sapath

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/umadsa"
)

// The judge, as in umadsa's OpenSM test: OpenSM on a fabric simulated by
// ibsim answers a path query that goes through the cache and its worker
// as an event loop drives them, and saquery -p, asked independently, must
// know the same path. The test binary is its own client: run again with
// childEnv set and libumad2sim.so preloaded it is one simulated node,
// and leaves through C's exit, which frees the simulator's slot.

const (
	umad2sim = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
	childEnv = "IPOIBD_SAPATH_CHILD"
)

// topology: one switch, three HCAs; OpenSM runs on h1.
const topology = `Switch	8 "sw1"
[1]	"h1"[1]
[2]	"h2"[1]
[3]	"h3"[1]

Hca	1 "h1"
[1]	"sw1"[1]

Hca	1 "h2"
[1]	"sw1"[2]

Hca	1 "h3"
[1]	"sw1"[3]
`

func TestMain(m *testing.M) {
	if arg := os.Getenv(childEnv); arg != "" {
		if err := child(arg); err != nil {
			fmt.Fprintln(os.Stderr, "sapath child:", err)
			umadsa.Exit(1)
		}
		umadsa.Exit(0)
	}
	os.Exit(m.Run())
}

// child prints its port ("port") or the path to a GID as the cache
// converted it.
func child(arg string) error {
	if arg == "port" {
		pi, err := umadsa.QueryPort("", 0)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"gid": pi.GID.String(), "lid": pi.LID})
	}
	g, err := ib.ParseGID(arg)
	if err != nil {
		return err
	}
	c, u, err := umadsa.NewPortClient("", 0, 300*time.Millisecond, 2)
	if err != nil {
		return err
	}
	defer u.Close()
	w := NewWorker(c, 0xffff)
	defer w.Close()
	cache := New(Config{})
	if _, ok := cache.Lookup(g, time.Now()); ok {
		return errors.New("an empty cache hit")
	}
	w.Ask(cache.Due(time.Now())...)
	var r Result
	select {
	case r = <-w.Results():
	case <-time.After(10 * time.Second):
		return errors.New("no answer from the worker")
	}
	cache.Done(r.DGID, r.Record, r.Err, time.Now())
	p, ok := cache.Lookup(g, time.Now())
	if !ok {
		return fmt.Errorf("no path after the answer (%v)", r.Err)
	}
	return json.NewEncoder(os.Stdout).Encode(p)
}

func TestOpenSM(t *testing.T) {
	for _, c := range []string{"ibsim", "opensm", "saquery"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s not installed (scripts/deps.sh installs it)", c)
		}
	}
	if _, err := os.Stat(umad2sim); err != nil {
		t.Skipf("%s missing (scripts/deps.sh installs it)", umad2sim)
	}
	f := up(t)
	ports := map[string]struct {
		GID string `json:"gid"`
		LID uint16 `json:"lid"`
	}{}
	for _, h := range []string{"h2", "h3"} {
		p := ports[h]
		f.json(h, &p, os.Args[0])
		ports[h] = p
	}
	var p Path
	f.json("h2", &p, os.Args[0], ports["h3"].GID)
	sq := dump(f.run("h3", "saquery", "-p", "--sgid-to-dgid", ports["h2"].GID+"-"+ports["h3"].GID))
	r := p.Record
	t.Logf("h2→h3: %+v", r)
	// saquery prints LIDs in decimal and selector-and-value octets in hex.
	for _, c := range []struct {
		key  string
		ours uint64
	}{
		{"dlid", uint64(r.DLID)}, {"slid", uint64(r.SLID)}, {"sl", uint64(r.SL)},
		{"mtu", uint64(r.MTU.Selector)<<6 | uint64(r.MTU.Value)},
		{"rate", uint64(r.Rate.Selector)<<6 | uint64(r.Rate.Value)},
		{"pkt_life", uint64(r.Lifetime.Selector)<<6 | uint64(r.Lifetime.Value)},
		{"hop_flow_raw", uint64(r.FlowLabel)<<8 | uint64(r.HopLimit)},
		{"pkey", uint64(r.PKey)},
	} {
		v, err := strconv.ParseUint(sq[c.key], 0, 32)
		if err != nil || v != c.ours {
			t.Errorf("%s: saquery %q, the cache %#x", c.key, sq[c.key], c.ours)
		}
	}
	if r.DLID != ports["h3"].LID || r.SLID != ports["h2"].LID || !p.MTU.Valid() {
		t.Fatalf("record %+v: want h3's LID %d from h2's %d and an MTU", r, ports["h3"].LID, ports["h2"].LID)
	}
	// OpenSM's paths within its subnet have hop limit 0: LRH only, and
	// the REQ names the LIDs.
	wantAH := ib.Path{DLID: r.DLID, SL: r.SL, StaticRate: r.Rate.Value}
	if p.AH != wantAH {
		t.Errorf("AH path %+v, want %+v", p.AH, wantAH)
	}
	c := p.CM
	if c.RemoteLID != r.DLID || c.LocalLID != r.SLID || c.SL != r.SL || c.PacketRate != r.Rate.Value || !c.SubnetLocal ||
		c.LocalACKTimeout != ACKTimeout(0, r.Lifetime.Value) || c.RemoteGID.String() != ports["h3"].GID {
		t.Errorf("REQ path %+v from record %+v", c, r)
	}
	if p.MTU != r.MTU.MTU() {
		t.Errorf("MTU %v, record's %v", p.MTU, r.MTU.MTU())
	}
}

type fabric struct {
	t    *testing.T
	dir  string
	sock string
}

// up starts ibsim on the topology and OpenSM on h1 and waits for
// "SUBNET UP"; both are killed when the test ends.
func up(t *testing.T) *fabric {
	f := &fabric{t: t, dir: t.TempDir(), sock: fmt.Sprintf("ipoibd-sapath-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	net := filepath.Join(f.dir, "net")
	if err := os.WriteFile(net, []byte(topology), 0o644); err != nil {
		t.Fatal(err)
	}
	sim := exec.Command("ibsim", "-n", "-s", net)
	sim.Env = append(os.Environ(), "IBSIM_SOCKNAME="+f.sock)
	f.start(sim)
	if !f.wait(func() bool {
		b, _ := os.ReadFile("/proc/net/unix")
		return bytes.Contains(b, []byte("@"+f.sock+":ctl"))
	}) {
		t.Fatal("ibsim did not come up")
	}
	conf, log := filepath.Join(f.dir, "opensm.conf"), filepath.Join(f.dir, "osm.log")
	if err := os.WriteFile(conf, []byte("force_log_flush TRUE\nsweep_interval 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	osm := exec.Command("opensm", "-F", conf, "-f", log)
	osm.Env = append(f.env("h1"), "OSM_TMP_DIR="+f.dir, "OSM_CACHE_DIR="+f.dir)
	f.start(osm)
	if !f.wait(func() bool {
		b, _ := os.ReadFile(log)
		return bytes.Contains(b, []byte("SUBNET UP"))
	}) {
		b, _ := os.ReadFile(log)
		t.Fatalf("OpenSM did not bring the subnet up:\n%s", b)
	}
	return f
}

// start runs a daemon in the test's directory, killed (SIGKILL: OpenSM's
// own exit can hang on a simulator already gone) at the end, or by the
// kernel if the test binary dies first.
func (f *fabric) start(cmd *exec.Cmd) {
	cmd.Dir = f.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
}

func (f *fabric) wait(ok func() bool) bool {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if ok() {
			return true
		}
	}
	return false
}

// env is what a program on node host needs to reach the simulator.
func (f *fabric) env(host string) []string {
	return append(os.Environ(), "IBSIM_SOCKNAME="+f.sock, "SIM_HOST="+host, "LD_PRELOAD="+umad2sim)
}

// run runs a program on node host (killed after 20 s) and returns its
// output; it fails the test if the program fails.
func (f *fabric) run(host, name string, args ...string) string {
	f.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env, cmd.Dir = f.env(host), f.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	stop := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	stop.Stop()
	if err != nil {
		f.t.Fatalf("%s: %s %s: %v: %s%s", host, name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// json runs this test binary as a node's client with arg and decodes its
// answer into v.
func (f *fabric) json(host string, v any, self string, arg ...string) {
	f.t.Helper()
	a := "port"
	if len(arg) > 0 {
		a = arg[0]
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env, cmd.Dir = append(f.env(host), childEnv+"="+a), f.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	stop := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	stop.Stop()
	if err != nil {
		f.t.Fatalf("%s: client %s: %v: %s", host, a, err, errb.String())
	}
	if err := json.Unmarshal(out.Bytes(), v); err != nil {
		f.t.Fatalf("%s: client %s printed %q: %v", host, a, out.String(), err)
	}
}

// dump reads saquery's "name....value" lines.
func dump(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if i := strings.Index(l, ".."); i > 0 {
			m[l[:i]] = strings.TrimLeft(l[i:], ".")
		}
	}
	return m
}
