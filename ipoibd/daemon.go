package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ipoibd/ipoibd/bond"
	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/control"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/tun"
	"golang.org/x/sys/unix"
)

// daemon is one ipoibd process: one adapter port, its QP1 shared by the
// CM engines of the interfaces on the port, its receive pool (ipoib.Port:
// the registered slab, the SRQ, the receive CQ) shared by those
// interfaces — the one the flags describe and the P_Key children added at
// run time, like the kernel's create_child — each with its own control
// socket, UD QP, small rings, neighbors and connections.
type daemon struct {
	dev    ib.Device
	port   *ipoib.Port // over base.Device, handed to every interface
	mads   io.Closer   // QP1's MAD splitter; nil without ipoibd's own connection service
	choice connServiceChoice
	base   ipoib.Config // the first interface's: children start from it
	// netns is the namespace of the first interface and of children not
	// a pod's (--netns; "" for the daemon's own).
	netns string
	// pkeyHint says where a P_Key missing from the port's table comes from.
	pkeyHint string
	// more are the first interface's further ports (--underlay given more
	// than once): it and its children run over all of them (bond), as
	// policy says.
	more   []*morePort
	policy bond.Policy

	mu     sync.Mutex
	ifaces []*served // the first, then the children in the order made
	// making are the children being made, claimed by podChild's checks
	// before the slow part and released after it: children are made
	// concurrently, and two that clash cannot both pass the checks.
	making []*served
	closed bool // Close ran: a child made after it is closed at once
	// ready is closed once the command line's interfaces (the first and
	// the --child ones) are all made or the daemon failed to make them.
	// Control sockets answer only then, so that a script which waits for
	// `ipoibd show` to answer may use every one of them.
	ready chan struct{}
	rs    restartState // adopt.go
}

// served is one interface and its control socket.
type served struct {
	iface netif
	ctl   *controlServer // under daemon.mu once serving: a rename replaces it
	gone  bool           // the socket was closed for good (closeCtl)
	// A pod's child (control.ChildRequest.Netns) lives in another
	// namespace, which ns identifies, and is named by its owner; both
	// empty otherwise.
	netns string
	ns    nsID
	owner string
	// A child's request, for the state file, and its persistent netdev
	// (adopt.go); nil for the first interface.
	req      *control.ChildRequest
	nd       tun.Persistence
	replaces ib.LinkAddr // its link address before a restart (adopt.go)
	// While the child is being made (daemon.making): its name and P_Key,
	// and made, closed when it is served or failed.
	name string
	pkey ib.PKey
	made chan struct{}
}

// closeCtl closes s's control socket for good: a rename after it makes
// none.
func (d *daemon) closeCtl(s *served) {
	d.mu.Lock()
	ctl := s.ctl
	s.gone = true
	d.mu.Unlock()
	_ = ctl.Close()
}

// morePort is one of the first interface's further ports: its device,
// receive pool and connection service, as the daemon's own for the first.
type morePort struct {
	dev    ib.Device
	port   *ipoib.Port
	mads   io.Closer // nil without ipoibd's own connection service
	conn   cm.ServiceMaker
	subnet ipoib.Subnet // the port's SA client on InfiniBand (verbs), else nil
}

// close releases what the port holds.
func (p *morePort) close() error {
	var errs []error
	if p.port != nil {
		errs = append(errs, p.port.Close())
	}
	if p.mads != nil {
		errs = append(errs, p.mads.Close())
	}
	if c, ok := p.subnet.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(append(errs, p.dev.Close())...)
}

// newDaemon opens the first interface on dev (and the devices of more,
// its further ports) and starts serving it; on error it closes them.
func newDaemon(cfg ipoib.Config, netns string, dev ib.Device, more []*morePort, policy bond.Policy, choice connServiceChoice, pkeyHint string) (*daemon, error) {
	d := &daemon{dev: dev, choice: choice, base: cfg, netns: netns, pkeyHint: pkeyHint, policy: policy, more: more, ready: make(chan struct{})}
	if err := d.initRestart(); err != nil {
		d.closeMore()
		_ = dev.Close()
		return nil, err
	}
	port, err := ipoib.OpenPort(cfg.Device)
	if err != nil {
		d.closeMore()
		_ = dev.Close()
		return nil, err
	}
	d.port, d.base.Port = port, port
	if choice.Service == connServiceOwn && cfg.Mode == ipoib.Connected {
		var err error
		if d.mads, d.base.ConnService, err = ownConnService(dev); err != nil {
			d.closeMore()
			_ = dev.Close()
			return nil, err
		}
	}
	if err := d.openMore(); err != nil {
		d.Close()
		return nil, err
	}
	if _, err := d.add(d.base, nil); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// add opens an interface, its netdev first, and its control socket and
// starts it; s, if not nil, carries what the daemon knows of a pod's
// child, which lives in the pod's namespace.
func (d *daemon) add(cfg ipoib.Config, s *served) (netif, error) {
	netns := d.netns
	if s == nil {
		s = &served{}
	} else if s.netns != "" {
		netns = s.netns
	}
	cfg.Renamed = func(_, name string) { d.renamed(s, name) }
	// A cfg the port refuses fails here, before the kernel sees a TUN.
	nc, err := cfg.NetdevConfig()
	if err != nil {
		return nil, err
	}
	if cfg.Netdev, err = tun.OpenNetdevWith(nc, netns, netdevOptions(s)); err != nil {
		if netns != "" && errors.Is(err, unix.EPERM) {
			err = fmt.Errorf("%w (another network namespace needs CAP_SYS_ADMIN and setns(): under the systemd unit, its drop-in dist/ipoibd-netns.conf)", err)
		}
		return nil, err
	}
	d.opened(s, nc.Name, cfg.Netdev)
	cfg.Replaces = s.replaces
	iface, err := d.open(cfg) // closes the netdev on error
	if err != nil {
		return nil, err
	}
	ctl, err := listenControl(cfg.Name, iface, d)
	if err != nil {
		iface.Close()
		return nil, err
	}
	d.mu.Lock()
	if d.closed { // stopped while the child was made: nothing stays
		d.mu.Unlock()
		_ = ctl.Close()
		iface.Close()
		return nil, errors.New("the daemon is stopping")
	}
	s.iface, s.ctl = iface, ctl
	iface.Start()
	parent := len(d.ifaces) == 0
	d.ifaces = append(d.ifaces, s)
	d.mu.Unlock()
	if !parent {
		go d.dropWhenLost(iface)
	}
	if s.req != nil {
		d.saveState()
	}
	return iface, nil
}

// openMore opens the further ports' receive pools and connection
// services, as newDaemon does the first port's.
func (d *daemon) openMore() error {
	for _, p := range d.more {
		var err error
		if p.port, err = ipoib.OpenPort(p.dev); err != nil {
			return err
		}
		if d.mads != nil && p.conn == nil {
			if p.mads, p.conn, err = ownConnService(p.dev); err != nil {
				return err
			}
		}
	}
	return nil
}

// closeMore closes the further ports.
func (d *daemon) closeMore() error {
	var errs []error
	for _, p := range d.more {
		errs = append(errs, p.close())
	}
	d.more = nil
	return errors.Join(errs...)
}

// open makes the interface cfg describes on its netdev: over every port
// when there are several (bond.Bond, the first port the primary), P_Key
// children and pods' too, so that they fail over with the parent; else on
// the first port.
func (d *daemon) open(cfg ipoib.Config) (netif, error) {
	if len(d.more) == 0 {
		i, err := ipoib.New(cfg)
		if err != nil {
			return nil, err // not i: a nil *ipoib.Interface is no nil netif
		}
		return i, nil
	}
	legs := []ipoib.Config{cfg}
	for _, p := range d.more {
		l := cfg
		l.Device, l.Port, l.Subnet = p.dev, p.port, p.subnet
		if p.conn != nil {
			l.ConnService = p.conn
		}
		legs = append(legs, l)
	}
	b, err := bond.New(bond.Config{Netdev: cfg.Netdev, Legs: legs, Policy: d.policy, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// renamed moves s's control socket to the interface's new name, where
// `ipoibd show NEW` looks for it.
func (d *daemon) renamed(s *served, name string) {
	ctl, err := listenControl(name, s.iface, d)
	if err != nil {
		d.base.Log.Warn("control socket after a rename: still under the old name", "if", name, "err", err)
		return
	}
	d.mu.Lock()
	old := s.ctl
	if s.gone {
		old = ctl
	} else {
		s.ctl = ctl
	}
	d.mu.Unlock()
	_ = old.Close()
}

// parentName is the first interface's name now.
func (d *daemon) parentName() string {
	if f := d.first(); f != nil {
		return f.Name()
	}
	return d.base.Name
}

// dropWhenLost removes a child whose link was deleted under the daemon,
// as the kernel's child goes with its link; the first interface's loss
// ends the daemon instead (serve).
func (d *daemon) dropWhenLost(iface netif) {
	select {
	case <-iface.Lost():
	case <-iface.Closing():
		return
	}
	d.mu.Lock()
	k := slices.IndexFunc(d.ifaces, func(s *served) bool { return s.iface == iface })
	if k < 0 { // removed or closing already
		d.mu.Unlock()
		return
	}
	victim := d.ifaces[k]
	d.ifaces = slices.Delete(d.ifaces, k, k+1)
	d.mu.Unlock()
	d.base.Log.Warn("child lost: removed", "parent", d.parentName(), "err", iface.LostErr())
	d.closeCtl(victim)
	iface.Close()
	d.saveState()
}

// first returns the interface the flags describe (nil once closing).
func (d *daemon) first() netif {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.ifaces) == 0 {
		return nil
	}
	return d.ifaces[0].iface
}

// interfaces returns every interface served, the first one first.
func (d *daemon) interfaces() []netif {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]netif, len(d.ifaces))
	for k, s := range d.ifaces {
		out[k] = s.iface
	}
	return out
}

// children names the P_Key children of the first interface.
func (d *daemon) children() []control.ChildInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := []control.ChildInfo{}
	for _, s := range d.ifaces[min(1, len(d.ifaces)):] {
		out = append(out, control.ChildInfo{Name: s.iface.Name(), PKey: uint16(s.iface.PKey()), Netns: s.netns, Owner: s.owner})
	}
	return out
}

// addChild makes a P_Key child. As with the kernel's create_child, the
// partition's full-membership bit is set, and its name is the parent's
// with the P_Key in four hex digits. Its refusals carry control's codes.
func (d *daemon) addChild(r control.ChildRequest) (control.ChildReply, error) {
	pkey, err := ib.ParsePKey(r.PKey)
	if err != nil {
		return control.ChildReply{}, control.WithCode(control.CodeInvalid, err)
	}
	pkey |= ib.PKeyFullMember
	cfg := d.base
	cfg.PKey, cfg.Addrs, cfg.MTU = pkey, nil, r.MTU
	cfg.Name = r.Name
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("%s.%04x", d.parentName(), uint16(pkey))
	}
	if err := checkIfname(cfg.Name); err != nil {
		return control.ChildReply{}, control.WithCode(control.CodeInvalid, err)
	}
	if r.MTU < 0 {
		return control.ChildReply{}, control.Errorf(control.CodeInvalid, "MTU %d: must be positive", r.MTU)
	}
	if r.Mode != "" {
		if cfg.Mode, err = ipoib.ParseMode(r.Mode); err != nil {
			return control.ChildReply{}, control.WithCode(control.CodeInvalid, err)
		}
		if cfg.Mode == ipoib.Connected && d.base.Mode != ipoib.Connected {
			return control.ChildReply{}, control.Errorf(control.CodeInvalid, "connected mode: the daemon runs datagram mode (%s)", d.choice.Why)
		}
	}
	if cfg.Addrs, err = childAddrs(r.Addrs); err != nil {
		return control.ChildReply{}, control.WithCode(control.CodeInvalid, err)
	}
	if !slices.ContainsFunc(d.dev.Port().PKeys, func(p ib.PKey) bool { return p.Partition() == pkey.Partition() }) {
		return control.ChildReply{}, control.Errorf(control.CodeInvalid, "P_Key %v is not in the port's P_Key table %v (%s)", pkey, d.dev.Port().PKeys, d.pkeyHint)
	}
	s, err := d.podChild(r, cfg.Name, pkey)
	if err != nil {
		return control.ChildReply{}, err
	}
	defer d.made(s)
	if s.netns != "" {
		cfg = podConfig(cfg)
	}
	// The slow part (the TUN, netlink, QPs, the CM) runs with no lock
	// held: other children are made meanwhile.
	r.Name = cfg.Name // the state file keeps the request under the name made
	s.req = &r
	iface, err := d.add(cfg, s)
	if err != nil {
		return control.ChildReply{}, err
	}
	info := iface.Show()
	cfg.Log.Info("child up", "if", info.Name, "parent", d.parentName(), "pkey", ib.PKey(info.PKey), "link_addr", info.LinkAddr, "mode", info.Mode, "mtu", info.MTU, "netns", r.Netns, "owner", r.Owner)
	return control.ChildReply{Name: info.Name, LinkAddr: info.LinkAddr, MTU: info.MTU}, nil
}

// podChild checks r against the children served and being made and
// claims its place among those being made (daemon.making) until made
// releases it: what the daemon keeps of the child, with its namespace for
// a pod's. In its own namespace the daemon serves one child per
// partition, as the kernel's create_child; pods' children may share one,
// but not a name in one namespace, nor an owner.
func (d *daemon) podChild(r control.ChildRequest, name string, pkey ib.PKey) (*served, error) {
	c := &served{name: name, pkey: pkey, owner: r.Owner, made: make(chan struct{})}
	if r.Netns != "" {
		id, err := netnsID(r.Netns)
		if err != nil {
			return nil, control.WithCode(control.CodeInvalid, err)
		}
		c.netns, c.ns = r.Netns, id
	} else if r.Owner != "" {
		return nil, control.Errorf(control.CodeInvalid, "an owner names a child in another namespace: give its netns too")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, s := range slices.Concat(d.ifaces, d.making) {
		sName, sPKey := s.name, s.pkey
		if k < len(d.ifaces) {
			sName, sPKey = s.iface.Name(), s.iface.PKey()
		}
		switch {
		case c.netns == "" && s.netns == "" && sPKey.Partition() == pkey.Partition():
			return nil, control.Errorf(control.CodeExists, "%s already serves P_Key %v", sName, sPKey)
		case c.netns == "" && s.netns == "" && sName == name:
			return nil, control.Errorf(control.CodeExists, "%s exists", name)
		case c.netns != "" && s.netns != "" && s.ns == c.ns && sName == name:
			return nil, control.Errorf(control.CodeExists, "%s exists in %s", name, r.Netns)
		case c.owner != "" && s.owner == c.owner:
			return nil, control.Errorf(control.CodeExists, "owner %q already has %s in %s", c.owner, sName, s.netns)
		}
	}
	d.making = append(d.making, c)
	return c, nil
}

// made releases c's claim (podChild): it is served now, or failed.
func (d *daemon) made(c *served) {
	d.mu.Lock()
	d.making = slices.DeleteFunc(d.making, func(s *served) bool { return s == c })
	d.mu.Unlock()
	close(c.made)
}

// podIdleTimeout ends a pod's child's connections idle this long when
// --idle-timeout does not say: the kernel's IPOIB_CM_RX_TIMEOUT, after
// which it reaps an idle passive connection.
const podIdleTimeout = 512 * time.Second

// podConfig is a pod's child's configuration (its netdev is opened in the
// pod's namespace, served.netns): sharing the port's GID in its partition
// with other pods' children, so its peers there are told apart by UD QPN
// alone (no restart rule). A peer that crashed then leaves its
// connections to us until they idle out, as the kernel's stale timer
// reaps them.
func podConfig(cfg ipoib.Config) ipoib.Config {
	cfg.SharedGIDs = true
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = podIdleTimeout
	}
	return cfg
}

// childAddrs reads a child's addresses with prefix lengths.
func childAddrs(addrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, a := range addrs {
		p, err := parseIfAddr(a)
		if err != nil {
			return nil, fmt.Errorf("address %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// delChild removes a child named by its owner, or in the daemon's own
// namespace by name or P_Key: its connections are disconnected (DREQs go
// out) and its interface removed. A pod's child is named by its owner
// alone: its name and P_Key need not be unique.
func (d *daemon) delChild(which string) (string, error) {
	d.mu.Lock()
	// A child of this owner still being made is waited for, then removed:
	// a DEL that overtakes its ADD (whose client gave up) leaves nothing.
	for {
		k := slices.IndexFunc(d.making, func(s *served) bool { return s.owner != "" && s.owner == which })
		if k < 0 {
			break
		}
		made := d.making[k].made
		d.mu.Unlock()
		<-made
		d.mu.Lock()
	}
	var victim *served
	k := slices.IndexFunc(d.ifaces, func(s *served) bool { return s.owner != "" && s.owner == which })
	if k < 0 {
		k = slices.IndexFunc(d.ifaces, func(s *served) bool { return s.netns == "" && s.iface.Name() == which })
	}
	if k < 0 {
		if pkey, err := ib.ParsePKey(which); err == nil {
			k = slices.IndexFunc(d.ifaces, func(s *served) bool { return s.netns == "" && s.iface.PKey().Partition() == pkey.Partition() })
		}
	}
	switch {
	case k == 0:
		d.mu.Unlock()
		return "", control.Errorf(control.CodeNotChild, "%s is not a child: stop the daemon to remove it", which)
	case k < 0:
		d.mu.Unlock()
		return "", control.Errorf(control.CodeNoChild, "no child %q of %s", which, d.parentName())
	}
	victim = d.ifaces[k]
	d.ifaces = slices.Delete(d.ifaces, k, k+1)
	d.mu.Unlock()
	name := victim.iface.Name()
	d.closeCtl(victim)
	victim.iface.Close()
	d.saveState()
	d.base.Log.Info("child removed", "if", name, "parent", d.parentName())
	return name, nil
}

// undoChild removes the child addChild made for r, named name, whose
// client could not have the reply: nobody would know of it.
func (d *daemon) undoChild(r control.ChildRequest, name string) {
	which := r.Owner
	if which == "" {
		which = name
	}
	if _, err := d.delChild(which); err == nil {
		d.base.Log.Warn("child removed: its client did not take the reply", "if", name, "owner", r.Owner)
	}
}

// Close disconnects and removes every interface, children first, then
// releases the port.
func (d *daemon) Close() error {
	d.mu.Lock()
	ifaces := d.ifaces
	d.ifaces, d.closed = nil, true
	d.mu.Unlock()
	for k := len(ifaces) - 1; k >= 0; k-- {
		d.closeCtl(ifaces[k])
		d.keepForRestart(ifaces[k])
		ifaces[k].iface.Close()
	}
	var errs []error
	if d.port != nil {
		errs = append(errs, d.port.Close())
	}
	if d.mads != nil {
		errs = append(errs, d.mads.Close())
	}
	if c, ok := d.base.Subnet.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	errs = append(errs, d.closeMore(), d.dev.Close())
	return errors.Join(errs...)
}

// nsID identifies a network namespace: the device and inode of its file.
type nsID struct{ dev, ino uint64 }

// netnsID identifies the namespace at path, or named as ip netns names
// it, as tun.OpenNetdev reads it.
func netnsID(name string) (nsID, error) {
	path := name
	if !strings.Contains(name, "/") {
		path = "/run/netns/" + name
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsID{}, fmt.Errorf("network namespace %q: %w", name, err)
	}
	return nsID{dev: st.Dev, ino: st.Ino}, nil
}
