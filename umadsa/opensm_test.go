//go:build linux

package umadsa

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The judge: OpenSM, the real subnet manager, on a fabric simulated by
// ibsim, answers our client (saclient, built with -tags rdma and run with
// ibsim's libumad2sim.so preloaded, so its libibumad calls reach the
// simulator) and is checked with infiniband-diags (saquery, ibroute).
//
// Simulator facts the test lives with: one CA port per process (SIM_HOST
// names the node), at most ten clients at once (we run one at a time
// beside OpenSM), no RMPP (saquery's tables stop at 200 octets: we ask
// it for single records), MAD timeouts not simulated (it hands a send
// back as timed out at once: the client keeps its own time), and a
// client frees its slot only in C's exit (saclient leaves through it).
// libumad2sim.so makes its fake sysfs as sys-PID in the working directory,
// and only an orderly exit removes it: every simulated process runs in the
// test's temporary directory.

const umad2sim = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"

// topology: one 8-port switch, four HCAs on ports 1-4; OpenSM runs on h1.
const topology = `Switch	8 "sw1"
[1]	"h1"[1]
[2]	"h2"[1]
[3]	"h3"[1]
[4]	"h4"[1]

Hca	1 "h1"
[1]	"sw1"[1]

Hca	1 "h2"
[1]	"sw1"[2]

Hca	1 "h3"
[1]	"sw1"[3]

Hca	1 "h4"
[1]	"sw1"[4]
`

const (
	bcastMGID = "ff12:401b:ffff::ffff:ffff"
	v4MGID    = "ff12:401b:ffff::ef01:203" // 239.1.2.3
	v6MGID    = "ff12:601b:ffff::1:ff00:2" // a solicited-node group
)

type fabric struct {
	t      *testing.T
	dir    string
	sock   string
	client string
	ibsim  *exec.Cmd
	osm    *exec.Cmd
}

func TestOpenSM(t *testing.T) {
	start := time.Now()
	for _, c := range []string{"ibsim", "opensm", "saquery", "ibroute", "ibswitches", "gcc"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("%s not installed (scripts/deps.sh installs it)", c)
		}
	}
	for _, f := range []string{umad2sim, "/usr/include/infiniband/umad.h"} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("%s missing (scripts/deps.sh installs it)", f)
		}
	}
	f := &fabric{t: t, dir: t.TempDir(), sock: fmt.Sprintf("ipoibd-sa-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	f.client = filepath.Join(f.dir, "saclient")
	if out, err := exec.Command("go", "build", "-tags", "rdma", "-o", f.client, "../internal/testbed/saclient").CombinedOutput(); err != nil {
		t.Fatalf("building saclient: %v\n%s", err, out)
	}
	built := time.Now()
	f.up()
	up := time.Now()

	gids := map[string]string{}
	for _, h := range []string{"h1", "h2", "h3", "h4"} {
		var p struct {
			GID   string `json:"gid"`
			LID   int    `json:"lid"`
			SMLID int    `json:"sm_lid"`
			State int    `json:"state"`
		}
		f.json(h, &p, "port")
		if p.State != 4 || p.LID == 0 || p.SMLID == 0 {
			t.Fatalf("%s: port %+v, want active with a LID and an SM", h, p)
		}
		gids[h] = p.GID
	}

	t.Run("broadcast group", func(t *testing.T) {
		f := f.on(t)
		var g group
		f.json("h2", &g, "join", bcastMGID)
		// OpenSM pre-creates it (OSM_IPOIB_BROADCAST_MGRP_QKEY, the first
		// MLID, MTU code 4 = 2048 as its default, exactly).
		want := group{MGID: bcastMGID, PortGID: gids["h2"], QKey: 0x0b1b, MLID: 0xc000, MTU: 4, MTUSelector: 2, PKey: 0xffff, JoinState: 1}
		if g.core() != want {
			t.Errorf("join answered %+v, want %+v", g.core(), want)
		}
		// saquery, asked independently, knows the group as we were told.
		out := f.diag("h4", exec.Command("saquery", "-g", "--mgid", bcastMGID))
		for _, w := range []string{"Mlid....................0xC000", fmt.Sprintf("Mtu.....................0x%02X", 2<<6|g.MTU), "pkey....................0xFFFF"} {
			if !strings.Contains(out, w) {
				t.Errorf("saquery -g has no %q:\n%s", w, out)
			}
		}
	})

	swLID := f.switchLID()
	for _, mg := range []struct{ name, mgid string }{{"IPv4 group", v4MGID}, {"IPv6 group", v6MGID}} {
		t.Run(mg.name, func(t *testing.T) {
			f := f.on(t)
			// h2 creates it like the broadcast group, as the kernel's ipoib
			// does; h3 joins what is there.
			var a, b group
			f.json("h2", &a, "--like", bcastMGID, "join", mg.mgid)
			f.json("h3", &b, "join", mg.mgid)
			if a.MLID < 0xc000 || a.MLID == 0xc000 || a.QKey != 0x0b1b || a.MTU != 4 || a.PKey != 0xffff {
				t.Errorf("created %+v: want a new MLID with the broadcast group's Q_Key, MTU and P_Key", a)
			}
			if b.MLID != a.MLID || b.QKey != a.QKey || b.MTU != a.MTU || b.PortGID != gids["h3"] {
				t.Errorf("second member was told %+v, the creator %+v", b, a)
			}
			// The switch forwards the MLID to the members' ports (h2 on
			// switch port 2, h3 on 3) and to nobody else.
			if got := f.mcastPorts(swLID, a.MLID); got != "2 3" {
				t.Errorf("ibroute -M: MLID %#x goes to ports %q, want \"2 3\"", a.MLID, got)
			}
			f.json("h2", nil, "leave", mg.mgid)
			f.json("h3", nil, "leave", mg.mgid)
			if got := f.mcastPorts(swLID, a.MLID); got != "" {
				t.Errorf("ibroute -M: after both left MLID %#x still goes to ports %q", a.MLID, got)
			}
		})
	}

	t.Run("path records", func(t *testing.T) {
		f := f.on(t)
		for _, h := range []string{"h1", "h3", "h4"} {
			var p struct {
				DGID     string `json:"dgid"`
				SGID     string `json:"sgid"`
				DLID     int    `json:"dlid"`
				SLID     int    `json:"slid"`
				SL       int    `json:"sl"`
				MTU      int    `json:"mtu"`
				MTUSel   int    `json:"mtu_selector"`
				Rate     int    `json:"rate"`
				PktLife  int    `json:"pkt_life"`
				HopLimit int    `json:"hop_limit"`
				PKey     int    `json:"pkey"`
			}
			f.json("h2", &p, "path", gids[h])
			out := f.diag("h4", exec.Command("saquery", "-p", "--sgid-to-dgid", gids["h2"]+"-"+gids[h]))
			sq := dump(out)
			want := map[string]string{
				"dgid": gids[h], "sgid": gids["h2"], "dlid": strconv.Itoa(p.DLID), "slid": strconv.Itoa(p.SLID),
				"sl": fmt.Sprintf("0x%X", p.SL), "mtu": fmt.Sprintf("0x%X", p.MTUSel<<6|p.MTU),
				"rate": fmt.Sprintf("0x%X", 2<<6|p.Rate), "pkt_life": fmt.Sprintf("0x%X", 2<<6|p.PktLife),
				"pkey": fmt.Sprintf("0x%04X", p.PKey), "hop_flow_raw": fmt.Sprintf("0x%X", p.HopLimit),
			}
			for k, v := range want {
				if sq[k] != v {
					t.Errorf("path h2→%s: %s is %q by saquery, %q by us", h, k, sq[k], v)
				}
			}
			if p.DLID == 0 || p.SLID == 0 || p.MTU == 0 {
				t.Errorf("path h2→%s: %+v has no LIDs or MTU", h, p)
			}
		}
	})

	t.Run("wrong Q_Key", func(t *testing.T) {
		f := f.on(t)
		line := f.fail("h3", "--qkey", "0x1234", "join", bcastMGID)
		if !strings.HasPrefix(line, "saclient: SA Set MCMemberRecord: status 0x0200 ERR_REQ_INVALID") {
			t.Errorf("refused join said %q", line)
		}
	})

	t.Run("no SM", func(t *testing.T) {
		f := f.on(t)
		f.stopSM()
		t0 := time.Now()
		line := f.fail("h2", "--timeout", "200ms", "--retries", "2", "path", gids["h3"])
		took := time.Since(t0)
		want := "saclient: SA Get PathRecord to SM LID 1: no answer after 3 tries of 200ms each: is the subnet manager running?"
		if line != want {
			t.Errorf("with no SM:\n%q\nwant\n%q", line, want)
		}
		if took < 600*time.Millisecond || took > 5*time.Second {
			t.Errorf("3 tries of 200 ms took %v", took)
		}
	})
	t.Logf("build %v, fabric up %v, checks %v, total %v", built.Sub(start).Round(time.Millisecond),
		up.Sub(built).Round(time.Millisecond), time.Since(up).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// on is the fabric for a subtest: its failures are the subtest's.
func (f *fabric) on(t *testing.T) *fabric {
	g := *f
	g.t = t
	return &g
}

type group struct {
	MGID        string `json:"mgid"`
	PortGID     string `json:"port_gid"`
	QKey        uint32 `json:"qkey"`
	MLID        uint16 `json:"mlid"`
	MTU         uint8  `json:"mtu"`
	MTUSelector uint8  `json:"mtu_selector"`
	Rate        uint8  `json:"rate"`
	PKey        uint16 `json:"pkey"`
	JoinState   uint8  `json:"join_state"`
}

// core drops what the test does not pin down (the rate is the links').
func (g group) core() group { g.Rate = 0; return g }

// up starts ibsim on the topology and OpenSM on h1, each in this test's
// own simulated fabric, and waits for OpenSM's "SUBNET UP". Both are
// killed (SIGKILL: OpenSM's own exit can hang on a simulator already
// gone) when the test ends, however it ends.
func (f *fabric) up() {
	t := f.t
	net := filepath.Join(f.dir, "net")
	if err := os.WriteFile(net, []byte(topology), 0o644); err != nil {
		t.Fatal(err)
	}
	f.ibsim = exec.Command("ibsim", "-n", "-s", net)
	f.ibsim.Env = append(os.Environ(), "IBSIM_SOCKNAME="+f.sock)
	f.ibsim.SysProcAttr = orphanKill()
	f.ibsim.Dir = f.dir
	if err := f.ibsim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.ibsim.Process.Kill(); f.ibsim.Wait() })
	// ibsim listens once it has parsed the topology.
	if !f.wait(func() bool {
		b, _ := os.ReadFile("/proc/net/unix")
		return bytes.Contains(b, []byte("@"+f.sock+":ctl"))
	}) {
		t.Fatal("ibsim did not come up")
	}
	// Our own configuration, not /etc/opensm's: no sweeps after the
	// first, and a log flushed line by line, for "SUBNET UP" to be seen
	// when it happens.
	conf := filepath.Join(f.dir, "opensm.conf")
	if err := os.WriteFile(conf, []byte("force_log_flush TRUE\nsweep_interval 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(f.dir, "osm.log")
	f.osm = exec.Command("opensm", "-F", conf, "-f", log)
	f.osm.Env = append(f.env("h1"), "OSM_TMP_DIR="+f.dir, "OSM_CACHE_DIR="+f.dir)
	f.osm.SysProcAttr = orphanKill()
	f.osm.Dir = f.dir
	if err := f.osm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.stopSM)
	if !f.wait(func() bool {
		b, _ := os.ReadFile(log)
		return bytes.Contains(b, []byte("SUBNET UP"))
	}) {
		b, _ := os.ReadFile(log)
		t.Fatalf("OpenSM did not bring the subnet up:\n%s", b)
	}
}

// orphanKill has the kernel kill a daemon we start if the test binary
// dies without its cleanups (go test's timeout panics, a SIGKILL).
func orphanKill() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }

func (f *fabric) stopSM() {
	if f.osm != nil && f.osm.ProcessState == nil {
		f.osm.Process.Kill()
		f.osm.Wait()
	}
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

// run runs cmd on node host, killed if it takes 20 s.
func (f *fabric) run(host string, cmd *exec.Cmd) (string, string, error) {
	cmd.Env = f.env(host)
	cmd.Dir = f.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	stop := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	stop.Stop()
	return out.String(), errb.String(), err
}

// json runs saclient on host and decodes its answer into v.
func (f *fabric) json(host string, v any, args ...string) {
	f.t.Helper()
	out, errs, err := f.run(host, exec.Command(f.client, args...))
	if err != nil {
		f.t.Fatalf("%s: saclient %s: %v: %s", host, strings.Join(args, " "), err, errs)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(out), v); err != nil {
			f.t.Fatalf("%s: saclient %s printed %q: %v", host, strings.Join(args, " "), out, err)
		}
	}
}

// fail runs saclient on host, wants it to fail, and returns its one line.
func (f *fabric) fail(host string, args ...string) string {
	f.t.Helper()
	out, errs, err := f.run(host, exec.Command(f.client, args...))
	if err == nil {
		f.t.Fatalf("%s: saclient %s succeeded: %s", host, strings.Join(args, " "), out)
	}
	if strings.Count(errs, "\n") != 1 || out != "" {
		f.t.Errorf("%s: saclient %s: want one line on stderr, got %q and stdout %q", host, strings.Join(args, " "), errs, out)
	}
	return strings.TrimSuffix(errs, "\n")
}

// diag runs an infiniband-diags program on host.
func (f *fabric) diag(host string, cmd *exec.Cmd) string {
	f.t.Helper()
	out, errs, err := f.run(host, cmd)
	if err != nil {
		f.t.Fatalf("%s: %s: %v: %s%s", host, strings.Join(cmd.Args, " "), err, out, errs)
	}
	return out
}

func (f *fabric) switchLID() string {
	out := f.diag("h4", exec.Command("ibswitches"))
	m := regexp.MustCompile(`"sw1".* lid (\d+)`).FindStringSubmatch(out)
	if m == nil {
		f.t.Fatalf("ibswitches: no sw1:\n%s", out)
	}
	return m[1]
}

// mcastPorts reads ibroute -M's row for mlid: the switch ports it
// forwards to, "" when it has no row.
func (f *fabric) mcastPorts(swLID string, mlid uint16) string {
	f.t.Helper()
	out := f.diag("h4", exec.Command("ibroute", "-M", swLID))
	lines := strings.Split(out, "\n")
	var header string
	for _, l := range lines {
		if strings.Contains(l, "Ports:") {
			header = l
		}
		if !strings.HasPrefix(l, fmt.Sprintf("0x%04x ", mlid)) {
			continue
		}
		// An x under a port number in the header is a member port.
		var ports []string
		for i, c := range header {
			if c >= '0' && c <= '9' && (i+1 >= len(header) || header[i+1] == ' ') && i < len(l) && l[i] == 'x' {
				j := strings.LastIndex(header[:i+1], " ")
				ports = append(ports, header[j+1:i+1])
			}
		}
		return strings.Join(ports, " ")
	}
	return ""
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
