package ipoib

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ipoib/netdev"
	"github.com/ipoibd/ipoibd/mtu"
	"github.com/ipoibd/ipoibd/tun"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The kernel side's interfaces live in package netdev, so that its fake
// (netdevtest) can implement them without importing ipoib; these aliases
// keep their names here.
type (
	Netdev     = netdev.Netdev
	Packets    = netdev.Packets
	Link       = netdev.Link
	Routes     = netdev.Routes
	LinkEvent  = netdev.LinkEvent
	LinkChange = netdev.LinkChange
)

// Link changes (netdev.LinkChange).
const (
	AddrsChanged    = netdev.AddrsChanged
	LinkState       = netdev.LinkState
	RoutesChanged   = netdev.RoutesChanged
	AddrsUnwatched  = netdev.AddrsUnwatched
	LinkUnwatched   = netdev.LinkUnwatched
	RoutesUnwatched = netdev.RoutesUnwatched
	LinkGone        = netdev.LinkGone
)

// OpenTUN is the daemon's Netdev: a TUN device whose link is read and
// set through netlink in cfg.Netns.
func OpenTUN(cfg tun.Config) (Netdev, error) {
	d, err := tun.Open(cfg)
	if err != nil {
		return nil, err
	}
	t := &tunNetdev{Device: d, ns: cfg.Netns, routes: mtu.NewRoutesAt(d.Netlink(), d.Index()), raw4: -1}
	// Send-only (IPPROTO_RAW receives nothing), in the device's namespace.
	// Without CAP_NET_RAW there is none and SendIPv4 fails: the caller
	// falls back to the device.
	t.raw4Err = inNetns(cfg.Netns, func() (err error) {
		t.raw4, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		return err
	})
	return t, nil
}

// tunNetdev is a TUN device and its link in the kernel.
type tunNetdev struct {
	*tun.Device
	ns     *netns.NsHandle // nil: the daemon's own namespace
	routes *mtu.Routes
	// raw4 is an IPPROTO_RAW socket in the device's namespace (SendIPv4);
	// -1 when it could not be made, raw4Err saying why, or once closed.
	// Under raw4Mu: the control goroutine may still send while Close runs.
	raw4Mu  sync.Mutex
	raw4    int
	raw4Err error
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

func (t *tunNetdev) Close() error {
	t.raw4Mu.Lock()
	if t.raw4 >= 0 {
		unix.Close(t.raw4)
		t.raw4, t.raw4Err = -1, errors.New("closed")
	}
	t.raw4Mu.Unlock()
	return t.Device.Close()
}

func (t *tunNetdev) Routes() Routes { return t.routes }

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
	err = inNetns(t.ns, func() error {
		groups, err = encap.KernelGroups(procNet, t.Name())
		return err
	})
	return groups, err
}

// Watch subscribes to netlink's address, link and route notifications in
// the device's namespace, whatever thread runs it. Without a namespace it
// is the daemon's own, and entering it (setns) would need CAP_SYS_ADMIN,
// which the service unit does not grant.
func (t *tunNetdev) Watch(stop <-chan struct{}) <-chan LinkEvent {
	addrs := make(chan netlink.AddrUpdate, 16)
	links := make(chan netlink.LinkUpdate, 16)
	routes := make(chan netlink.RouteUpdate, 64)
	out := make(chan LinkEvent, 16)
	var lost []LinkEvent
	if err := netlink.AddrSubscribeWithOptions(addrs, stop, netlink.AddrSubscribeOptions{Namespace: t.ns}); err != nil {
		lost, addrs = append(lost, LinkEvent{Change: AddrsUnwatched, Err: err}), nil
	}
	if err := netlink.LinkSubscribeWithOptions(links, stop, netlink.LinkSubscribeOptions{Namespace: t.ns}); err != nil {
		lost, links = append(lost, LinkEvent{Change: LinkUnwatched, Err: err}), nil
	}
	if err := netlink.RouteSubscribeWithOptions(routes, stop, netlink.RouteSubscribeOptions{Namespace: t.ns}); err != nil {
		lost, routes = append(lost, LinkEvent{Change: RoutesUnwatched, Err: err}), nil
	}
	go func() {
		send := func(e LinkEvent) bool {
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
			var e LinkEvent
			select {
			case <-stop:
				return
			case u, ok := <-addrs:
				switch {
				case !ok:
					addrs, e = nil, LinkEvent{Change: AddrsUnwatched, Err: ended}
				case u.LinkIndex == t.Index():
					e = LinkEvent{Change: AddrsChanged}
				default:
					continue
				}
			case u, ok := <-links:
				if !ok {
					links, e = nil, LinkEvent{Change: LinkUnwatched, Err: ended}
					break
				}
				a := u.Link.Attrs()
				if a == nil || a.Index != t.Index() {
					continue
				}
				if u.Header.Type == unix.RTM_DELLINK {
					e = LinkEvent{Change: LinkGone}
					break
				}
				if a.Name != "" && a.Name != t.Name() {
					t.Renamed(a.Name)
				}
				e = LinkEvent{Change: LinkState, MTU: a.MTU, Up: a.Flags&net.FlagUp != 0, Name: a.Name}
			case u, ok := <-routes:
				// Our own MTU host routes change nothing about next hops.
				switch {
				case !ok:
					routes, e = nil, LinkEvent{Change: RoutesUnwatched, Err: ended}
				case u.Protocol != mtu.Protocol:
					e = LinkEvent{Change: RoutesChanged}
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
