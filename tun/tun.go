// Package tun is the TUN device ipoibd exposes as its network interface:
// opened with a virtio-net header in front of every packet (which
// songgao/water cannot do), so that the kernel may hand over and take TCP
// and UDP super-packets of up to 64 KiB (see package offload), with one
// queue per reader when asked (IFF_MULTI_QUEUE), and configured through
// netlink (addresses, MTU, transmit queue length, up). A device is not
// persistent unless Config.Persist says so, so closing it removes the
// interface with every address and route the kernel hung on it; nothing
// is left behind when the daemon exits, also after SIGKILL. A persistent
// one (a child's, which a pod keeps across a daemon restart) stays until
// Close removes it, or after Keep until a later Open with Adopt takes it
// back (persist.go).
//
// It is also the interface's kernel side in production: OpenNetdev makes
// a netdev.Netdev of a device and its link (netlink events, the MTU host
// routes, the namespace, a raw socket; netdev.go, routes.go), which the
// daemon opens and hands to ipoib.New. Package ipoib never imports tun
// (docs/design.md), so the interface's behaviour tests run on a fake
// netdev as an ordinary user; only tun's own tests need root.
package tun

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/ipoibd/ipoibd/offload"
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
	// Offload asks the kernel for TSO/USO super-packets and checksum
	// offload (see Device.Offloads); without it every packet arrives
	// whole, checksummed and at most MTU long.
	Offload bool
	// Queues is the number of transmit queues (IFF_MULTI_QUEUE), each
	// read by its own goroutine; the kernel keeps a flow on one queue, so
	// its packets stay in order. Default 1, at most MaxQueues.
	Queues int
	// Persist makes the device persistent (TUNSETPERSIST): it outlives
	// the daemon, unserved, until Close removes it (unless Keep said
	// otherwise). Adopt re-attaches a persistent device of that name
	// left by an earlier daemon, with its addresses and routes, instead
	// of refusing it (persist.go).
	Persist, Adopt bool
}

// MaxQueues bounds Config.Queues.
const MaxQueues = 16

// Device is an open TUN interface. Read takes one packet (or super-packet)
// with its virtio-net header from a queue; Write and WriteGSO put one back.
// Each queue is read by one goroutine; writes may come from several.
type Device struct {
	queues []*queue
	name   string
	// renamed is the name the kernel gave the link since (ip link set
	// NAME name NEW), which Renamed records; nil: name.
	renamed  atomic.Pointer[string]
	offloads uint            // TUN_F_* the kernel accepted
	nl       *netlink.Handle // bound to the namespace the device was made in
	link     netlink.Link
	index    int

	persist persistState // persist.go
}

// queue is one file descriptor of the device. The poller calls readFn;
// it is built once so that a read does not allocate a closure.
type queue struct {
	file   *os.File
	rc     syscall.RawConn
	mu     sync.Mutex
	r      ioState
	readFn func(fd uintptr) bool
	// wmu guards w, the writes made through this descriptor (WriteOn).
	wmu     sync.Mutex
	w       ioState
	writeFn func(fd uintptr) bool
	// kicked: InterruptReads set a read deadline in the past; the next
	// Read clears it before it waits.
	kicked atomic.Bool
}

// ioState is one readv or writev in progress.
type ioState struct {
	hdr   [offload.HdrLen]byte
	iov   [maxParts + 1]unix.Iovec
	niov  int
	n     int
	errno syscall.Errno
}

// maxParts bounds the buffers of one WriteGSO.
const maxParts = 128

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
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.Queues < 1 || cfg.Queues > MaxQueues {
		return nil, fmt.Errorf("tun: %d queues: want 1 to %d", cfg.Queues, MaxQueues)
	}
	flags, adopted, err := openFlags(&cfg)
	if err != nil {
		return nil, err
	}
	d, err := create(cfg.Name, flags, cfg.Offload, cfg.Queues)
	if err == nil {
		if err = d.setPersist(cfg.Persist, adopted); err != nil {
			d.closeQueues()
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("tun: creating %s needs CAP_NET_ADMIN (run as root): %w", cfg.Name, err)
		}
		return nil, fmt.Errorf("tun: creating %s: %w", cfg.Name, err)
	}
	// Later calls may come from any thread, which may sit in another
	// network namespace: netlink goes through a handle bound to this one.
	// NewHandle opens its socket in this thread's namespace without a
	// setns (NewHandleAt would need CAP_SYS_ADMIN even for our own).
	// Routing only: a handle for every family would fail on kernels
	// without XFRM (minimal guests, some containers).
	d.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		d.closeQueues()
		return nil, fmt.Errorf("tun: netlink: %w", err)
	}
	if err := d.configure(cfg); err != nil {
		d.nl.Close()
		d.closeQueues()
		return nil, err
	}
	return d, nil
}

// Offloads the kernel may use when it hands packets to us. Checksum
// offload comes with TSO; USO needs Linux 6.2, so it is asked for apart.
const (
	tsoOffloads = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6
	usoOffloads = unix.TUN_F_USO4 | unix.TUN_F_USO6
)

// create opens /dev/net/tun as a TUN named name with n queues, without
// packet information and with a virtio-net header, non-blocking so that
// the Go poller serves it and Close wakes a blocked Read.
func create(name string, flags uint16, wantOffload bool, n int) (*Device, error) {
	d := &Device{name: name}
	for range n {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			d.closeQueues()
			return nil, fmt.Errorf("/dev/net/tun: %w", err)
		}
		if err := d.attach(fd, flags, wantOffload); err != nil {
			_ = unix.Close(fd)
			d.closeQueues()
			return nil, err
		}
		q := &queue{file: os.NewFile(uintptr(fd), "/dev/net/tun")}
		d.queues = append(d.queues, q)
		if q.rc, err = q.file.SyscallConn(); err != nil {
			d.closeQueues()
			return nil, err
		}
		q.readFn, q.writeFn = q.r.readv, q.w.writev
	}
	return d, nil
}

// attach makes fd a queue of the device (the first one creates it) and
// sets its offloads: the first queue finds out which the kernel accepts,
// the others ask for the same.
func (d *Device) attach(fd int, flags uint16, wantOffload bool) error {
	ifr, err := unix.NewIfreq(d.name)
	if err != nil {
		return err
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return err
	}
	d.name = ifr.Name()
	switch {
	case len(d.queues) > 0 && d.offloads != 0:
		if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(d.offloads)); err != nil {
			return fmt.Errorf("offloads on queue %d: %w", len(d.queues), err)
		}
	case len(d.queues) == 0 && wantOffload:
		for _, f := range []uint{tsoOffloads | usoOffloads, tsoOffloads} {
			if unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(f)) == nil {
				d.offloads = f
				break
			}
		}
	}
	return nil
}

func (d *Device) closeQueues() {
	for _, q := range d.queues {
		_ = q.file.Close()
	}
}

// Queues returns the number of queues to read.
func (d *Device) Queues() int { return len(d.queues) }

// Offloads reports whether the kernel hands us super-packets (TSO, and
// USO where it can): then a read may need offload.Split or
// offload.Complete before it goes on the wire.
func (d *Device) Offloads() (tso, uso bool) {
	return d.offloads&unix.TUN_F_TSO4 != 0, d.offloads&unix.TUN_F_USO4 != 0
}

// Netlink returns the netlink handle of the device's network namespace.
func (d *Device) Netlink() *netlink.Handle { return d.nl }

func (d *Device) configure(cfg Config) error {
	link, err := d.nl.LinkByName(d.name)
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
	if err := d.setNoQueue(); err != nil {
		return err
	}
	addrs := cfg.Addrs
	if cfg.MTU < IPv6MinMTU {
		// The kernel has no IPv6 on such a link (nor an addrgenmode to
		// set): it runs IPv4 alone until its MTU allows IPv6 again.
		addrs = withoutIPv6(addrs)
	} else if cfg.LinkLocal.IsValid() {
		if err := d.stopAddrGen(); err != nil {
			return err
		}
		addrs = append([]netip.Prefix{cfg.LinkLocal}, addrs...)
	}
	for _, p := range addrs {
		// An adopted device kept its addresses.
		if err := d.AddAddr(p); err != nil && !(d.persist.adopted && errors.Is(err, unix.EEXIST)) {
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

// Name returns the interface name, as the kernel has it now.
func (d *Device) Name() string {
	if n := d.renamed.Load(); n != nil {
		return *n
	}
	return d.name
}

// Renamed records that the kernel renamed the link (the owner of the
// device follows its netlink notifications).
func (d *Device) Renamed(name string) { d.renamed.Store(&name) }

// Index returns the interface index.
func (d *Device) Index() int { return d.index }

// Read reads one IP packet, or a super-packet when offloads are on, from
// queue q into b and its virtio-net header into h. It blocks until a
// packet comes or the device is closed.
func (d *Device) Read(q int, b []byte, h *offload.Hdr) (int, error) {
	qu := d.queues[q]
	qu.mu.Lock()
	defer qu.mu.Unlock()
	if qu.kicked.Load() && qu.kicked.Swap(false) { // a plain load on every read, the swap only after a kick
		_ = qu.file.SetReadDeadline(time.Time{})
	}
	r := &qu.r
	r.setIov(0, r.hdr[:])
	r.setIov(1, b)
	r.niov = 2
	if err := qu.rc.Read(qu.readFn); err != nil {
		return 0, err
	}
	if r.errno != 0 {
		return 0, fmt.Errorf("tun: %s read: %w", d.name, r.errno)
	}
	if r.n < offload.HdrLen {
		return 0, fmt.Errorf("tun: %s read: %d octets, shorter than the virtio-net header", d.name, r.n)
	}
	if err := h.Decode(r.hdr[:]); err != nil {
		return 0, err
	}
	return r.n - offload.HdrLen, nil
}

// InterruptReads makes every Read blocked now return an error that
// matches os.ErrDeadlineExceeded; later Reads wait as before. An
// interface over several ports (package bond) uses it to take its queues'
// readers back from a port that is no longer active.
func (d *Device) InterruptReads() {
	for _, qu := range d.queues {
		// The deadline first: a Read that clears it before it is set
		// would otherwise wait on, past the interrupt.
		_ = qu.file.SetReadDeadline(time.Now())
		qu.kicked.Store(true)
	}
}

// Write writes one whole IP packet, its checksums already valid, through
// the first queue.
func (d *Device) Write(b []byte) (int, error) { return d.WriteOn(0, b) }

// WriteGSO is WriteGSOOn the first queue.
func (d *Device) WriteGSO(h offload.Hdr, parts [][]byte) (int, error) {
	return d.WriteGSOOn(0, h, parts)
}

// WriteOn writes one whole IP packet through queue q. The kernel sends a
// flow's packets to the queue its last packet was written through (tun's
// automatic steering): the queue a packet is written on is the queue its
// replies are read from.
func (d *Device) WriteOn(q int, b []byte) (int, error) {
	qu := d.queues[q]
	qu.wmu.Lock()
	defer qu.wmu.Unlock()
	w := &qu.w
	w.hdr = [offload.HdrLen]byte{}
	w.setIov(0, w.hdr[:])
	w.setIov(1, b)
	w.niov = 2
	return d.write(qu)
}

// WriteGSOOn writes through queue q one packet made of parts (at most
// 128) with header h: a super-packet the kernel takes as if it had come
// in that way (offload.Coalescer makes them).
func (d *Device) WriteGSOOn(q int, h offload.Hdr, parts [][]byte) (int, error) {
	if len(parts) > maxParts {
		return 0, fmt.Errorf("tun: %s write: %d parts, at most %d", d.name, len(parts), maxParts)
	}
	qu := d.queues[q]
	qu.wmu.Lock()
	defer qu.wmu.Unlock()
	w := &qu.w
	h.Encode(w.hdr[:])
	w.setIov(0, w.hdr[:])
	w.niov = 1
	for _, p := range parts {
		if len(p) > 0 {
			w.setIov(w.niov, p)
			w.niov++
		}
	}
	return d.write(qu)
}

// write issues the writev qu.w holds; qu.wmu is held.
func (d *Device) write(qu *queue) (int, error) {
	if err := qu.rc.Write(qu.writeFn); err != nil {
		return 0, err
	}
	if qu.w.errno != 0 {
		return 0, fmt.Errorf("tun: %s write: %w", d.name, qu.w.errno)
	}
	return qu.w.n - offload.HdrLen, nil
}

func (s *ioState) setIov(k int, b []byte) {
	s.iov[k] = unix.Iovec{}
	if len(b) > 0 {
		s.iov[k].Base = &b[0]
		s.iov[k].SetLen(len(b))
	}
}

// readv and writev run inside the poller; they return false to be called
// again once the descriptor is ready.
func (s *ioState) readv(fd uintptr) bool  { return s.rw(unix.SYS_READV, fd) }
func (s *ioState) writev(fd uintptr) bool { return s.rw(unix.SYS_WRITEV, fd) }

func (s *ioState) rw(trap uintptr, fd uintptr) bool {
	for {
		n, _, errno := unix.Syscall(trap, fd, uintptr(unsafe.Pointer(&s.iov[0])), uintptr(s.niov))
		switch errno {
		case 0:
			s.n, s.errno = int(n), 0
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		s.n, s.errno = 0, errno
		return true
	}
}

// Close removes the interface (a persistent one too, unless Keep was
// called: then it stays, unserved, its carrier off); blocked Reads
// return an error.
func (d *Device) Close() error {
	d.releasePersist()
	d.nl.Close()
	var err error
	for _, q := range d.queues {
		if e := q.file.Close(); e != nil && err == nil {
			err = e
		}
	}
	return err
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
