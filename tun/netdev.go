package tun

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/netdev"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The interface's kernel side as package ipoib drives it (netdev.Netdev):
// the TUN device for packets, netlink for the link, a raw socket for ICMP
// errors from our own address.

// OpenNetdev is the daemon's netdev.Netdev: a TUN device made as cfg
// says in network namespace ns (a name as `ip netns` knows it, or a path;
// empty: the caller's own), whose link is read and set through netlink
// there. On error nothing is left behind.
func OpenNetdev(cfg netdev.Config, ns string) (netdev.Netdev, error) {
	return openNetdev(cfg, ns, false, false)
}

func openNetdev(cfg netdev.Config, ns string, persist, adopt bool) (_ netdev.Netdev, err error) {
	t := &tunNetdev{raw4: -1}
	if ns != "" {
		h, err := openNetns(ns)
		if err != nil {
			return nil, err
		}
		t.ns = &h
		defer func() {
			if err != nil {
				_ = h.Close()
			}
		}()
	}
	t.Device, err = Open(Config{Name: cfg.Name, MTU: cfg.MTU, Addrs: cfg.Addrs, LinkLocal: cfg.LinkLocal, Netns: t.ns, Offload: cfg.Offload, Queues: cfg.Queues, Persist: persist, Adopt: adopt})
	if err != nil {
		return nil, err
	}
	t.routes = NewRoutesAt(t.Netlink(), t.Index())
	// Send-only (IPPROTO_RAW receives nothing), in the device's namespace.
	// Without CAP_NET_RAW there is none and SendIPv4 fails: the caller
	// falls back to the device.
	t.raw4Err = t.InNetns(func() (err error) {
		t.raw4, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		return err
	})
	return t, nil
}

// openNetns opens the namespace the interface lives in, which the
// netdev's later work (raw socket, /proc, InNetns) enters from any thread.
func openNetns(name string) (h netns.NsHandle, err error) {
	if strings.Contains(name, "/") {
		h, err = netns.GetFromPath(name)
	} else {
		h, err = netns.GetFromName(name)
	}
	if err != nil {
		return h, fmt.Errorf("tun: network namespace %q: %w", name, err)
	}
	return h, nil
}

// tunNetdev is a TUN device and its link in the kernel.
type tunNetdev struct {
	*Device
	ns     *netns.NsHandle // nil: the daemon's own namespace; closed by Close
	routes *Routes
	// raw4 is an IPPROTO_RAW socket in the device's namespace (SendIPv4);
	// -1 when it could not be made, raw4Err saying why, or once closed.
	// Under raw4Mu: the control goroutine may still send while Close runs.
	raw4Mu  sync.Mutex
	raw4    int
	raw4Err error
	nsOnce  sync.Once
}

func (t *tunNetdev) SendIPv4(b []byte) error {
	if len(b) < 20 || b[0]>>4 != 4 {
		return errors.New("not an IPv4 packet")
	}
	t.raw4Mu.Lock()
	defer t.raw4Mu.Unlock()
	if t.raw4 < 0 {
		return fmt.Errorf("raw IPv4 socket: %w", t.raw4Err)
	}
	// A packet for one of our own addresses goes through lo; with lo down
	// (a fresh namespace) the kernel drops it without a word. The ioctl
	// asks the socket's namespace.
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(t.raw4, unix.SIOCGIFFLAGS, ifr); err != nil || ifr.Uint16()&unix.IFF_UP == 0 {
		return errors.New("lo is down in the interface's network namespace")
	}
	return unix.Sendto(t.raw4, b, 0, &unix.SockaddrInet4{Addr: [4]byte(b[16:20])})
}

// Close removes the device; the namespace handle goes with the last
// use of it, so a second Close does nothing more.
func (t *tunNetdev) Close() error {
	t.raw4Mu.Lock()
	if t.raw4 >= 0 {
		unix.Close(t.raw4)
		t.raw4, t.raw4Err = -1, errors.New("closed")
	}
	t.raw4Mu.Unlock()
	err := t.Device.Close()
	t.nsOnce.Do(func() {
		if t.ns != nil {
			_ = t.ns.Close()
		}
	})
	return err
}

func (t *tunNetdev) Routes() netdev.Routes { return t.routes }

// InNetns runs f in the device's namespace (as is in the daemon's own).
func (t *tunNetdev) InNetns(f func() error) error { return inNetns(t.ns, f) }

// State reads the link from the kernel (netlink in its namespace).
func (t *tunNetdev) State() (netdev.LinkStatus, error) {
	l, err := t.Netlink().LinkByIndex(t.Index())
	if err != nil {
		return netdev.LinkStatus{}, err
	}
	a := l.Attrs()
	return netdev.LinkStatus{Up: a.Flags&net.FlagUp != 0, Carrier: a.RawFlags&unix.IFF_LOWER_UP != 0, OperState: a.OperState.String()}, nil
}

func (t *tunNetdev) Gateway(dst netip.Addr) (netip.Addr, bool) {
	routes, err := t.Netlink().RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 || routes[0].LinkIndex != t.Index() {
		return netip.Addr{}, false
	}
	gw, ok := netip.AddrFromSlice(routes[0].Gw)
	return gw.Unmap(), ok
}

// Groups reads /proc's multicast memberships: a TUN device gets no notice
// when a socket joins a group.
func (t *tunNetdev) Groups() (groups []netip.Addr, err error) {
	procNet := "/proc/net"
	if t.ns != nil {
		procNet = "/proc/thread-self/net"
	}
	err = t.InNetns(func() error {
		groups, err = encap.KernelGroups(procNet, t.Name())
		return err
	})
	return groups, err
}

// Watch subscribes to netlink's address, link and route notifications in
// the device's namespace, whatever thread runs it. Without a namespace it
// is the daemon's own, and entering it (setns) would need CAP_SYS_ADMIN,
// which the service unit does not grant.
func (t *tunNetdev) Watch(stop <-chan struct{}) <-chan netdev.LinkEvent {
	addrs := make(chan netlink.AddrUpdate, 16)
	links := make(chan netlink.LinkUpdate, 16)
	routes := make(chan netlink.RouteUpdate, 64)
	out := make(chan netdev.LinkEvent, 16)
	var lost []netdev.LinkEvent
	if err := netlink.AddrSubscribeWithOptions(addrs, stop, netlink.AddrSubscribeOptions{Namespace: t.ns}); err != nil {
		lost, addrs = append(lost, netdev.LinkEvent{Change: netdev.AddrsUnwatched, Err: err}), nil
	}
	if err := netlink.LinkSubscribeWithOptions(links, stop, netlink.LinkSubscribeOptions{Namespace: t.ns}); err != nil {
		lost, links = append(lost, netdev.LinkEvent{Change: netdev.LinkUnwatched, Err: err}), nil
	}
	if err := netlink.RouteSubscribeWithOptions(routes, stop, netlink.RouteSubscribeOptions{Namespace: t.ns}); err != nil {
		lost, routes = append(lost, netdev.LinkEvent{Change: netdev.RoutesUnwatched, Err: err}), nil
	}
	go func() {
		send := func(e netdev.LinkEvent) bool {
			select {
			case out <- e:
				return true
			case <-stop:
				return false
			}
		}
		for _, e := range lost {
			if !send(e) {
				return
			}
		}
		ended := errors.New("netlink ended the subscription")
		for {
			var e netdev.LinkEvent
			select {
			case <-stop:
				return
			case u, ok := <-addrs:
				switch {
				case !ok:
					addrs, e = nil, netdev.LinkEvent{Change: netdev.AddrsUnwatched, Err: ended}
				case u.LinkIndex == t.Index():
					e = netdev.LinkEvent{Change: netdev.AddrsChanged}
				default:
					continue
				}
			case u, ok := <-links:
				if !ok {
					links, e = nil, netdev.LinkEvent{Change: netdev.LinkUnwatched, Err: ended}
					break
				}
				a := u.Link.Attrs()
				if a == nil || a.Index != t.Index() {
					continue
				}
				if u.Header.Type == unix.RTM_DELLINK {
					e = netdev.LinkEvent{Change: netdev.LinkGone}
					break
				}
				if a.Name != "" && a.Name != t.Name() {
					t.Renamed(a.Name)
				}
				e = netdev.LinkEvent{Change: netdev.LinkState, MTU: a.MTU, Up: a.Flags&net.FlagUp != 0, Name: a.Name}
			case u, ok := <-routes:
				// Our own MTU host routes change nothing about next hops.
				switch {
				case !ok:
					routes, e = nil, netdev.LinkEvent{Change: netdev.RoutesUnwatched, Err: ended}
				case u.Protocol != RouteProtocol:
					e = netdev.LinkEvent{Change: netdev.RoutesChanged}
				default:
					continue
				}
			}
			if !send(e) {
				return
			}
		}
	}()
	return out
}

// inNetns runs f on a thread in namespace ns (nil: as is). The thread that
// entered another namespace stays locked, so the runtime discards it
// afterwards instead of reusing it.
func inNetns(ns *netns.NsHandle, f func() error) error {
	if ns == nil {
		return f()
	}
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(*ns); err != nil {
			done <- fmt.Errorf("entering the interface's network namespace: %w", err)
			return
		}
		done <- f()
	}()
	return <-done
}
