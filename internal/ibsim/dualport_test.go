//go:build linux

package ibsim

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// dualPortTopology: d1 is a dual-port HCA, its port 1 on sw1 and its port
// 2 on sw2, the switches linked; p1 (a peer) and OpenSM's node sm on sw1.
const dualPortTopology = `Switch	8 "sw1"
[1]	"d1"[1]
[3]	"p1"[1]
[5]	"sm"[1]
[7]	"sw2"[7]

Switch	8 "sw2"
[2]	"d1"[2]
[7]	"sw1"[7]

Hca	2 "d1"
[1]	"sw1"[1]
[2]	"sw2"[2]

Hca	1 "p1"
[1]	"sw1"[3]

Hca	1 "sm"
[1]	"sw1"[5]
`

// TestDualPortHCAOnePortPerProcess pins why ipoibd refuses two ports on
// the simulated InfiniBand subnet (--softib-link ib with two --underlay):
// a process running as a node under libumad2sim.so is one simulator
// client, attached to its node's first port (ibsim's sim_ctl_new_client:
// node_get_port(node, 0)), and umad2sim makes one device with that port
// alone. Port 2 of a dual-port HCA is a live port of the subnet, which
// the process can read through its node's SMA, but never a port its MADs
// leave or arrive by: once port 1's link is cut, the process reaches no
// SA at all, so port 2 could join no group and ask no path, the very
// thing a failover to it needs. If this test fails, ibsim has changed and
// the second port may now be buildable.
func TestDualPortHCAOnePortPerProcess(t *testing.T) {
	Need(t, "ibstat", "smpquery", "saquery")
	f := UpWith(t, Options{Topology: dualPortTopology, SMNode: "sm", Console: true})
	run := func(host string, args ...string) (string, error) {
		out, errs, err := f.Run(host, exec.Command(args[0], args[1:]...))
		return out + errs, err
	}

	// The process sees one port: umad_get_port has no port 2.
	out := f.Output(t, "d1", exec.Command("ibstat"))
	if !strings.Contains(out, "Number of ports: 1") || strings.Contains(out, "Port 2:") {
		t.Fatalf("ibstat as d1 shows more than the first port (ibsim changed?):\n%s", out)
	}
	if out, err := run("d1", "ibstat", "ibsim0", "2"); err == nil {
		t.Fatalf("ibstat ibsim0 2 as d1 succeeded (ibsim changed?):\n%s", out)
	} else {
		t.Logf("ibstat ibsim0 2 as d1: %v: %s", err, firstLine(out))
	}

	// Its node's SMA answers for port 2 (attribute modifier 2): a port
	// of its own with its own LID, ACTIVE.
	port := func(n int) (lid, state string) {
		out := f.Output(t, "d1", exec.Command("smpquery", "-D", "portinfo", "0", fmt.Sprint(n)))
		return field(t, out, "Lid"), field(t, out, "LinkState")
	}
	lid1, st1 := port(1)
	lid2, st2 := port(2)
	if st1 != "Active" || st2 != "Active" || lid1 == lid2 {
		t.Fatalf("d1's ports by its SMA: port 1 LID %s %s, port 2 LID %s %s; want both Active with LIDs of their own", lid1, st1, lid2, st2)
	}
	p1 := field(t, f.Output(t, "p1", exec.Command("smpquery", "-D", "portinfo", "0", "1")), "Lid")
	// The path port 2 would send to p1 by: the SA answers whoever asks.
	path := []string{"saquery", "--src-to-dst", lid2 + ":" + p1}
	for _, h := range []string{"p1", "d1"} {
		if out, err := run(h, path...); err != nil || !strings.Contains(out, "dlid") {
			t.Fatalf("before the cut, %s as %s: %v\n%s", strings.Join(path, " "), h, err, out)
		}
	}

	// Port 1's link cut: port 2 stays ACTIVE and the SA still answers p1
	// for it, but nothing d1's process sends leaves the node.
	if out := f.Console(t, `Unlink "d1"[1]`); out != "" {
		t.Logf("ibsim Unlink: %s", out)
	}
	cut := time.Now()
	await(t, cut, "port 1 DOWN, port 2 Active", func() (bool, string) {
		_, st1 := port(1)
		_, st2 := port(2)
		return st1 == "Down" && st2 == "Active", fmt.Sprintf("port 1 %s, port 2 %s", st1, st2)
	})
	await(t, cut, "the SA answers p1 for port 2", func() (bool, string) {
		out, err := run("p1", path...)
		return err == nil && strings.Contains(out, "dlid"), firstLine(out)
	})
	out, err := run("d1", path...)
	if err == nil {
		t.Fatalf("with port 1 cut, the SA answered d1's process, which the limit says cannot be (ibsim changed?):\n%s", out)
	}
	t.Logf("with port 1 cut, %s as d1: %v: %s", strings.Join(path, " "), err, firstLine(out))

	// Port 1 back: the same process's query is answered again.
	if out := f.Console(t, `ReLink "d1"`); out != "" {
		t.Logf("ibsim ReLink: %s", out)
	}
	back := time.Now()
	await(t, back, "d1's process reaches the SA again", func() (bool, string) {
		out, err := run("d1", path...)
		return err == nil && strings.Contains(out, "dlid"), firstLine(out)
	})
}

// await polls ok until it holds, for at most 20 s from since: OpenSM's
// sweeps and ibsim's links tell nobody, so they are read again.
func await(t *testing.T, since time.Time, what string, ok func() (bool, string)) {
	t.Helper()
	for {
		done, last := ok()
		if done {
			t.Logf("%s after %.2f s", what, time.Since(since).Seconds())
			return
		}
		if time.Since(since) > 20*time.Second {
			t.Fatalf("not within 20 s: %s; last: %s", what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// field reads smpquery's "Name:....value" line.
func field(t *testing.T, out, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `:\.*(\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %s in:\n%s", name, out)
	}
	return m[1]
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
