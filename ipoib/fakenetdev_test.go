package ipoib

import (
	"errors"
	"net/netip"
	"slices"
	"sync"

	"github.com/ipoibd/ipoibd/mtu"
	"github.com/ipoibd/ipoibd/offload"
	"github.com/ipoibd/ipoibd/tun"
)

// fakeNetdev is an interface's kernel side in memory, as wireguard-go's
// tuntest is a TUN's: a test puts the packets the kernel would hand over
// into in and takes what the interface wrote from out, and sets the
// link's addresses, gateways and groups as an operator would. It needs no
// root, so the interface runs as an ordinary user.
type fakeNetdev struct {
	name   string
	in     chan fakePacket
	out    chan []byte
	events chan LinkEvent
	closed chan struct{}
	once   sync.Once

	mu       sync.Mutex
	addrs    []netip.Prefix
	mtu      int
	carrier  bool
	gateways map[netip.Prefix]netip.Addr // the kernel's routes via a gateway on the link
	groups   []netip.Addr
	routes   map[netip.Addr]int // host routes with their MTU
}

var errFakeClosed = errors.New("fake netdev closed")

// fakePacket is what the kernel hands over: a packet and its virtio-net
// header (zero: a whole packet).
type fakePacket struct {
	b []byte
	h offload.Hdr
}

// open is the Config.Netdev that makes f the interface's netdev,
// configured as tun.Open would configure a TUN.
func (f *fakeNetdev) open(cfg tun.Config) (Netdev, error) {
	f.name, f.mtu, f.carrier = cfg.Name, cfg.MTU, true
	f.addrs = slices.Clone(cfg.Addrs)
	if cfg.LinkLocal.IsValid() {
		f.addrs = append(f.addrs, cfg.LinkLocal)
	}
	return f, nil
}

func newFakeNetdev() *fakeNetdev {
	return &fakeNetdev{
		in: make(chan fakePacket, 64), out: make(chan []byte, 1024), events: make(chan LinkEvent, 16),
		closed: make(chan struct{}), gateways: map[netip.Prefix]netip.Addr{}, routes: map[netip.Addr]int{},
	}
}

func (f *fakeNetdev) Queues() int               { return 1 }
func (f *fakeNetdev) Offloads() (tso, uso bool) { return false, false }
func (f *fakeNetdev) Name() string              { return f.name }

func (f *fakeNetdev) Read(q int, b []byte, h *offload.Hdr) (int, error) {
	select {
	case p := <-f.in:
		*h = p.h
		return copy(b, p.b), nil
	case <-f.closed:
		return 0, errFakeClosed
	}
}

func (f *fakeNetdev) Write(b []byte) (int, error) {
	select {
	case f.out <- slices.Clone(b):
		return len(b), nil
	case <-f.closed:
		return 0, errFakeClosed
	default:
		return 0, errors.New("fake netdev: out is full")
	}
}

func (f *fakeNetdev) WriteGSO(h offload.Hdr, parts [][]byte) (int, error) {
	return f.Write(slices.Concat(parts...))
}

func (f *fakeNetdev) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

func (f *fakeNetdev) Addrs() ([]netip.Prefix, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.addrs), nil
}

func (f *fakeNetdev) EnsureAddrs(ps []netip.Prefix) (int, error) {
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
func (f *fakeNetdev) SetMTU(m int) error {
	f.mu.Lock()
	f.mtu = m
	f.mu.Unlock()
	f.events <- LinkEvent{Change: LinkState, MTU: m, Up: true}
	return nil
}

func (f *fakeNetdev) SetCarrier(on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.carrier = on
	return nil
}

func (f *fakeNetdev) Gateway(dst netip.Addr) (netip.Addr, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p, gw := range f.gateways {
		if p.Contains(dst) {
			return gw, true
		}
	}
	return netip.Addr{}, false
}

func (f *fakeNetdev) Groups() ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.groups), nil
}

func (f *fakeNetdev) Routes() Routes { return fakeRoutes{f} }

func (f *fakeNetdev) Watch(stop <-chan struct{}) <-chan LinkEvent { return f.events }

// addAddr adds an address as `ip addr add` would, with its notification.
func (f *fakeNetdev) addAddr(p netip.Prefix) {
	f.mu.Lock()
	f.addrs = append(f.addrs, p)
	f.mu.Unlock()
	f.events <- LinkEvent{Change: AddrsChanged}
}

// linkDown takes the link down as `ip link set down` does: the kernel
// removes its IPv6 addresses and says so.
func (f *fakeNetdev) linkDown() {
	f.mu.Lock()
	f.addrs = slices.DeleteFunc(f.addrs, func(p netip.Prefix) bool { return p.Addr().Is6() })
	m := f.mtu
	f.mu.Unlock()
	f.events <- LinkEvent{Change: LinkState, MTU: m, Up: false}
}

// setGateway routes the prefix via gw, as `ip route add` would.
func (f *fakeNetdev) setGateway(p netip.Prefix, gw netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gateways[p] = gw
}

// route returns the MTU of the host route to dst, if there is one.
func (f *fakeNetdev) route(dst netip.Addr) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.routes[dst]
	return m, ok
}

// fakeRoutes keeps host routes as mtu.Routes does: one only where the
// path's MTU is below the link's.
type fakeRoutes struct{ f *fakeNetdev }

func (r fakeRoutes) Set(dst netip.Addr, m int) (bool, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if m < r.f.mtu {
		r.f.routes[dst] = m
	} else {
		delete(r.f.routes, dst)
	}
	return true, nil
}

func (r fakeRoutes) SetMany(dests []mtu.Dest) ([]bool, []error) {
	installed, errs := make([]bool, len(dests)), make([]error, len(dests))
	for k, d := range dests {
		installed[k], errs[k] = r.Set(d.Addr, d.MTU)
	}
	return installed, errs
}

func (r fakeRoutes) Remove(dst netip.Addr) error {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	delete(r.f.routes, dst)
	return nil
}

func (r fakeRoutes) Flush() error {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	clear(r.f.routes)
	return nil
}
