package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/ipoibd/ipoibd/softib/ibfwd"
)

// defaultUmad2sim is where ibsim-utils installs libumad2sim.so.
const defaultUmad2sim = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"

// diagTimeout bounds one infiniband-diags command.
const diagTimeout = 10 * time.Second

// fabricConfig is how the tables are read from an ibsim fabric.
type fabricConfig struct {
	node     string // ibsim node the commands run as (SIM_HOST)
	umad2sim string
	swLID    string
	refresh  time.Duration
}

// diag runs infiniband-diags commands as an ibsim node: libumad2sim.so
// preloaded into them only (not into this process), each in a directory
// of its own for the fake sysfs umad2sim makes in its working directory.
type diag struct {
	fc  fabricConfig
	dir string
}

func (d *diag) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), diagTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+d.fc.umad2sim, "SIM_HOST="+d.fc.node)
	cmd.Dir = d.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// switchLID finds the first switch ibswitches lists.
var switchLID = regexp.MustCompile(`(?m)^Switch\s.* lid (\d+)`)

// readRoutes is the one place the forwarder reads the subnet's tables:
// one switch's, for now (ibfwd.ReadSwitch).
func readRoutes(run func(args ...string) (string, error), swLID string) (ibfwd.Routes, error) {
	return ibfwd.ReadSwitch(run, swLID)
}

// runFabric forwards by the tables the fabric's SM programmed, read
// again every fc.refresh; a failed read keeps the tables it has.
func runFabric(addr netip.AddrPort, ports []string, fc fabricConfig, capture string) error {
	if _, err := os.Stat(fc.umad2sim); err != nil {
		return fmt.Errorf("-umad2sim: %w (ibsim-utils installs it)", err)
	}
	dir, err := os.MkdirTemp("", "softib-ibfwd-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	d := &diag{fc: fc, dir: dir}
	sw := fc.swLID
	if sw == "" {
		out, err := d.run("ibswitches")
		if err != nil {
			return err
		}
		m := switchLID.FindStringSubmatch(out)
		if m == nil {
			return fmt.Errorf("ibswitches lists no switch:\n%s", out)
		}
		sw = m[1]
	}
	routes, err := readRoutes(d.run, sw)
	if err != nil {
		return err
	}
	f, err := ibfwd.New(addr, routes)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, s := range ports {
		p, err := ibfwd.ParsePort(s)
		if err != nil {
			return err
		}
		if err := f.Register(p); err != nil {
			return err
		}
	}
	if capture != "" {
		w, err := newCapture(capture)
		if err != nil {
			return err
		}
		defer w.Close()
		f.SetTap(w.tap)
	}
	fmt.Printf("forwarding on %v for %d ports by the tables of switch LID %s (node %s)\n", f.Addr(), len(ports), sw, fc.node)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if fc.refresh <= 0 {
			return
		}
		t := time.NewTicker(fc.refresh)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			r, err := readRoutes(d.run, sw)
			if err != nil {
				fmt.Fprintln(os.Stderr, "softib-ibfwd: reading the tables again (the old ones stay):", err)
				continue
			}
			f.SetRoutes(r)
		}
	}()
	serveSignals(f, stop)
	<-done
	return nil
}
