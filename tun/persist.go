package tun

import (
	"fmt"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/netdev"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Persistent devices: a child's TUN outlives the daemon that serves it
// (TUNSETPERSIST), so that a pod keeps its interface, addresses and
// routes while the daemon restarts; the next daemon re-attaches it by
// name (TUNSETIFF in the device's namespace, with the flags it was made
// with: multiqueue and the virtio-net header must match) and serves it
// again. Between the two the kernel holds the link with no queue
// attached: its carrier is off and what is sent to it is dropped.

// persistState is what a Device knows of its persistence.
type persistState struct {
	on      bool        // TUNSETPERSIST 1 is set
	adopted bool        // re-attached, not made
	keep    atomic.Bool // Close leaves the device (Keep)
}

// openFlags are the TUNSETIFF flags to open cfg.Name with. Without Adopt,
// or without such a link, they are those of a new device and an existing
// link is refused; with Adopt, an existing persistent TUN with a
// virtio-net header is re-attached with its own multiqueue flag, and
// cfg.Queues lowered to 1 if it has a single queue.
func openFlags(cfg *Config) (flags uint16, adopt bool, err error) {
	flags = unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR
	l, err := netlink.LinkByName(cfg.Name)
	if err != nil {
		if cfg.Queues > 1 {
			flags |= unix.IFF_MULTI_QUEUE
		}
		return flags, false, nil
	}
	if !cfg.Adopt {
		return 0, false, fmt.Errorf("tun: interface %s already exists", cfg.Name)
	}
	t, ok := l.(*netlink.Tuntap)
	switch {
	case !ok || t.Mode != netlink.TUNTAP_MODE_TUN:
		return 0, false, fmt.Errorf("tun: interface %s already exists and is not a TUN device (%s)", cfg.Name, l.Type())
	case t.NonPersist:
		return 0, false, fmt.Errorf("tun: interface %s already exists and is not persistent: another process serves it", cfg.Name)
	case t.Flags&netlink.TUNTAP_VNET_HDR == 0 || t.Flags&netlink.TUNTAP_NO_PI == 0:
		return 0, false, fmt.Errorf("tun: interface %s already exists, a TUN device not made by ipoibd (flags %#x)", cfg.Name, t.Flags)
	case t.Queues > 0: // a multiqueue one's; TUNSETIFF refuses a served single-queue one (EBUSY)
		return 0, false, fmt.Errorf("tun: interface %s is served by another process (%d queues attached)", cfg.Name, t.Queues)
	}
	if t.Flags&netlink.TUNTAP_MULTI_QUEUE != 0 {
		flags |= unix.IFF_MULTI_QUEUE
	} else {
		cfg.Queues = 1
	}
	return flags, true, nil
}

// setPersist marks a device made or adopted persistent (on), or one
// adopted as not persistent any more (!on: it goes with Close).
func (d *Device) setPersist(on, adopted bool) error {
	d.persist.adopted = adopted
	if !on && !adopted {
		return nil
	}
	v := 0
	if on {
		v = 1
	}
	if err := d.ioctlQueue0(unix.TUNSETPERSIST, v); err != nil {
		return fmt.Errorf("tun: %s persist %v: %w", d.name, on, err)
	}
	d.persist.on = on
	return nil
}

// ioctlQueue0 issues an ioctl taking an int on the device's first queue.
func (d *Device) ioctlQueue0(req uint, v int) error {
	var ioErr error
	err := d.queues[0].rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetInt(int(fd), req, v)
	})
	if err != nil {
		return err
	}
	return ioErr
}

// Adopted reports whether the device was re-attached, not made.
func (d *Device) Adopted() bool { return d.persist.adopted }

// Persistent reports whether the device outlives its file descriptors.
func (d *Device) Persistent() bool { return d.persist.on }

// Keep makes Close leave a persistent device in place (the daemon
// restarts and will adopt it): its carrier goes off, its addresses and
// routes stay.
func (d *Device) Keep() { d.persist.keep.Store(true) }

// releasePersist readies Close: a kept device has its carrier turned
// off, any other persistent one stops being persistent, so that closing
// its queues removes it.
func (d *Device) releasePersist() {
	if !d.persist.on {
		return
	}
	if d.persist.keep.Load() {
		_ = d.SetCarrier(false)
		return
	}
	if d.ioctlQueue0(unix.TUNSETPERSIST, 0) == nil {
		d.persist.on = false
	}
}

// NetdevOptions are OpenNetdevWith's: Config's Persist and Adopt.
type NetdevOptions struct{ Persist, Adopt bool }

// OpenNetdevWith is OpenNetdev with options: a device that outlives the
// daemon (Keep, then Close), re-attached if an earlier daemon left one
// in ns. The netdev's Adopted, Persistent and Keep are Device's; see
// Persistence.
func OpenNetdevWith(cfg netdev.Config, ns string, o NetdevOptions) (netdev.Netdev, error) {
	return openNetdev(cfg, ns, o.Persist, o.Adopt)
}

// Persistence is what a netdev OpenPersistentNetdev opened answers
// beyond netdev.Netdev.
type Persistence interface {
	Adopted() bool
	Persistent() bool
	Keep()
}

// Unserved names the persistent TUN devices made as ipoibd makes them
// (virtio-net header, no packet information) that no process serves, in
// namespace ns (as OpenNetdev reads it; empty: the caller's): children an
// earlier daemon left that no daemon took back. A multiqueue device is
// unserved with no queue attached; of a single-queue one the kernel
// reports no queue count, so its carrier being off stands for that (a
// served one whose port is down looks the same: the caller leaves out
// those it serves).
func Unserved(ns string) (names []string, err error) {
	var h *netns.NsHandle
	if ns != "" {
		nh, err := openNetns(ns)
		if err != nil {
			return nil, err
		}
		defer nh.Close()
		h = &nh
	}
	err = inNetns(h, func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			t, ok := l.(*netlink.Tuntap)
			if !ok || t.Mode != netlink.TUNTAP_MODE_TUN || t.NonPersist || t.Flags&netlink.TUNTAP_VNET_HDR == 0 || t.Flags&netlink.TUNTAP_NO_PI == 0 {
				continue
			}
			mq := t.Flags&netlink.TUNTAP_MULTI_QUEUE != 0
			if (mq && t.Queues == 0) || (!mq && l.Attrs().RawFlags&unix.IFF_LOWER_UP == 0) {
				names = append(names, l.Attrs().Name)
			}
		}
		return nil
	})
	return names, err
}
