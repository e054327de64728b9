package ipoib

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/ipoibd/ipoibd/ib"
)

// The run-time mode switch, as the kernel's sysfs `mode`: datagram mode
// sends everything over UD at the UD MTU, connected mode sets up
// connections and raises the MTU to 65520. As in the kernel, the link
// address and the connection service stay as they are, so peers that
// connect to us are still accepted in datagram mode; only what we send
// changes.

// Mode returns the interface's current mode.
func (i *Interface) Mode() Mode {
	if i.datagram.Load() {
		return Datagram
	}
	return Connected
}

// SetMode switches the interface to m. An interface opened in datagram
// mode has no connection service and cannot switch to connected.
func (i *Interface) SetMode(m Mode) error {
	if m == Connected && i.mgr == nil {
		return errors.New("connected mode: the interface was started in datagram mode, without a connection service (restart it with --mode connected)")
	}
	err := errors.New("the interface is closing")
	i.do(func() { err = i.ctl.setMode(m) })
	return err
}

func (c *control) setMode(m Mode) error {
	i := c.i
	if m == i.Mode() {
		return nil
	}
	mtu := ConnectedMTU
	if m == Datagram {
		mtu = min(i.mtu, i.port.udMTU)
	}
	if err := i.netdev.SetMTU(mtu); err != nil {
		return fmt.Errorf("setting the MTU to %d: %w", mtu, err)
	}
	i.datagram.Store(m == Datagram)
	if m == Datagram {
		// Our sends go back to UD, then every connection goes; peers in
		// connected mode may connect again and are accepted.
		for _, e := range i.neigh.All() {
			if p := e.Path(); p != nil && p.QP != nil {
				c.publish(e, c.udPath(e))
			}
		}
		for _, conn := range i.mgr.Connections() {
			i.mgr.Disconnect(c.now, conn.Peer, "datagram mode")
		}
	}
	i.log.Info("mode changed", "mode", m, "mtu", mtu, "was_mtu", i.mtu)
	// The link event of this MTU finds it applied: IPv6 is followed here.
	ipv6Back := c.ipv6Follows(i.mtu, mtu)
	i.mtu = mtu
	if ipv6Back && c.linkUp {
		c.restoreOwnAddrs("IPv6 on again: connected mode's MTU is " + strconv.Itoa(mtu))
	}
	if m == Datagram {
		c.republish() // no path is above the new link MTU: their routes go
		return nil
	}
	// Connect to the neighbors in use now. Their UD paths get no host
	// route at the UD MTU meanwhile: what is too big for UD waits for the
	// connection, as at first contact.
	for _, e := range i.neigh.All() {
		if e.Resolved() && e.Link.Flags&(ib.FlagRC|ib.FlagUC) != 0 {
			c.connect(e)
		}
	}
	return nil
}
