package forge

import (
	"fmt"
	"net/netip"

	"github.com/ipoibd/ipoibd/inetsum"
	"github.com/ipoibd/ipoibd/softib/wire"
	"golang.org/x/sys/unix"
)

// Sender puts forged packets on the underlay from one source address:
// its host's own (a UDP socket, as any program may open) or any other
// (a raw socket writing its own IP header, which needs CAP_NET_RAW).
// A Sender belongs to the network namespace it was opened in.
type Sender struct {
	src netip.Addr
	fd  int
	raw bool
	buf []byte
}

// Open returns a Sender of UDP datagrams from src, port 4791; src must be
// an address of this host.
func Open(src netip.Addr) (*Sender, error) {
	src = src.Unmap()
	family := unix.AF_INET
	if src.Is6() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("forge: UDP socket: %w", err)
	}
	if src.Is4() {
		// DF, as softib and rxe send: Linux then gives an unconnected
		// socket's datagrams the IPv4 ID 0, the one Build's ICRC assumes.
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}
	// Whatever answers the forged packets (REPs, REJs, ACKs) lands here
	// unread; let the kernel drop it rather than queue it.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4096)
	if err := unix.Bind(fd, sockaddr(src, Port)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("forge: bind %v:%d: %w", src, Port, err)
	}
	return &Sender{src: src, fd: fd}, nil
}

// OpenSpoofed returns a Sender whose packets claim to come from src,
// whatever this host's addresses are: a raw socket with the IP header
// written here.
func OpenSpoofed(src netip.Addr) (*Sender, error) {
	src = src.Unmap()
	family := unix.AF_INET
	if src.Is6() {
		family = unix.AF_INET6
	}
	// IPPROTO_RAW implies IP_HDRINCL (IPv4) and its IPv6 counterpart.
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return nil, fmt.Errorf("forge: raw socket: %w", err)
	}
	return &Sender{src: src, fd: fd, raw: true}, nil
}

// Src is the source address the Sender's packets carry.
func (s *Sender) Src() netip.Addr { return s.src }

// Close releases the socket.
func (s *Sender) Close() error { return unix.Close(s.fd) }

// Send builds p for dst (ICRC included) and sends it.
func (s *Sender) Send(dst netip.Addr, p *wire.Packet) error {
	dst = dst.Unmap()
	b := s.buf[:0]
	var ipudp int
	if s.raw {
		// The IP and UDP headers are ours to write; the length is fixed
		// below once the IB packet is built.
		var err error
		if b, err = wire.AppendIPUDPHeaders(b, s.src, dst, Port, Port, 64, 0); err != nil {
			return fmt.Errorf("forge: %w", err)
		}
		ipudp = len(b)
	}
	b, err := Build(b, s.src, dst, p)
	if err != nil {
		return fmt.Errorf("forge: %w", err)
	}
	s.buf = b
	if s.raw {
		// Headers again, now with the length; the ICRC masks the UDP
		// checksum, so filling it (IPv6 demands one) changes nothing.
		if _, err := wire.AppendIPUDPHeaders(b[:0], s.src, dst, Port, Port, 64, len(b)-ipudp); err != nil {
			return fmt.Errorf("forge: %w", err)
		}
		if dst.Is6() {
			u := b[wire.IPv6HeaderLen:]
			sum := inetsum.PseudoIPv6(s.src, dst, len(u), unix.IPPROTO_UDP)
			c := inetsum.Checksum(sum, u)
			if c == 0 {
				c = 0xffff
			}
			u[6], u[7] = byte(c>>8), byte(c)
		}
		return sendto(s.fd, b, sockaddr(dst, 0))
	}
	return sendto(s.fd, b, sockaddr(dst, Port))
}

func sendto(fd int, b []byte, to unix.Sockaddr) error {
	for {
		err := unix.Sendto(fd, b, 0, to)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.ENOBUFS, unix.EAGAIN:
			// The host's own queue is full (a flood): wait for room as a
			// blocking socket would, never drop silently.
			var fds = []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			_, _ = unix.Poll(fds, 10)
			continue
		default:
			return fmt.Errorf("forge: send: %w", err)
		}
	}
}

func sockaddr(a netip.Addr, port uint16) unix.Sockaddr {
	if a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4(), Port: int(port)}
	}
	return &unix.SockaddrInet6{Addr: a.As16(), Port: int(port)}
}

func putChecksum(dst, hdr []byte) {
	dst[0], dst[1] = 0, 0
	c := inetsum.Checksum(0, hdr)
	dst[0], dst[1] = byte(c>>8), byte(c)
}
