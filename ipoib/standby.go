package ipoib

import (
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
)

// An interface over several ports (package bond) is one Interface per
// port on a shared netdev: one active, the others on standby. A standby
// port is warm (its UD QP in the broadcast group, its connection service
// listening, its carrier following its port) but silent: peers learn only
// the active port's link address, as a bonded link shows only its active
// slave's hardware address (fail_over_mac=active).

// SetStandby puts the interface on standby (it stops answering for our
// addresses) or, with on false, makes it active again without announcing
// (Activate announces).
func (i *Interface) SetStandby(on bool) { i.standby.Store(on) }

// Standby reports whether the interface is on standby.
func (i *Interface) Standby() bool { return i.standby.Load() }

// Activate makes the interface the active one and announces every address
// at its link address, naming replaced (the port it takes over from) as
// the address it replaces: ipoibd peers that were told of us as siblings
// move at once, kernel peers take the gratuitous ARP and the unsolicited
// NA as they take any. It returns once the announcements are sent (or the
// interface is closed).
func (i *Interface) Activate(replaced ib.LinkAddr) {
	i.standby.Store(false)
	i.do(func() {
		i.ctl.replaces = replaced
		i.ctl.announceAll()
	})
}

// Announce announces every address again, as Activate did last: peers
// learn a changed sibling (SetSibling) at once. Nothing on standby.
func (i *Interface) Announce() { i.do(i.ctl.announceAll) }

func (c *control) announceAll() {
	for _, p := range c.addrs {
		c.announce(p.Addr())
	}
}

// SetSibling names the link address of the interface's other port in its
// ARP and ND (neigh.OptSiblingLinkAddr, the ARP sibling trailer); a zero
// address names none.
func (i *Interface) SetSibling(l ib.LinkAddr) {
	if l == (ib.LinkAddr{}) {
		i.sibling.Store(nil)
		return
	}
	i.sibling.Store(&l)
}

// Sibling is the link address SetSibling named, if any.
func (i *Interface) Sibling() (ib.LinkAddr, bool) {
	if p := i.sibling.Load(); p != nil {
		return *p, true
	}
	return ib.LinkAddr{}, false
}

// LinkLocal is the interface's IPv6 link-local address (Config.LinkLocal
// or its port GUID's).
func (i *Interface) LinkLocal() netip.Prefix { return i.port.linkLocal }

// DeviceName is the name of the adapter port's device.
func (i *Interface) DeviceName() string { return i.dev.Name() }
