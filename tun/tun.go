// Package tun is the TUN device ipoibd exposes as its network interface:
// created through songgao/water and configured through netlink (addresses,
// MTU, transmit queue length, up). The device is not persistent, so closing
// it removes the interface with every address and route the kernel hung on
// it; nothing is left behind when the daemon exits, also after SIGKILL.
package tun

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/songgao/water"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// DefaultTxQueueLen is long enough for 10 Gbit/s of 64 KiB packets in
// bursts; the kernel's default of 500 drops under iperf3.
const DefaultTxQueueLen = 10000

// Config describes the interface to create.
type Config struct {
	Name       string // e.g. "ib0"
	MTU        int
	TxQueueLen int // default DefaultTxQueueLen
	Addrs      []netip.Prefix
	// LinkLocal, when valid, is the interface's only IPv6 link-local
	// address: the kernel makes none of its own (see stopAddrGen).
	LinkLocal netip.Prefix
	// Netns is the network namespace to make the interface in (nil: the
	// caller's). The daemon's other sockets stay where the daemon runs.
	Netns *netns.NsHandle
}

// Device is an open TUN interface. Read and Write move one IP packet each;
// they may be called from different goroutines.
type Device struct {
	ifce  *water.Interface
	nl    *netlink.Handle // bound to the namespace the device was made in
	link  netlink.Link
	index int
}

// Open creates and configures the interface and brings it up. On error
// nothing is left behind.
func Open(cfg Config) (*Device, error) {
	if cfg.Name == "" || len(cfg.Name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("tun: interface name %q: want 1 to %d characters", cfg.Name, unix.IFNAMSIZ-1)
	}
	if cfg.TxQueueLen == 0 {
		cfg.TxQueueLen = DefaultTxQueueLen
	}
	if cfg.Netns != nil {
		// A TUN device belongs to the namespace of the thread that makes
		// it; its file descriptor works from anywhere afterwards. The
		// thread that enters the namespace is locked and never unlocked,
		// so the runtime discards it instead of reusing it elsewhere.
		type result struct {
			d   *Device
			err error
		}
		done := make(chan result)
		go func() {
			runtime.LockOSThread()
			if err := netns.Set(*cfg.Netns); err != nil {
				done <- result{err: fmt.Errorf("tun: entering the network namespace: %w", err)}
				return
			}
			in := cfg
			in.Netns = nil
			d, err := Open(in)
			done <- result{d, err}
		}()
		r := <-done
		return r.d, r.err
	}
	if _, err := netlink.LinkByName(cfg.Name); err == nil {
		return nil, fmt.Errorf("tun: interface %s already exists", cfg.Name)
	}
	ifce, err := water.New(water.Config{DeviceType: water.TUN, PlatformSpecificParams: water.PlatformSpecificParams{Name: cfg.Name}})
	if err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("tun: creating %s needs CAP_NET_ADMIN (run as root): %w", cfg.Name, err)
		}
		return nil, fmt.Errorf("tun: creating %s: %w", cfg.Name, err)
	}
	d := &Device{ifce: ifce}
	// Later calls may come from any thread, which may sit in another
	// network namespace: netlink goes through a handle bound to this one.
	// NewHandle opens its socket in this thread's namespace without a
	// setns (NewHandleAt would need CAP_SYS_ADMIN even for our own).
	// Routing only: a handle for every family would fail on kernels
	// without XFRM (minimal guests, some containers).
	d.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		_ = ifce.Close()
		return nil, fmt.Errorf("tun: netlink: %w", err)
	}
	if err := d.configure(cfg); err != nil {
		d.nl.Close()
		_ = ifce.Close()
		return nil, err
	}
	return d, nil
}

// Netlink returns the netlink handle of the device's network namespace.
func (d *Device) Netlink() *netlink.Handle { return d.nl }

func (d *Device) configure(cfg Config) error {
	link, err := d.nl.LinkByName(d.ifce.Name())
	if err != nil {
		return fmt.Errorf("tun: %s: %w", cfg.Name, err)
	}
	d.link, d.index = link, link.Attrs().Index
	if err := d.SetMTU(cfg.MTU); err != nil {
		return err
	}
	if err := d.nl.LinkSetTxQLen(link, cfg.TxQueueLen); err != nil {
		return fmt.Errorf("tun: %s txqueuelen %d: %w", cfg.Name, cfg.TxQueueLen, err)
	}
	addrs := cfg.Addrs
	if cfg.LinkLocal.IsValid() {
		if err := d.stopAddrGen(); err != nil {
			return err
		}
		addrs = append([]netip.Prefix{cfg.LinkLocal}, addrs...)
	}
	for _, p := range addrs {
		if err := d.AddAddr(p); err != nil {
			return err
		}
	}
	if err := d.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("tun: %s up: %w", cfg.Name, err)
	}
	return nil
}

// AddAddr adds an address. IPv6 addresses skip duplicate address detection:
// the daemon answers neighbor solicitations itself, the kernel never sees them.
func (d *Device) AddAddr(p netip.Prefix) error {
	a := &netlink.Addr{IPNet: prefixNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := d.nl.AddrAdd(d.link, a); err != nil {
		return fmt.Errorf("tun: %s address %v: %w", d.Name(), p, err)
	}
	return nil
}

// SetMTU sets the interface MTU.
func (d *Device) SetMTU(mtu int) error {
	if err := d.nl.LinkSetMTU(d.link, mtu); err != nil {
		return fmt.Errorf("tun: %s mtu %d: %w", d.Name(), mtu, err)
	}
	return nil
}

// Addrs returns the interface's addresses as the kernel has them now
// (including those an operator added with `ip addr`).
func (d *Device) Addrs() ([]netip.Prefix, error) {
	list, err := d.nl.AddrList(d.link, unix.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("tun: %s addresses: %w", d.Name(), err)
	}
	var out []netip.Prefix
	for _, a := range list {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return out, nil
}

// Name returns the interface name.
func (d *Device) Name() string { return d.ifce.Name() }

// Index returns the interface index.
func (d *Device) Index() int { return d.index }

// Read reads one IP packet into b.
func (d *Device) Read(b []byte) (int, error) { return d.ifce.Read(b) }

// Write writes one IP packet.
func (d *Device) Write(b []byte) (int, error) { return d.ifce.Write(b) }

// Close removes the interface; blocked Reads return an error.
func (d *Device) Close() error {
	d.nl.Close()
	return d.ifce.Close()
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
