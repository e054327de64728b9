package main

import (
	"fmt"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/umadsa"
	"github.com/ipoibd/ipoibd/verbs"
)

// verbsPKeyHint says where a P_Key missing from a real port's table comes
// from.
const verbsPKeyHint = "the subnet manager sets it"

// openVerbs opens the rdma-core port and puts it in cfg, with the kernel's
// connection service when that was chosen and, on InfiniBand, the subnet
// administrator's client; busyPoll is --busy-poll. On error nothing stays
// open.
func openVerbs(p verbsPort, busyPoll time.Duration, choice connServiceChoice, cfg *ipoib.Config) (ib.Device, error) {
	kernel := choice.Service == connServiceKernel
	dev, err := verbs.Open(verbs.Config{Device: p.device, Port: p.port, GIDIndex: -1, NoRDMACM: !kernel, BusyPoll: busyPoll})
	if err != nil {
		return nil, err
	}
	cfg.Device = dev
	if kernel {
		cfg.ConnService = kernelConnService(dev, choice.SendOnly)
	}
	// With ipoibd's own connection service the CM engine runs on the
	// device's MADs (ib_umad), as on softib (newDaemon). On InfiniBand
	// the SA's joins and paths are ours with either service: rdma_cm
	// resolves the routes of its own connections only, and nobody joins
	// the groups our UD QP needs.
	if dev.Port().LinkLayer == "InfiniBand" {
		sub, err := umadsa.OpenPortClient(p.device, p.port)
		if err != nil {
			_ = dev.Close()
			return nil, fmt.Errorf("the subnet administrator's client on %s port %d: %w", p.device, p.port, err)
		}
		cfg.Subnet = sub
	}
	return dev, nil
}
