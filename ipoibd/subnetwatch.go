package main

import (
	"log/slog"
	"time"

	"github.com/ipoibd/ipoibd/softib"
	"github.com/ipoibd/ipoibd/umadsa"
)

// subnetPollInterval is how often an InfiniBand-link softib port is read
// from its SMA. On hardware the HCA raises an async event when the SM
// moves the port; ibsim's libumad2sim.so raises none and fills the sysfs
// umad_get_port reads only once, at start, so the port's own SMA is asked
// by SMP on this bounded poll instead: a change is seen within about this
// long, at the cost of two SMPs per interval.
const subnetPollInterval = 500 * time.Millisecond

// watchedPort is an InfiniBand-link softib port with the goroutine that
// follows what the subnet manager assigns it (watchSubnet). Closing it
// stops the goroutine first.
type watchedPort struct {
	*softib.Device
	stop chan struct{}
	done chan struct{}
}

// Close stops the watch, then closes the device.
func (w *watchedPort) Close() error {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	return w.Device.Close()
}

// portReader reads the port as the SM left it (*umadsa.SMAPort).
type portReader interface {
	Query() (umadsa.PortInfo, error)
	Close() error
}

// watchSubnet starts following the port: every interval it reads the
// port from its SMA and hands a changed assignment to dev.SetSubnet,
// which raises the events the interface follows as on a ConnectX port
// (paths asked again, groups joined again, connections made again when
// our LID moved). A port the SMA reports not ACTIVE is set down
// (softib's SetPortActive), as an HCA raises PORT_ERR, and up again when
// it is ACTIVE, as PORT_ACTIVE: the interface follows that as the
// kernel's ipoib does, joining every group again (the SM may have dropped
// our memberships while the port was down). No client reregister is
// made up for it: ibsim keeps none of the SM's ClientReregister bits, so
// a reading never carries one. The reader is closed when the watch stops.
func watchSubnet(dev *softib.Device, r portReader, interval time.Duration, log *slog.Logger) *watchedPort {
	w := &watchedPort{Device: dev, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer r.Close()
		f := subnetFollower{dev: dev, log: log}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			pi, err := r.Query()
			f.take(pi, err)
		}
	}()
	return w
}

// subnetFollower turns readings of the port into SetSubnet calls.
type subnetFollower struct {
	dev    *softib.Device
	log    *slog.Logger
	down   bool // the last reading found the port not active
	failed bool // the last reading failed (logged once until it works)
}

// take follows one reading of the port.
func (f *subnetFollower) take(pi umadsa.PortInfo, err error) {
	if err != nil {
		if !f.failed {
			f.log.Warn("reading the port from its SMA failed; the subnet's changes are not followed until it works", "err", err)
		}
		f.failed = true
		return
	}
	if f.failed {
		f.log.Info("reading the port from its SMA works again")
		f.failed = false
	}
	if !pi.Active || pi.LID == 0 {
		if !f.down {
			f.log.Warn("the port is not active: waiting for the subnet manager", "state", pi.State, "lid", pi.LID)
			f.setActive(false)
		}
		f.down = true
		return
	}
	for i, k := range pi.PKeys {
		if !k.Valid() {
			f.log.Error("the SM's P_Key table has a gap, which softib cannot hold: keeping the old assignment", "index", i)
			return
		}
	}
	ev, err := f.dev.SetSubnet(softib.Subnet{LID: pi.LID, LMC: pi.LMC, SMLID: pi.SMLID, PKeys: pi.PKeys})
	if f.down {
		// After the new assignment: the interface asks its paths and
		// joins again from the port as it is now.
		f.log.Info("the SMA reports the port ACTIVE again", "lid", pi.LID, "sm_lid", pi.SMLID)
		f.setActive(true)
		f.down = false
	}
	switch {
	case err != nil:
		f.log.Error("the SM's assignment of the port is not one softib can take: keeping the old one", "lid", pi.LID, "lmc", pi.LMC, "sm_lid", pi.SMLID, "err", err)
	case ev != 0:
		f.log.Info("the subnet manager changed the port", "events", ev.String(), "lid", pi.LID, "lmc", pi.LMC, "sm_lid", pi.SMLID, "pkeys", len(pi.PKeys))
	}
}

// setActive hands the port's state to the device.
func (f *subnetFollower) setActive(active bool) {
	if err := f.dev.SetPortActive(active); err != nil {
		f.log.Error("setting the port's state", "active", active, "err", err)
	}
}
