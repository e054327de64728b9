package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/ipoibd/ipoibd/counterdoc"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/softib"
)

// run is the run command: the flags read and checked, then the daemon
// opened and served until a signal ends it.
func run(args []string, out io.Writer) error {
	s, err := parseSettings(args)
	switch {
	case err != nil:
		return withExit(exitUsage, err)
	case s.help:
		usage(out)
		return nil
	case s.version:
		fmt.Fprintln(out, version())
		return nil
	}
	log := slog.New(logHandler(os.Stderr, s.logLevel))
	tightenGC()
	stopProfiling, err := startProfiling()
	if err != nil {
		return err
	}
	defer stopProfiling()
	if s.provider == providerSoftib {
		notify := newNotifier(log)
		for _, sc := range append([]softib.Config{s.softib}, s.softibMore...) {
			if err := awaitUnderlay(sc.Addr, s.underlayWait, log, func(st string) { notify.send("STATUS=" + st) }); err != nil {
				return err
			}
		}
	}
	d, err := openDaemon(s, log)
	if err != nil {
		return err
	}
	metricsSrv, err := startMetrics(s.metricsListen, s.perPeer, d.interfaces, log)
	if err != nil {
		_ = d.Close()
		return err
	}
	lost := serve(d, log)
	_ = metricsSrv.Close()
	defer d.finish()
	if lost != nil {
		_ = d.Close()
		return withExit(exitLost, lost)
	}
	return d.Close()
}

// daemonGCPercent is the garbage collector's target for the daemon: the
// heap may grow by half its live size between collections, not by all of
// it (Go's default, 100). The datapath allocates nothing in steady state,
// so collections come only with the control plane's work (connection
// setups, neighbor churn) and a tighter target costs CPU only there. What
// it buys is memory per connection: with 3,000 connections, 2.0–2.1 KiB
// of RSS each against 2.2–2.5 KiB at 100, with setups no slower.
const daemonGCPercent = 50

// tightenGC sets daemonGCPercent unless the operator chose with GOGC.
func tightenGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(daemonGCPercent)
	}
}

// openDaemon chooses the connection service, opens the provider's port
// and on it the first interface and the --child ones. On error nothing
// stays open.
func openDaemon(s settings, log *slog.Logger) (*daemon, error) {
	cfg := s.iface
	cfg.Log = log
	choice, err := chooseConnService(s.provider, s.connService, s.peers, cfg.Mode, kernelCMLoaded)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Mode == ipoib.Connected && choice.SendOnly:
		cfg.SendOnly = true
	case cfg.Mode == ipoib.Connected && !choice.Advertise:
		cfg.Mode = ipoib.Datagram
	}
	dev, pkeyHint, err := openProvider(s, choice, &cfg)
	if err != nil {
		return nil, err
	}
	more, err := openMorePorts(s, choice)
	if err != nil {
		_ = dev.Close()
		return nil, err
	}
	// Said once the port is open: a build without verbs fails first.
	if s.provider == providerVerbs {
		log.Info("connection service", "cm", orNone(choice.Service), "connected_mode", choice.Advertise, "why", choice.Why)
	}
	d, err := newDaemon(cfg, s.netns, dev, more, s.bonding, choice, pkeyHint)
	if errors.Is(err, ipoib.ErrIPv6NeverFits) && s.provider != providerVerbs {
		err = fmt.Errorf("%w (%s)", err, softibMTUHint)
	}
	if err != nil {
		return nil, err
	}
	defer close(d.ready)
	for _, c := range s.children {
		if _, err := d.addChild(c.req); err != nil {
			// A failed start leaves no --child behind, as before; pods'
			// children, not taken back yet, stay for a daemon that starts.
			d.rs.forGood = true
			_ = d.Close()
			return nil, fmt.Errorf("--child %q: %w", c.arg, err)
		}
	}
	d.adoptState()
	return d, nil
}

// openProvider opens the port s names and puts it in cfg. It returns the
// device, which the daemon closes, and where a P_Key missing from the
// port's table comes from.
func openProvider(s settings, choice connServiceChoice, cfg *ipoib.Config) (ib.Device, string, error) {
	if s.provider == providerVerbs {
		dev, err := openVerbs(s.verbs, s.busyPoll, choice, cfg)
		return dev, verbsPKeyHint, err
	}
	dev, err := openSoftib(s.softib, cfg)
	if s.softibIB {
		return dev, softibIBPKeyHint, err
	}
	return dev, softibPKeyHint, err
}

// openMorePorts opens the first interface's further ports (--underlay or
// --device given more than once): their devices, and on verbs the kernel's
// connection service and the SA's client each needs, as the first port's.
// On error none stays open.
func openMorePorts(s settings, choice connServiceChoice) ([]*morePort, error) {
	var out []*morePort
	fail := func(err error) ([]*morePort, error) {
		for _, p := range out {
			_ = p.close()
		}
		return nil, err
	}
	for _, sc := range s.softibMore {
		var cfg ipoib.Config
		dev, err := openSoftib(sc, &cfg)
		if err != nil {
			return fail(fmt.Errorf("--underlay %s: %w", sc.Addr, err))
		}
		out = append(out, &morePort{dev: dev})
	}
	for _, vp := range s.verbsMore {
		var cfg ipoib.Config
		dev, err := openVerbs(vp, s.busyPoll, choice, &cfg)
		if err != nil {
			return fail(fmt.Errorf("--device %s:%d: %w", vp.device, vp.port, err))
		}
		out = append(out, &morePort{dev: dev, conn: cfg.ConnService, subnet: cfg.Subnet})
	}
	return out, nil
}

// serve announces readiness to systemd and answers signals until one
// asks the daemon to stop, or the first interface is lost (deleted under
// the daemon): then the watchdog stops and the error says why, so that the
// daemon exits non-zero and systemd's Restart= applies.
func serve(d *daemon, log *slog.Logger) error {
	// Signals are caught before readiness is announced: a SIGHUP right
	// after READY=1 must not kill the daemon.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	iface := d.first()
	info := iface.Show()
	log.Info("up", "if", info.Name, "link_addr", info.LinkAddr, "mode", info.Mode, "mtu", info.MTU, "ud_mtu", info.UDMTU, "addrs", strings.Join(info.Addrs, ","))
	notify := newNotifier(log)
	notify.send("READY=1\nSTATUS=" + info.Name + " up, " + info.Mode + " mode, MTU " + strconv.Itoa(info.MTU))
	stopWatchdog := notify.watchdog(func() { iface.Show() })
	defer notify.send("STOPPING=1")
	defer stopWatchdog()
	for {
		select {
		case <-iface.Lost():
			return iface.LostErr()
		case <-d.rs.stop:
			log.Info("stopping for good (ipoibd stop): the children go too")
			d.rs.forGood = true
			return nil
		case s := <-sig:
			if s == syscall.SIGHUP {
				for _, i := range d.interfaces() {
					logState(log, i)
				}
				continue
			}
			log.Info("shutting down; children stay for the next daemon (ipoibd stop removes them)", "signal", s.String())
			return nil
		}
	}
}

// logState answers SIGHUP: one line with the interface's state, for an
// operator who has the journal but no shell in the namespace. Nothing is
// re-read; the daemon keeps running.
func logState(log *slog.Logger, iface netif) {
	info := iface.Show()
	drops, trouble := troubleSummary(iface.Stats())
	log.Info("state (SIGHUP: nothing re-read)", "if", info.Name, "mode", info.Mode, "mtu", info.MTU,
		"addrs", strings.Join(info.Addrs, ","), "neighbors", info.Neighbors, "candidates", info.Candidates,
		"connections", info.Conns, "drops", drops, "trouble", trouble)
}

// troubleSummary sums the drop counters (every one a loss: the counter
// table says so) and lists the counters above 0 whose value means trouble,
// as name=value; "" when there are none.
func troubleSummary(cs []ib.Counter) (drops uint64, trouble string) {
	var list []string
	for _, c := range cs {
		if c.Value == 0 || !counterdoc.IsTrouble(c.Name) {
			continue
		}
		if strings.Contains(c.Name, "drop") {
			drops += c.Value
		}
		list = append(list, fmt.Sprintf("%s=%d", c.Name, c.Value))
	}
	return drops, strings.Join(list, ",")
}
