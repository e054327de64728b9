// Package netdevtest is an IPoIB interface's kernel side in memory, as
// wireguard-go's tun/tuntest is a TUN's: a test puts the packets the
// kernel would hand over into In and takes what the interface wrote from
// Out, and sets the link's addresses, gateways and groups as an operator
// would. It needs no root, so an interface runs as an ordinary user.
package netdevtest

import (
	"errors"
	"net/netip"
	"slices"
	"sync"

	"github.com/ipoibd/ipoibd/mtu"
	"github.com/ipoibd/ipoibd/netdev"
	"github.com/ipoibd/ipoibd/offload"
)

// Netdev is the fake; it implements netdev.Netdev.
type Netdev struct {
	// In carries what the kernel hands the interface (Read).
	In chan Packet
	// Out carries what the interface wrote to the kernel (Write,
	// WriteGSO, the parts joined); a write finding it full fails, as a
	// kernel that takes nothing more.
	Out chan []byte
	// Events carries the link's changes (Watch).
	Events chan netdev.LinkEvent

	name   string
	closed chan struct{}
	once   sync.Once

	mu    sync.Mutex
	addrs []netip.Prefix
	// beforeWatch runs in Watch (BeforeWatch).
	beforeWatch func()
	// onRouteSet runs as a host route is set (OnRouteSet).
	onRouteSet func(dst netip.Addr)
	mtu        int
	carrier    bool
	gateways   map[netip.Prefix]netip.Addr // the kernel's routes via a gateway on the link
	groups     []netip.Addr
	routes     map[netip.Addr]int // host routes with their MTU
}

var _ netdev.Netdev = (*Netdev)(nil)

// ErrClosed is what Read and Write return after Close.
var ErrClosed = errors.New("netdevtest: closed")

// Packet is what the kernel hands over: a packet and its virtio-net
// header (zero: a whole packet).
type Packet struct {
	B   []byte
	Hdr offload.Hdr
}

// New returns a fake with room for 64 packets in and 1024 out.
func New() *Netdev {
	return &Netdev{
		In: make(chan Packet, 64), Out: make(chan []byte, 1024), Events: make(chan netdev.LinkEvent, 16),
		closed: make(chan struct{}), gateways: map[netip.Prefix]netip.Addr{}, routes: map[netip.Addr]int{},
	}
}

// Open configures f as tun.OpenNetdev would configure a TUN, and returns
// it: the ipoib Config.Netdev of an interface NetdevConfig gave cfg.
func (f *Netdev) Open(cfg netdev.Config) *Netdev {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.name, f.mtu, f.carrier = cfg.Name, cfg.MTU, true
	f.addrs = slices.Clone(cfg.Addrs)
	if cfg.LinkLocal.IsValid() {
		f.addrs = append(f.addrs, cfg.LinkLocal)
	}
	return f
}

// InNetns runs f as is: the fake lives in no namespace.
func (f *Netdev) InNetns(fn func() error) error { return fn() }

func (f *Netdev) Queues() int               { return 1 }
func (f *Netdev) Offloads() (tso, uso bool) { return false, false }

func (f *Netdev) Name() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.name
}

func (f *Netdev) Read(q int, b []byte, h *offload.Hdr) (int, error) {
	select {
	case p := <-f.In:
		*h = p.Hdr
		return copy(b, p.B), nil
	case <-f.closed:
		return 0, ErrClosed
	}
}

func (f *Netdev) Write(b []byte) (int, error) {
	select {
	case f.Out <- slices.Clone(b):
		return len(b), nil
	case <-f.closed:
		return 0, ErrClosed
	default:
		return 0, errors.New("netdevtest: Out is full")
	}
}

// SendIPv4 puts b on Out, as Write.
func (f *Netdev) SendIPv4(b []byte) error {
	_, err := f.Write(b)
	return err
}

func (f *Netdev) WriteGSO(h offload.Hdr, parts [][]byte) (int, error) {
	return f.Write(slices.Concat(parts...))
}

func (f *Netdev) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

func (f *Netdev) Addrs() ([]netip.Prefix, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.addrs), nil
}

func (f *Netdev) EnsureAddrs(ps []netip.Prefix) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range ps {
		if !slices.Contains(f.addrs, p) {
			f.addrs = append(f.addrs, p)
			n++
		}
	}
	return n, nil
}

// SetMTU sets the MTU and notifies it, as the kernel does.
func (f *Netdev) SetMTU(m int) error {
	f.mu.Lock()
	f.mtu = m
	f.mu.Unlock()
	f.Events <- netdev.LinkEvent{Change: netdev.LinkState, MTU: m, Up: true}
	return nil
}

func (f *Netdev) SetCarrier(on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.carrier = on
	return nil
}

// State is up, with the carrier the interface last set.
func (f *Netdev) State() (netdev.LinkStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := netdev.LinkStatus{Up: true, Carrier: f.carrier, OperState: "down"}
	if f.carrier {
		st.OperState = "up"
	}
	return st, nil
}

// MTU reports the link's MTU.
func (f *Netdev) MTU() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mtu
}

// Carrier reports the carrier the interface last set.
func (f *Netdev) Carrier() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.carrier
}

func (f *Netdev) Gateway(dst netip.Addr) (netip.Addr, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p, gw := range f.gateways {
		if p.Contains(dst) {
			return gw, true
		}
	}
	return netip.Addr{}, false
}

func (f *Netdev) Groups() ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.groups), nil
}

// SetGroups sets the multicast groups the kernel's sockets joined.
func (f *Netdev) SetGroups(gs []netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.groups = slices.Clone(gs)
}

func (f *Netdev) Routes() netdev.Routes { return routes{f} }

// Watch returns Events, after running the function BeforeWatch set.
func (f *Netdev) Watch(stop <-chan struct{}) <-chan netdev.LinkEvent {
	f.mu.Lock()
	before := f.beforeWatch
	f.mu.Unlock()
	if before != nil {
		before()
	}
	return f.Events
}

// BeforeWatch sets what Watch does before it returns: a change the
// interface's first read of the link missed and no notice will tell.
func (f *Netdev) BeforeWatch(fn func()) {
	f.mu.Lock()
	f.beforeWatch = fn
	f.mu.Unlock()
}

// AddAddr adds an address as `ip addr add` would, with its notification.
func (f *Netdev) AddAddr(p netip.Prefix) {
	f.mu.Lock()
	f.addrs = append(f.addrs, p)
	f.mu.Unlock()
	f.Events <- netdev.LinkEvent{Change: netdev.AddrsChanged}
}

// DelAddr removes an address as `ip addr del` would, with its
// notification.
func (f *Netdev) DelAddr(p netip.Prefix) {
	f.mu.Lock()
	f.addrs = slices.DeleteFunc(f.addrs, func(q netip.Prefix) bool { return q == p })
	f.mu.Unlock()
	f.Events <- netdev.LinkEvent{Change: netdev.AddrsChanged}
}

// AddAddrUnseen adds an address whose notification went out before the
// interface watched (networkd configuring a new link at boot): none comes.
func (f *Netdev) AddAddrUnseen(p netip.Prefix) {
	f.mu.Lock()
	f.addrs = append(f.addrs, p)
	f.mu.Unlock()
}

// LinkFlapUnseen takes the link down and up again with notices that went
// out before anyone watched: the kernel's IPv6 addresses are gone, and
// nothing says so.
func (f *Netdev) LinkFlapUnseen() {
	f.mu.Lock()
	f.addrs = slices.DeleteFunc(f.addrs, func(p netip.Prefix) bool { return p.Addr().Is6() })
	f.mu.Unlock()
}

// LinkDown takes the link down as `ip link set down` does: the kernel
// removes its IPv6 addresses and says so.
func (f *Netdev) LinkDown() {
	f.mu.Lock()
	f.addrs = slices.DeleteFunc(f.addrs, func(p netip.Prefix) bool { return p.Addr().Is6() })
	m := f.mtu
	f.mu.Unlock()
	f.Events <- netdev.LinkEvent{Change: netdev.LinkState, MTU: m, Up: false}
}

// SetGateway routes the prefix via gw, as `ip route add` would.
func (f *Netdev) SetGateway(p netip.Prefix, gw netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gateways[p] = gw
}

// OnRouteSet makes fn run each time the interface sets a host route (on
// the interface's goroutine, as the netlink round trip would): a test sees
// what was done before.
func (f *Netdev) OnRouteSet(fn func(dst netip.Addr)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onRouteSet = fn
}

// Route returns the MTU of the host route to dst, if there is one.
func (f *Netdev) Route(dst netip.Addr) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.routes[dst]
	return m, ok
}

// routes keeps host routes as tun.Routes does: one only where the path's
// MTU is below the link's.
type routes struct{ f *Netdev }

func (r routes) Set(dst netip.Addr, m int) (bool, error) {
	r.f.mu.Lock()
	if m < r.f.mtu {
		r.f.routes[dst] = m
	} else {
		delete(r.f.routes, dst)
	}
	hook := r.f.onRouteSet
	r.f.mu.Unlock()
	if hook != nil {
		hook(dst)
	}
	return true, nil
}

func (r routes) SetMany(dests []mtu.Dest) ([]bool, []error) {
	installed, errs := make([]bool, len(dests)), make([]error, len(dests))
	for k, d := range dests {
		installed[k], errs[k] = r.Set(d.Addr, d.MTU)
	}
	return installed, errs
}

func (r routes) Remove(dst netip.Addr) error {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	delete(r.f.routes, dst)
	return nil
}

func (r routes) Flush() error {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	clear(r.f.routes)
	return nil
}
