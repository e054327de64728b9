package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
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

// readRoutes is the one place the forwarder reads the subnet's tables:
// every switch's, walked hop by hop (ibfwd.ReadSubnet), or with -switch
// one switch's alone (ibfwd.ReadSwitch).
func readRoutes(run func(args ...string) (string, error), swLID string) (ibfwd.Routes, error) {
	if swLID != "" {
		return ibfwd.ReadSwitch(run, swLID)
	}
	return ibfwd.ReadSubnet(run)
}

// runFabric forwards by the tables the fabric's SM programmed, read
// again every fc.refresh; a failed read keeps the tables it has.
func runFabric(addr netip.AddrPort, ports []string, fc fabricConfig, o outputs) error {
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
	routes, err := readRoutes(d.run, sw)
	if err != nil {
		return err
	}
	f, err := ibfwd.New(addr, routes)
	if err != nil {
		return err
	}
	defer f.Close()
	closeOutputs, err := o.start(f)
	if err != nil {
		return err
	}
	defer closeOutputs()
	for _, s := range ports {
		p, err := ibfwd.ParsePort(s)
		if err != nil {
			return err
		}
		if err := f.Register(p); err != nil {
			return err
		}
	}
	which := "every switch"
	if sw != "" {
		which = "switch LID " + sw
	}
	fmt.Printf("forwarding on %v for %d ports by the tables of %s (node %s)\n", f.Addr(), len(ports), which, fc.node)
	last := summary(routes)
	fmt.Println("tables:", last)
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
			// Said when it changes, so that a script can wait for the
			// group a join made to be forwarded.
			if s := summary(r); s != last {
				fmt.Println("tables:", s)
				last = s
			}
		}
	}()
	serveSignals(f, stop)
	<-done
	return nil
}

// summary says what tables r holds in one line: the switches read and
// the MLIDs they forward, sorted.
func summary(r ibfwd.Routes) string {
	mlids := map[uint16]bool{}
	switches := 0
	switch r := r.(type) {
	case *ibfwd.Subnet:
		switches = len(r.Switches)
		for _, sw := range r.Switches {
			for m := range sw.MFT {
				mlids[m] = true
			}
		}
	case *ibfwd.Switch:
		switches = 1
		for m := range r.MFT {
			mlids[m] = true
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d switches, MLIDs", switches)
	for _, m := range slices.Sorted(maps.Keys(mlids)) {
		fmt.Fprintf(&b, " %#x", m)
	}
	return b.String()
}
