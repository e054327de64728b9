package softib

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ipoibd/ipoibd/softib/wire"
)

// fabric is the UDP underlay of one device: a unicast socket bound to the
// underlay address, a multicast socket opened on the first group join, and
// the batch I/O both use. Sends go out as UDP GSO trains straight from the
// callers' buffers; receives come in with UDP GRO, many datagrams per call.
type fabric struct {
	local   netip.Addr
	port    uint16
	v4      bool
	ifindex int
	mtu     int // underlay interface MTU
	// fwd, when valid, is where every packet goes (InfiniBand link: the
	// fabric forwarder) instead of the destination's fabric port.
	fwd netip.AddrPort

	fd     int // unicast socket
	mcfd   int // multicast socket: wildcard-bound, sees only joined groups
	lockfd int // abstract Unix socket: this device owns local:port (claim)
	epfd   int
	evfd   int // wakes the receive loop on close
	// ep is epfd in the Go runtime's poller, epRC its raw access: the
	// receive goroutine parks there instead of blocking a thread in
	// epoll_wait (run).
	ep   *os.File
	epRC syscall.RawConn

	mcMu   sync.Mutex
	groups map[netip.Addr]int // joined underlay groups and their use counts
}

const (
	socketBuffer = 8 << 20
	// maxTrainSegments bounds one GSO train (the kernel's UDP_MAX_SEGMENTS is
	// at least 64).
	maxTrainSegments = 64
	// maxUDPPayload is the largest UDP payload one (GSO) send may carry.
	maxUDPPayloadV4 = 65535 - 20 - 8
	maxUDPPayloadV6 = 65535 - 8
)

func openFabric(local netip.Addr, port uint16) (*fabric, error) {
	local = local.Unmap()
	ifi, err := interfaceOf(local)
	if err != nil {
		return nil, err
	}
	f := &fabric{local: local, port: port, v4: local.Is4(), ifindex: ifi.Index, mtu: ifi.MTU, fd: -1, mcfd: -1, epfd: -1, evfd: -1, groups: map[netip.Addr]int{}}
	if f.lockfd, err = claim(netip.AddrPortFrom(local, port)); err != nil {
		return nil, err
	}
	if f.fd, err = f.socket(local, false); err != nil {
		f.close()
		return nil, err
	}
	if f.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		f.close()
		return nil, fmt.Errorf("softib: epoll: %w", err)
	}
	if f.ep, f.epRC, err = pollable(f.epfd, "softib-epoll"); err != nil {
		f.close()
		return nil, err
	}
	if f.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		f.close()
		return nil, fmt.Errorf("softib: eventfd: %w", err)
	}
	// The multicast socket is opened now, not at the first join, so that it
	// lives in the same network namespace as the device.
	anyAddr := netip.IPv6Unspecified()
	if f.v4 {
		anyAddr = netip.IPv4Unspecified()
	}
	if f.mcfd, err = f.socket(anyAddr, true); err != nil {
		f.close()
		return nil, err
	}
	for _, fd := range []int{f.fd, f.mcfd, f.evfd} {
		if err := unix.EpollCtl(f.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			f.close()
			return nil, fmt.Errorf("softib: epoll add: %w", err)
		}
	}
	return f, nil
}

// ErrInUse: another device (another daemon) already runs on the underlay
// address and port. Test with errors.Is.
var ErrInUse = errors.New("in use by another softib device")

// claim makes the device the only one on addr. Both fabric sockets set
// SO_REUSEADDR: every device's multicast socket binds the wildcard address
// on the shared port, and Linux lets a socket bind an address the wildcard
// covers only if both sockets have it. But then a second device could bind
// our exact address too, and the kernel would hand it our unicast traffic.
// The lock is an abstract Unix socket named after the address: scoped to
// the network namespace, as the address is, and released when its owner
// exits, SIGKILL included.
func claim(addr netip.AddrPort) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("softib: lock socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@softib " + addr.String()}); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EADDRINUSE) {
			return -1, fmt.Errorf("softib: underlay %s is %w (another ipoibd?): each needs its own underlay address, or a --softib-port of its own (a separate fabric: only daemons on one port reach each other)", addr, ErrInUse)
		}
		return -1, fmt.Errorf("softib: lock %s: %w", addr, err)
	}
	return fd, nil
}

// interfaceOf finds the interface holding the underlay address: its index
// for multicast and its MTU for the port's active MTU.
func interfaceOf(a netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("softib: list interfaces: %w", err)
	}
	for i := range ifs {
		addrs, err := ifs[i].Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if ipn, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == a {
					return &ifs[i], nil
				}
			}
		}
	}
	if a.IsLoopback() {
		// All of 127/8 and ::1 are local to lo: tests run many devices there.
		for i := range ifs {
			if ifs[i].Flags&net.FlagLoopback != 0 {
				return &ifs[i], nil
			}
		}
	}
	return nil, fmt.Errorf("softib: underlay address %s is not on any interface", a)
}

// socket makes a UDP socket on the fabric port. The multicast socket binds
// the wildcard address (with SO_REUSEADDR, so every device on a host gets a
// copy) and sees only the groups it joined.
func (f *fabric) socket(bindAddr netip.Addr, multicast bool) (int, error) {
	family := unix.AF_INET6
	if f.v4 {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("softib: socket: %w", err)
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("softib: %s: %w", what, err)
	}
	// Both sockets share the port: the unicast one bound to our address,
	// the multicast one to the wildcard. claim keeps other devices off
	// our address.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail("SO_REUSEADDR", err)
	}
	if multicast {
		if f.v4 {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0); err != nil {
				return fail("IP_MULTICAST_ALL", err)
			}
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1); err != nil {
				return fail("IP_PKTINFO", err)
			}
		} else {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_ALL, 0); err != nil {
				return fail("IPV6_MULTICAST_ALL", err)
			}
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1); err != nil {
				return fail("IPV6_RECVPKTINFO", err)
			}
		}
	}
	// Bigger socket buffers absorb bursts of 64 KiB messages; as root the
	// FORCE variants pass the sysctl limits.
	for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0], socketBuffer) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[1], socketBuffer)
		}
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1); err != nil {
		return fail("UDP_GRO", err)
	}
	// RoCEv2 senders (rxe) leave the UDP checksum 0 over IPv6 too; the ICRC
	// protects the packet. Without this the kernel drops all of them.
	if !f.v4 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1); err != nil {
			return fail("UDP_NO_CHECK6_RX", err)
		}
	}
	// IB packets must not be fragmented: the port MTU is chosen to fit.
	if f.v4 {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
	} else {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE)
	}
	if err != nil {
		return fail("MTU discover", err)
	}
	// Multicast leaves through the underlay interface and loops back, so other
	// devices on this host (members too) receive it.
	{
		if f.v4 {
			err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: int32(f.ifindex)})
		} else {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, f.ifindex)
		}
		if err != nil {
			return fail("multicast interface", err)
		}
	}
	if err := unix.Bind(fd, sockaddr(bindAddr, f.port, f.ifindex)); err != nil {
		return fail(fmt.Sprintf("bind %s", netip.AddrPortFrom(bindAddr, f.port)), err)
	}
	return fd, nil
}

func sockaddr(a netip.Addr, port uint16, ifindex int) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4(), Port: int(port)}
	}
	sa := &unix.SockaddrInet6{Addr: a.As16(), Port: int(port)}
	if a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() {
		sa.ZoneId = uint32(ifindex)
	}
	return sa
}

// join subscribes the multicast socket to an underlay group.
func (f *fabric) join(group netip.Addr) error {
	f.mcMu.Lock()
	defer f.mcMu.Unlock()
	if f.groups[group] > 0 {
		f.groups[group]++
		return nil
	}
	if err := f.membership(group, true); err != nil {
		return err
	}
	f.groups[group] = 1
	return nil
}

func (f *fabric) leave(group netip.Addr) error {
	f.mcMu.Lock()
	defer f.mcMu.Unlock()
	switch f.groups[group] {
	case 0:
		return nil
	case 1:
		delete(f.groups, group)
		return f.membership(group, false)
	}
	f.groups[group]--
	return nil
}

func (f *fabric) membership(group netip.Addr, join bool) error {
	var err error
	if f.v4 {
		opt := unix.IP_ADD_MEMBERSHIP
		if !join {
			opt = unix.IP_DROP_MEMBERSHIP
		}
		err = unix.SetsockoptIPMreqn(f.mcfd, unix.IPPROTO_IP, opt, &unix.IPMreqn{Multiaddr: group.As4(), Ifindex: int32(f.ifindex)})
	} else {
		opt := unix.IPV6_JOIN_GROUP
		if !join {
			opt = unix.IPV6_LEAVE_GROUP
		}
		err = unix.SetsockoptIPv6Mreq(f.mcfd, unix.IPPROTO_IPV6, opt, &unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(f.ifindex)})
	}
	if err != nil {
		return fmt.Errorf("softib: multicast membership %s: %w", group, err)
	}
	return nil
}

// wake makes the receive loop return.
func (f *fabric) wake() {
	var one = [8]byte{1}
	_, _ = unix.Write(f.evfd, one[:])
}

func (f *fabric) close() {
	if f.ep != nil {
		_ = f.ep.Close()
		f.ep = nil
	}
	for _, fd := range []*int{&f.fd, &f.mcfd, &f.epfd, &f.evfd, &f.lockfd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// maxUDPPayload is the most one send may carry.
func (f *fabric) maxUDPPayload() int {
	if f.v4 {
		return maxUDPPayloadV4
	}
	return maxUDPPayloadV6
}

// ipUDPOverhead is what the underlay adds in front of every IB packet.
func (f *fabric) ipUDPOverhead() int {
	if f.v4 {
		return 20 + 8
	}
	return 40 + 8
}

// txMsg is the reusable state of one sendmsg: iovecs pointing at headers,
// payload in registered memory and trailers, so a train leaves without a
// copy or an allocation.
type txMsg struct {
	msg      unix.Msghdr
	iov      [3 * maxTrainSegments]unix.Iovec
	niov     int
	hdr      [maxTrainSegments][maxHeaderLen + wire.AETHLen]byte
	trl      [maxTrainSegments][maxTrailerLen]byte
	segments int // packets in the train
	bytes    int // IB octets in the train
	sa4      unix.RawSockaddrInet4
	sa6      unix.RawSockaddrInet6
	cmsg     [32]byte
	path     icrcPath // the ICRC's start towards the train's destination
}

func (t *txMsg) reset() { t.niov, t.segments, t.bytes = 0, 0, 0 }

// startICRC begins the ICRC of a packet of ibLen octets from f to to, sent
// with IPv4 Identification id.
func (t *txMsg) startICRC(f *fabric, to netip.Addr, id uint16, ibLen int) wire.ICRCDigest {
	d, _ := t.path.of(netip.AddrPortFrom(f.local, f.port), netip.AddrPortFrom(to, f.port)).Start(id, ibLen)
	return d
}

// icrcPath keeps the wire.DatagramPath of the last two endpoints it was
// asked for: the packets of a train share it, and most trains reuse it.
type icrcPath struct {
	path     wire.DatagramPath
	from, to netip.AddrPort
}

func (c *icrcPath) of(from, to netip.AddrPort) *wire.DatagramPath {
	if from != c.from || to != c.to {
		c.path, _ = wire.NewDatagramPath(from.Addr(), to.Addr(), from.Port(), to.Port())
		c.from, c.to = from, to
	}
	return &c.path
}

// add appends one buffer to the datagram (or train) being built.
func (t *txMsg) add(b []byte) {
	if len(b) == 0 {
		return
	}
	iov := &t.iov[t.niov]
	iov.Base = &b[0]
	iov.SetLen(len(b))
	t.niov++
}

var errTooManyIovecs = errors.New("softib: train exceeds iovec room")

// send transmits what was added to the peer's fabric port; segSize > 0
// makes the kernel cut it into segSize datagrams (UDP GSO).
func (f *fabric) send(t *txMsg, to netip.Addr, segSize int) error {
	if t.niov > len(t.iov) {
		return errTooManyIovecs
	}
	t.msg = unix.Msghdr{}
	to = to.Unmap()
	port := f.port
	if f.fwd.IsValid() {
		to, port = f.fwd.Addr().Unmap(), f.fwd.Port()
	}
	if f.v4 {
		t.sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: to.As4()}
		putPort(&t.sa4.Port, port)
		t.msg.Name = (*byte)(unsafe.Pointer(&t.sa4))
		t.msg.Namelen = unix.SizeofSockaddrInet4
	} else {
		t.sa6 = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: to.As16()}
		putPort(&t.sa6.Port, port)
		if to.IsLinkLocalUnicast() || to.IsLinkLocalMulticast() || to.IsMulticast() {
			t.sa6.Scope_id = uint32(f.ifindex)
		}
		t.msg.Name = (*byte)(unsafe.Pointer(&t.sa6))
		t.msg.Namelen = unix.SizeofSockaddrInet6
	}
	t.msg.Iov = &t.iov[0]
	t.msg.SetIovlen(t.niov)
	if segSize > 0 {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&t.cmsg[0]))
		h.Level = unix.SOL_UDP
		h.Type = unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		*(*uint16)(unsafe.Pointer(&t.cmsg[unix.CmsgLen(0)])) = uint16(segSize)
		t.msg.Control = &t.cmsg[0]
		t.msg.SetControllen(unix.CmsgSpace(2))
	}
	for {
		_, _, errno := unix.Syscall(unix.SYS_SENDMSG, uintptr(f.fd), uintptr(unsafe.Pointer(&t.msg)), 0)
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		}
		return errno
	}
}

func putPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

// rxBatch is the receive loop's reusable recvmmsg state, one entry per
// datagram a call may return.
type rxBatch struct {
	hdrs  []mmsghdr
	iov   []unix.Iovec
	names []unix.RawSockaddrInet6
	cmsg  [][128]byte
	bufs  [][]byte
}

const (
	maxRxBatch = 16
	rxBufSize  = 65536 + 4096
)

type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// rxHandler gets every received datagram (GRO trains already cut into
// their segments; seg is the index in the train) with the sender's
// address and UDP port, which may be any (rxe sends from 0xC000 + a hash
// of the QPN), a call after each train (or lone datagram) and one after
// each batch.
type rxHandler interface {
	datagram(b []byte, src netip.AddrPort, dst netip.Addr, seg int)
	endTrain()
	endBatch()
}

func newRxBatch(n int) *rxBatch {
	r := &rxBatch{hdrs: make([]mmsghdr, n), iov: make([]unix.Iovec, n), names: make([]unix.RawSockaddrInet6, n),
		cmsg: make([][128]byte, n), bufs: make([][]byte, n)}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, rxBufSize)
	}
	return r
}

// pollable returns a duplicate of the epoll instance fd registered with
// the Go runtime's poller (an epoll fd is readable while it has events),
// and its raw access.
func pollable(fd int, name string) (*os.File, syscall.RawConn, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("softib: %s: dup: %w", name, err)
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, nil, fmt.Errorf("softib: %s: set non-blocking: %w", name, err)
	}
	f := os.NewFile(uintptr(dup), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("softib: %s: %w", name, err)
	}
	return f, rc, nil
}

// run is the device's one receive goroutine: wait for any socket, drain it
// with recvmmsg, batch datagrams a call, hand each to h. It returns when
// wake is called.
//
// The wait is the Go runtime's poller on the epoll fd, not epoll_wait
// in a system call: a goroutine blocked in a system call keeps its P, and
// while any P is not idle the runtime's sysmon thread wakes every 20 µs
// to look at it: with a ping every 10 ms that was half the daemon's CPU.
func (f *fabric) run(h rxHandler, batch int) {
	r := newRxBatch(batch)
	var events [4]unix.EpollEvent
	stop := false
	// poll handles every ready socket; false once none is (rc.Read then
	// parks until the epoll fd is readable), true to end the loop.
	poll := func(uintptr) bool {
		for {
			n, err := unix.EpollWait(f.epfd, events[:], 0)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				stop = true
				return true
			}
			if n == 0 {
				return false
			}
			empty := true
			for i := 0; i < n; i++ {
				fd := int(events[i].Fd)
				if fd == f.evfd {
					stop = true
					return true
				}
				if !f.drain(fd, fd == f.mcfd, r, h) {
					empty = false
				}
			}
			if empty && n < len(events) {
				// Each socket was read until it was empty; a datagram
				// that came since makes the epoll fd readable again
				// (the runtime's poller is edge-triggered and was reset
				// before this call), so no second epoll_wait is needed.
				return false
			}
		}
	}
	for !stop {
		if err := f.epRC.Read(poll); err != nil {
			return
		}
	}
}

// drain reads fd until it would block, and reports whether it did: false
// when a read failed otherwise (a UDP socket reports an ICMP error that
// way), with datagrams perhaps still queued.
func (f *fabric) drain(fd int, multicast bool, r *rxBatch, h rxHandler) bool {
	for {
		for i := range r.hdrs {
			r.iov[i].Base = &r.bufs[i][0]
			r.iov[i].SetLen(len(r.bufs[i]))
			m := &r.hdrs[i].hdr
			*m = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&r.names[i])), Namelen: unix.SizeofSockaddrInet6, Iov: &r.iov[i], Iovlen: 1, Control: &r.cmsg[i][0]}
			m.SetControllen(len(r.cmsg[i]))
		}
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(len(r.hdrs)), unix.MSG_DONTWAIT, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 || n == 0 {
			h.endBatch()
			return errno == 0 || errno == unix.EAGAIN
		}
		for i := 0; i < int(n); i++ {
			m := &r.hdrs[i]
			src := sourceAddr(&r.names[i])
			dst := f.local
			seg, pktDst := parseRxControl(r.cmsg[i][:m.hdr.Controllen])
			if multicast && pktDst.IsValid() {
				dst = pktDst
			}
			data := r.bufs[i][:m.n]
			if seg <= 0 {
				seg = len(data)
			}
			for j := 0; len(data) > 0; j++ {
				k := min(seg, len(data))
				h.datagram(data[:k], src, dst, j)
				data = data[k:]
			}
			h.endTrain()
		}
		h.endBatch()
		if int(n) < len(r.hdrs) {
			return true
		}
	}
}

// sourceAddr reads a datagram's source address and port.
func sourceAddr(sa *unix.RawSockaddrInet6) netip.AddrPort {
	if sa.Family == unix.AF_INET {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), getPort(sa4.Port))
	}
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), getPort(sa.Port))
}

// getPort reads a port in network order from a raw sockaddr.
func getPort(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// parseRxControl reads the GRO segment size and the packet's destination
// address (for multicast) from the control messages, without allocating.
func parseRxControl(b []byte) (segSize int, dst netip.Addr) {
	for len(b) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(b) {
			return
		}
		data := b[unix.CmsgLen(0):l]
		switch {
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 2:
			if len(data) >= 4 {
				segSize = int(*(*int32)(unsafe.Pointer(&data[0])))
			} else {
				segSize = int(*(*uint16)(unsafe.Pointer(&data[0])))
			}
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			dst = netip.AddrFrom4(pi.Addr)
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			dst = netip.AddrFrom16(pi.Addr)
		}
		next := unix.CmsgSpace(l - unix.CmsgLen(0))
		if next > len(b) {
			return
		}
		b = b[next:]
	}
	return
}
