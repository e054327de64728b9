package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/control"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/tun"
)

// Children across a daemon restart. Every child's TUN (a --child one, a
// pod's) is persistent; the daemon keeps the state file (state.go) of
// what made each one. When the daemon exits to restart — SIGTERM or
// SIGINT, a lost first interface, or it dies (SIGKILL, the watchdog) —
// the children stay where they are with their addresses and routes,
// unserved (carrier off); the next daemon, this binary or a newer one,
// re-attaches them as it makes them again from the state file, and
// announces their addresses (gratuitous ARP, unsolicited NA: their link
// address has a new UD QPN). Only a stop for good (`ipoibd stop`, which
// the systemd unit's ExecStop runs on `systemctl stop` but not on
// `systemctl restart`) removes them, as `ipoibd child del` removes one.
// The first interface is not persistent: it goes and comes back with the
// daemon, as before.

// restartState is the daemon's part in that.
type restartState struct {
	path   string      // the state file
	header stateHeader // its first line
	// stop asks serve to stop for good (ipoibd stop); forGood, set before
	// Close, makes Close remove the children too.
	stop    chan struct{}
	forGood bool
	// loaded: the state file was read (adoptState), so it may be
	// written; until then the --child ones made at start would replace
	// the list of pods' children still to take back.
	loaded atomic.Bool
	// What the state file said at start (loadState): the children to
	// take back, what was wrong with it, and each child's link address
	// before the restart by stateKey.
	kids     []stateChild
	problems []stateProblem
	before   map[string]ib.LinkAddr
	// notTaken are the pods' children the state file listed that could
	// not be taken back though their namespace still exists: their
	// interfaces are there, served by none (under daemon.mu).
	notTaken []unservedInfo
}

// unservedInfo is an interface an earlier daemon left that none serves
// (`show`): it has no carrier and nothing reaches it.
type unservedInfo struct {
	Name  string `json:"name"`
	Netns string `json:"netns,omitempty"`
	Owner string `json:"owner,omitempty"`
	Why   string `json:"why"`
}

// errNamespaceGone: a pod's namespace went, and its interface with it.
var errNamespaceGone = errors.New("the pod's namespace is gone")

// stateKey names a child in its namespace.
func stateKey(netns, name string) string { return netns + "\x00" + name }

// initRestart names the daemon's state file: that of the first
// interface's name in its namespace.
func (d *daemon) initRestart() error {
	d.rs.stop = make(chan struct{}, 1)
	path := "/proc/self/ns/net"
	if d.netns != "" {
		path = d.netns
	}
	id, err := netnsID(path)
	if err != nil {
		return err
	}
	d.rs.header = stateHeader{Version: stateVersion, Parent: d.base.Name, NetnsCookie: ownNetnsCookie(), NetnsIno: id.ino, WrittenBy: version()}
	d.rs.path = statePath(stateDir(), d.base.Name, id.ino)
	d.loadState()
	return nil
}

// loadState reads the state file an earlier daemon left, before the
// --child ones are made: they are taken back too.
func (d *daemon) loadState() {
	f, err := os.Open(d.rs.path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		d.rs.problems = []stateProblem{{what: "unreadable: no child taken back", err: err}}
		return
	}
	h, kids, problems := readState(f)
	f.Close()
	d.rs.problems = problems
	if h.NetnsCookie != 0 && d.rs.header.NetnsCookie != 0 && h.NetnsCookie != d.rs.header.NetnsCookie {
		d.rs.problems = append(d.rs.problems, stateProblem{what: "left by a namespace that is gone: ignored", stale: true})
		return
	}
	d.rs.kids, d.rs.before = kids, map[string]ib.LinkAddr{}
	for _, c := range kids {
		if a, err := ib.ParseLinkAddr(c.LinkAddr); err == nil {
			d.rs.before[stateKey(c.Netns, c.Name)] = a
		}
	}
}

// netdevOptions is how s's netdev is opened: a child's persistent, and
// re-attached if an earlier daemon left it.
func netdevOptions(s *served) tun.NetdevOptions {
	return tun.NetdevOptions{Persist: s.req != nil, Adopt: s.req != nil}
}

// opened notes s's netdev, named name, as opened: a child's link address
// before the restart, if it was taken back.
func (d *daemon) opened(s *served, name string, nd any) {
	p, ok := nd.(tun.Persistence)
	if !ok || s.req == nil {
		return
	}
	s.nd = p
	if p.Adopted() {
		s.replaces = d.rs.before[stateKey(s.netns, name)]
		d.base.Log.Info("child taken back: its interface, addresses and routes stayed while no daemon served it", "if", name, "netns", s.netns, "owner", s.owner)
	}
}

// saveState writes the state file with the children served now; a
// failure is logged (the children still work; a restart would not take
// them back).
func (d *daemon) saveState() {
	if !d.rs.loaded.Load() {
		return
	}
	d.mu.Lock()
	var kids []stateChild
	var ifaces []netif
	for _, s := range d.ifaces {
		if s.req == nil {
			continue
		}
		c := stateChild{ChildRequest: *s.req}
		c.NetnsDev, c.NetnsIno = s.ns.dev, s.ns.ino
		kids, ifaces = append(kids, c), append(ifaces, s.iface)
	}
	d.mu.Unlock()
	for k, i := range ifaces {
		kids[k].LinkAddr = i.Show().LinkAddr
	}
	if err := writeState(d.rs.path, d.rs.header, kids); err != nil {
		d.base.Log.Warn("state file not written: a restart will not take the children back", "path", d.rs.path, "err", err)
	}
}

// adoptState makes again, re-attaching their interfaces, the children
// the state file lists that the daemon does not serve yet (the --child
// ones it made already). What it cannot take back is logged, one line
// each, and left: a namespace that is gone took its interface with it.
func (d *daemon) adoptState() {
	d.rs.loaded.Store(true)
	defer d.saveState()
	adoptAll(d, d.adoptOne)
	d.logUnserved()
}

// logUnserved names, one log line each, the children an earlier daemon
// left in the daemon's namespace that none serves now (not in the state
// file, or not taken back): their carrier is off and nothing reaches
// them until a child add of that name takes them back or ip link del
// removes them.
func (d *daemon) logUnserved() {
	for _, u := range d.unserved() {
		if u.Netns == "" {
			d.base.Log.Warn(unservedHere, "if", u.Name)
		}
	}
}

// unservedHere is why an interface in the daemon's namespace is unserved.
const unservedHere = "interface left by an earlier daemon, served by none (carrier off): ipoibd child add --name takes it back, ip link del removes it"

// unserved lists the interfaces an earlier daemon left that none serves
// now: those in the daemon's namespace as the kernel has them (a
// persistent TUN of ours with no queue attached), then the pods' children
// the state file listed that could not be taken back and still are not.
func (d *daemon) unserved() []unservedInfo {
	var out []unservedInfo
	names, err := tun.Unserved(d.netns)
	if err != nil {
		d.base.Log.Debug("listing unserved interfaces", "err", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range names {
		if !slices.ContainsFunc(d.ifaces, func(s *served) bool { return s.netns == "" && s.iface.Name() == n }) {
			out = append(out, unservedInfo{Name: n, Why: unservedHere})
		}
	}
	for _, u := range d.rs.notTaken {
		if !slices.ContainsFunc(d.ifaces, func(s *served) bool {
			return s.netns == u.Netns && (s.owner != "" && s.owner == u.Owner || s.iface.Name() == u.Name)
		}) {
			out = append(out, u)
		}
	}
	return out
}

// adoptAll logs what was wrong with the state file and takes back each
// child in it with adopt, logging those it cannot.
func adoptAll(d *daemon, adopt func(stateChild) error) {
	for _, p := range d.rs.problems {
		level := slog.LevelWarn
		if p.stale {
			level = slog.LevelInfo
		}
		d.base.Log.Log(context.Background(), level, "state file "+p.what, "path", d.rs.path, "err", p.err)
	}
	for _, c := range d.rs.kids {
		err := adopt(c)
		if err == nil {
			continue
		}
		d.base.Log.Warn("child not taken back", "if", c.Name, "pkey", c.PKey, "netns", c.Netns, "owner", c.Owner, "err", err)
		if c.Netns != "" && !errors.Is(err, errNamespaceGone) {
			d.mu.Lock()
			d.rs.notTaken = append(d.rs.notTaken, unservedInfo{Name: c.Name, Netns: c.Netns, Owner: c.Owner, Why: "not taken back: " + err.Error()})
			d.mu.Unlock()
		}
	}
}

// adoptOne makes c again unless the daemon serves it already.
func (d *daemon) adoptOne(c stateChild) error {
	d.mu.Lock()
	for _, s := range d.ifaces {
		if s.req != nil && s.req.Name == c.Name && s.req.Netns == c.Netns {
			d.mu.Unlock()
			return nil
		}
	}
	d.mu.Unlock()
	if err := d.checkNetns(c); err != nil {
		return err
	}
	_, err := d.addChild(c.ChildRequest)
	return err
}

// checkNetns checks that a pod's child's namespace is still the one it
// was made in.
func (d *daemon) checkNetns(c stateChild) error {
	if c.Netns == "" {
		return nil
	}
	id, err := netnsID(c.Netns)
	if err != nil {
		return fmt.Errorf("%w: %w", errNamespaceGone, err)
	}
	if c.NetnsIno != 0 && (id.ino != c.NetnsIno || id.dev != c.NetnsDev) {
		return fmt.Errorf("%w: %s names another namespace now", errNamespaceGone, c.Netns)
	}
	return nil
}

// keepForRestart leaves s's interface in place when the daemon closes
// it, unless the daemon stops for good.
func (d *daemon) keepForRestart(s *served) {
	if s.nd != nil && !d.rs.forGood {
		s.nd.Keep()
	}
}

// requestStop answers `ipoibd stop`: the daemon stops for good, removing
// its children, their state and its interface.
func (d *daemon) requestStop() (any, error) {
	select {
	case d.rs.stop <- struct{}{}:
	default:
	}
	return control.ChildReply{Name: d.parentName()}, nil
}

// finish is what the daemon does as it exits, after Close: a stop for
// good removes the state file (the children are gone); any other exit
// keeps it for the next daemon.
func (d *daemon) finish() {
	if !d.rs.forGood {
		return
	}
	if err := os.Remove(d.rs.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.base.Log.Warn("state file not removed", "path", d.rs.path, "err", err)
	}
}
