package ipoib

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/mtu"
	"github.com/ipoibd/ipoibd/offload"
	"github.com/ipoibd/ipoibd/tun"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Netdev is the interface as the kernel sees it: the packets it hands us
// and takes back, and its link (addresses, state, routes, groups). The
// daemon's is a TUN device configured over netlink (OpenTUN); tests give
// a channel-backed fake, so that they run without root.
type Netdev interface {
	Packets
	Link
}

// Packets is the kernel's packet I/O.
type Packets interface {
	// Queues is how many queues Read serves, each read by its own
	// goroutine.
	Queues() int
	// Read takes one IP packet from queue q, or a TSO/USO super-packet
	// that h describes, blocking until one comes or Close.
	Read(q int, b []byte, h *offload.Hdr) (int, error)
	// Write hands one IP packet to the kernel.
	Write(b []byte) (int, error)
	// WriteGSO hands the kernel one super-packet made of parts (GRO).
	WriteGSO(h offload.Hdr, parts [][]byte) (int, error)
	// Offloads reports whether the kernel hands over TCP (and so takes
	// coalesced TCP) and UDP super-packets.
	Offloads() (tso, uso bool)
	Close() error
}

// Link is the kernel's side of the interface beyond packets.
type Link interface {
	Name() string
	// Addrs are the link's addresses now (an operator may add some).
	Addrs() ([]netip.Prefix, error)
	// EnsureAddrs adds those of ps the link lacks and says how many.
	EnsureAddrs(ps []netip.Prefix) (int, error)
	SetMTU(mtu int) error
	SetCarrier(on bool) error
	// Gateway is the next hop of the kernel's route to dst, when that
	// route goes through a gateway on this link.
	Gateway(dst netip.Addr) (netip.Addr, bool)
	// Groups are the multicast groups the kernel's sockets joined on the
	// link.
	Groups() ([]netip.Addr, error)
	// Routes are the host routes that carry per-destination MTUs.
	Routes() Routes
	// Watch reports the link's changes until stop is closed.
	Watch(stop <-chan struct{}) <-chan LinkEvent
}

// Routes installs and removes per-destination MTU routes (mtu.Routes).
type Routes interface {
	Set(dst netip.Addr, mtu int) (installed bool, err error)
	SetMany(dests []mtu.Dest) (installed []bool, errs []error)
	Remove(dst netip.Addr) error
	Flush() error
}

// LinkEvent is one change Link.Watch reports.
type LinkEvent struct {
	Change LinkChange
	MTU    int   // LinkState: the link's MTU now
	Up     bool  // LinkState: administratively up
	Err    error // the *Unwatched changes: why
}

// LinkChange says what changed.
type LinkChange uint8

// Changes. An *Unwatched change means that kind is no longer reported.
const (
	AddrsChanged  LinkChange = iota
	LinkState                // MTU or up/down
	RoutesChanged            // a route not ours: next hops may have moved
	AddrsUnwatched
	LinkUnwatched
	RoutesUnwatched
)

// OpenTUN is the daemon's Netdev: a TUN device whose link is read and
// set through netlink in cfg.Netns.
func OpenTUN(cfg tun.Config) (Netdev, error) {
	d, err := tun.Open(cfg)
	if err != nil {
		return nil, err
	}
	return &tunNetdev{Device: d, ns: cfg.Netns, routes: mtu.NewRoutesAt(d.Netlink(), d.Index())}, nil
}

// tunNetdev is a TUN device and its link in the kernel.
type tunNetdev struct {
	*tun.Device
	ns     *netns.NsHandle // nil: the daemon's own namespace
	routes *mtu.Routes
}

func (t *tunNetdev) Routes() Routes { return t.routes }

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
				e = LinkEvent{Change: LinkState, MTU: a.MTU, Up: a.Flags&net.FlagUp != 0}
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
