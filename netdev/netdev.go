// Package netdev is an IPoIB interface's kernel side as ipoib drives it:
// the packets the kernel hands over and takes back, and the link
// (addresses, state, routes, groups). Package tun implements it with a TUN
// device and netlink in production, and netdevtest's channel-backed fake
// in tests. Whoever makes an interface opens its Netdev first (the daemon:
// tun.OpenNetdev) and hands it to ipoib.New, as wireguard-go's main opens
// a tun.Device for device.NewDevice; it is a package of its own so that
// neither tun nor the fake imports ipoib, and ipoib imports neither.
package netdev

import (
	"net/netip"

	"github.com/ipoibd/ipoibd/mtu"
	"github.com/ipoibd/ipoibd/offload"
)

// Netdev is the interface as the kernel sees it: the packets it hands us
// and takes back, and its link (addresses, state, routes, groups). The
// daemon's is a TUN device configured over netlink (tun.OpenNetdev); tests
// give netdevtest's channel-backed fake, so that they run without root.
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
	// SendIPv4 hands the kernel an IPv4 packet, header included, as a
	// socket of the interface's namespace sends one: routed to its
	// destination (delivered locally when that is one of ours) from its
	// source, one of our addresses. An ICMP error from our own address
	// goes this way: written into the device, a packet whose source is
	// local is a martian the kernel drops.
	SendIPv4(b []byte) error
	// Offloads reports whether the kernel hands over TCP (and so takes
	// coalesced TCP) and UDP super-packets.
	Offloads() (tso, uso bool)
	Close() error
}

// ReadInterrupter is a Packets whose blocked Reads can be made to return
// (an error matching os.ErrDeadlineExceeded), so that another reader may
// take the queue: tun's, which an interface over several ports (package
// bond) hands from port to port.
type ReadInterrupter interface {
	InterruptReads()
}

// QueueWriter is a Packets that writes through a chosen queue: the kernel
// reads a flow's next packets from the queue its last one was written on
// (tun's automatic steering), so an interface over several ports (package
// bond) writes what a port received on a queue that port reads.
type QueueWriter interface {
	WriteOn(q int, b []byte) (int, error)
	WriteGSOOn(q int, h offload.Hdr, parts [][]byte) (int, error)
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
	// State is the link's state as the kernel has it now.
	State() (LinkStatus, error)
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
	// InNetns runs f on a thread in the link's network namespace, for
	// what is bound to a namespace when made (sockets,
	// /proc/thread-self/net); in the caller's own it runs f as is.
	InNetns(f func() error) error
}

// Config is the link a Netdev is opened as: what ipoib.Config.NetdevConfig
// settles against the port before the interface is made.
type Config struct {
	Name  string
	MTU   int
	Addrs []netip.Prefix
	// LinkLocal, when valid, is the link's only IPv6 link-local address
	// (RFC 4391's, from the port GID): the kernel makes none of its own.
	LinkLocal netip.Prefix
	// Offload asks for TSO/USO super-packets and checksum offload.
	Offload bool
	// Queues is how many queues Packets.Read serves.
	Queues int
}

// IPv6MinMTU is the smallest link MTU IPv6 runs on (RFC 8200 §5): below
// it the kernel takes IPv6 off the link.
const IPv6MinMTU = 1280

// LinkLocal is the IPv6 link-local address with the given interface
// identifier (fe80::/64).
func LinkLocal(iid [8]byte) netip.Prefix {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	copy(a[8:], iid[:])
	return netip.PrefixFrom(netip.AddrFrom16(a), 64)
}

// LinkStatus is the kernel's state of the link, as `ip link` shows it.
type LinkStatus struct {
	Up        bool   // administratively up (IFF_UP)
	Carrier   bool   // IFF_LOWER_UP
	OperState string // RFC 2863's, in lower case: up, down, lowerlayerdown, unknown...
}

// Routes installs and removes per-destination MTU routes (tun.Routes).
type Routes interface {
	Set(dst netip.Addr, mtu int) (installed bool, err error)
	SetMany(dests []mtu.Dest) (installed []bool, errs []error)
	Remove(dst netip.Addr) error
	Flush() error
}

// LinkEvent is one change Link.Watch reports.
type LinkEvent struct {
	Change LinkChange
	MTU    int    // LinkState: the link's MTU now
	Up     bool   // LinkState: administratively up
	Name   string // LinkState: the link's name now (it may have been renamed)
	Err    error  // the *Unwatched changes: why
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
	// LinkGone: the link was deleted (`ip link del`); the interface
	// can carry nothing any more.
	LinkGone
)
