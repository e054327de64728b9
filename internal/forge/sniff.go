package forge

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/ipoibd/ipoibd/softib/wire"
	"golang.org/x/sys/unix"
)

// Seen is one RoCEv2 packet a Sniffer saw: its underlay addresses and its
// transport headers (the first packet's, when the kernel handed over a
// segmentation-offload batch).
type Seen struct {
	Src, Dst netip.Addr
	BTH      wire.BTH
	AETH     wire.AETH // RC Acknowledge only
}

// Sniffer watches one link for RoCEv2 packets in both directions, as a
// host on a mirror port of the switch would.
type Sniffer struct {
	fd  int
	buf []byte
}

// Sniff starts watching the interface called ifname in the current
// network namespace.
func Sniff(ifname string) (*Sniffer, error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("forge: sniff: %w", err)
	}
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("forge: packet socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifc.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("forge: bind to %s: %w", ifname, err)
	}
	tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("forge: SO_RCVTIMEO: %w", err)
	}
	return &Sniffer{fd: fd, buf: make([]byte, 65536)}, nil
}

// Close stops watching.
func (s *Sniffer) Close() error { return unix.Close(s.fd) }

// ErrNotSeen is Await's error when no packet matched before the deadline.
var ErrNotSeen = errors.New("forge: no matching packet seen")

// Await returns the first packet from now on that match accepts, or
// ErrNotSeen at the deadline.
func (s *Sniffer) Await(deadline time.Time, match func(Seen) bool) (Seen, error) {
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(s.fd, s.buf, 0)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			continue
		case err != nil:
			return Seen{}, fmt.Errorf("forge: sniff: %w", err)
		}
		if p, ok := parseSeen(s.buf[:n]); ok && match(p) {
			return p, nil
		}
	}
	return Seen{}, ErrNotSeen
}

// parseSeen reads the headers of an IP packet carrying RoCEv2. The
// lengths in the headers are not checked against the packet: a GSO batch
// is seen whole, and only its first BTH matters here.
func parseSeen(b []byte) (Seen, bool) {
	var s Seen
	var udp []byte
	switch {
	case len(b) >= wire.IPv4HeaderLen && b[0]>>4 == 4:
		ihl := int(b[0]&0xf) * 4
		if b[9] != unix.IPPROTO_UDP || len(b) < ihl+wire.UDPHeaderLen {
			return s, false
		}
		s.Src, s.Dst = netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
		udp = b[ihl:]
	case len(b) >= wire.IPv6HeaderLen+wire.UDPHeaderLen && b[0]>>4 == 6:
		if b[6] != unix.IPPROTO_UDP {
			return s, false
		}
		s.Src, s.Dst = netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40]))
		udp = b[wire.IPv6HeaderLen:]
	default:
		return s, false
	}
	if int(udp[2])<<8|int(udp[3]) != Port {
		return s, false
	}
	ibp := udp[wire.UDPHeaderLen:]
	bth, err := wire.DecodeBTH(ibp)
	if err != nil {
		return s, false
	}
	s.BTH = bth
	if bth.Opcode == wire.OpRCAck {
		if s.AETH, err = wire.DecodeAETH(ibp[wire.BTHLen:]); err != nil {
			return s, false
		}
	}
	return s, true
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
