//go:build linux

package umadsa

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/internal/ibsim"
)

// The judge: OpenSM, the real subnet manager, on a fabric simulated by
// ibsim (internal/ibsim) answers our client (saclient, built with -tags
// rdma, which leaves through C's exit as a simulated node must) and is
// checked with infiniband-diags (saquery, ibroute).

const (
	bcastMGID = "ff12:401b:ffff::ffff:ffff"
	v4MGID    = "ff12:401b:ffff::ef01:203" // 239.1.2.3
	v6MGID    = "ff12:601b:ffff::1:ff00:2" // a solicited-node group
)

func TestOpenSM(t *testing.T) {
	start := time.Now()
	ibsim.Need(t, "saquery", "ibroute", "ibswitches", "gcc", "/usr/include/infiniband/umad.h")
	bin := filepath.Join(t.TempDir(), "saclient")
	if out, err := exec.Command("go", "build", "-tags", "rdma", "-o", bin, "../internal/testbed/saclient").CombinedOutput(); err != nil {
		t.Fatalf("building saclient: %v\n%s", err, out)
	}
	built := time.Now()
	f := ibsim.Up(t)
	sa := saclient{f, bin}
	up := time.Now()

	gids := map[string]string{}
	for _, h := range []string{"h1", "h2", "h3", "h4"} {
		var p struct {
			GID   string `json:"gid"`
			LID   int    `json:"lid"`
			SMLID int    `json:"sm_lid"`
			State int    `json:"state"`
		}
		sa.json(t, h, &p, "port")
		if p.State != 4 || p.LID == 0 || p.SMLID == 0 {
			t.Fatalf("%s: port %+v, want active with a LID and an SM", h, p)
		}
		gids[h] = p.GID
	}

	t.Run("broadcast group", func(t *testing.T) {
		var g group
		sa.json(t, "h2", &g, "join", bcastMGID)
		// OpenSM pre-creates it (OSM_IPOIB_BROADCAST_MGRP_QKEY, the first
		// MLID, MTU code 4 = 2048 as its default, exactly).
		want := group{MGID: bcastMGID, PortGID: gids["h2"], QKey: 0x0b1b, MLID: 0xc000, MTU: 4, MTUSelector: 2, PKey: 0xffff, JoinState: 1}
		if g.core() != want {
			t.Errorf("join answered %+v, want %+v", g.core(), want)
		}
		// saquery, asked independently, knows the group as we were told.
		out := f.Output(t, "h4", exec.Command("saquery", "-g", "--mgid", bcastMGID))
		for _, w := range []string{"Mlid....................0xC000", fmt.Sprintf("Mtu.....................0x%02X", 2<<6|g.MTU), "pkey....................0xFFFF"} {
			if !strings.Contains(out, w) {
				t.Errorf("saquery -g has no %q:\n%s", w, out)
			}
		}
	})

	swLID := f.SwitchLID(t)
	for _, mg := range []struct{ name, mgid string }{{"IPv4 group", v4MGID}, {"IPv6 group", v6MGID}} {
		t.Run(mg.name, func(t *testing.T) {
			// h2 creates it like the broadcast group, as the kernel's ipoib
			// does; h3 joins what is there.
			var a, b group
			sa.json(t, "h2", &a, "--like", bcastMGID, "join", mg.mgid)
			sa.json(t, "h3", &b, "join", mg.mgid)
			if a.MLID < 0xc000 || a.MLID == 0xc000 || a.QKey != 0x0b1b || a.MTU != 4 || a.PKey != 0xffff {
				t.Errorf("created %+v: want a new MLID with the broadcast group's Q_Key, MTU and P_Key", a)
			}
			if b.MLID != a.MLID || b.QKey != a.QKey || b.MTU != a.MTU || b.PortGID != gids["h3"] {
				t.Errorf("second member was told %+v, the creator %+v", b, a)
			}
			// The switch forwards the MLID to the members' ports (h2 on
			// switch port 2, h3 on 3) and to nobody else.
			if got := f.MulticastPorts(t, swLID, a.MLID); got != "2 3" {
				t.Errorf("ibroute -M: MLID %#x goes to ports %q, want \"2 3\"", a.MLID, got)
			}
			sa.json(t, "h2", nil, "leave", mg.mgid)
			sa.json(t, "h3", nil, "leave", mg.mgid)
			if got := f.MulticastPorts(t, swLID, a.MLID); got != "" {
				t.Errorf("ibroute -M: after both left MLID %#x still goes to ports %q", a.MLID, got)
			}
		})
	}

	t.Run("path records", func(t *testing.T) {
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
			sa.json(t, "h2", &p, "path", gids[h])
			out := f.Output(t, "h4", exec.Command("saquery", "-p", "--sgid-to-dgid", gids["h2"]+"-"+gids[h]))
			sq := ibsim.Dump(out)
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
		line := sa.fail(t, "h3", "--qkey", "0x1234", "join", bcastMGID)
		if !strings.HasPrefix(line, "saclient: SA Set MCMemberRecord: status 0x0200 ERR_REQ_INVALID") {
			t.Errorf("refused join said %q", line)
		}
	})

	t.Run("no SM", func(t *testing.T) {
		f.StopSM()
		t0 := time.Now()
		line := sa.fail(t, "h2", "--timeout", "200ms", "--retries", "2", "path", gids["h3"])
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

// saclient runs the SA client as a node of the fabric.
type saclient struct {
	f   *ibsim.Fabric
	bin string
}

// json runs saclient on host and decodes its answer into v (nil: the
// answer is not wanted).
func (c saclient) json(t *testing.T, host string, v any, args ...string) {
	t.Helper()
	c.f.JSON(t, host, v, exec.Command(c.bin, args...))
}

// fail runs saclient on host, wants it to fail, and returns its one line.
func (c saclient) fail(t *testing.T, host string, args ...string) string {
	t.Helper()
	out, errs, err := c.f.Run(host, exec.Command(c.bin, args...))
	if err == nil {
		t.Fatalf("%s: saclient %s succeeded: %s", host, strings.Join(args, " "), out)
	}
	if strings.Count(errs, "\n") != 1 || out != "" {
		t.Errorf("%s: saclient %s: want one line on stderr, got %q and stdout %q", host, strings.Join(args, " "), errs, out)
	}
	return strings.TrimSuffix(errs, "\n")
}
