// Command relay is the "TUN relay limit" of scripts/bench.sh: the least
// work a TUN-based tunnel can do between two hosts, hence the most such a
// driver (ipoibd among them) can expect on the machine. It moves each packet
// TUN → UDP → UDP → TUN through the same kernel interfaces ipoibd uses, at
// their fastest settings, and does no protocol work at all:
//
//   - the TUN has IFF_VNET_HDR and TUNSETOFFLOAD (CSUM, TSO4/6, USO4/6 where
//     the kernel has it): a read is a virtio-net header and a packet of up
//     to 64 KiB whose checksum the kernel has not computed;
//   - that header and packet go out as a UDP GSO train of 4096-octet
//     datagrams (UDP_SEGMENT, the size of ipoibd's segments; see maxTrain),
//     and the peer's UDP_GRO socket reads the whole train at once;
//   - the peer writes the bytes to its TUN as they came, header included,
//     so the checksum is never computed on either side.
//
// By hand with golang.org/x/sys/unix rather than golang.zx2c4.com/wireguard/tun:
// that package splits every super-packet into MTU-sized packets on read
// (checksums included) and coalesces them again on write. That is protocol
// work a ceiling must not do; passing the virtio-net header through is
// less code and less work.
//
// One thread per direction, blocking syscalls: no poller wake-ups on the
// per-packet path. There is no reliability, no ordering and no security.
//
// With -conform it is instead the least work a driver with IPoIB's wire
// can do (conform.go): standard IP packets with complete checksums on the
// wire, and a CRC over every datagram, as softib's ICRC.
//
//	relay -tun rl0 -mtu 65520 -local 10.79.0.1:5556 -remote 10.79.0.2:5556
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

const (
	vnetHdrLen = 10 // struct virtio_net_hdr, the TUN's default size
	segment    = 4096
	// maxTrain is the longest train that reaches the peer's socket whole:
	// measured on scripts/cluster.sh's veth and bridge, a train arrives as
	// one read while it and its Ethernet, IPv4 and UDP headers fit in 64 KiB,
	// and as separate datagrams beyond. A longer TUN read (a 65520-octet
	// packet and its header) sends its last octets as a datagram of their own.
	maxTrain = 65535 - 14 - 20 - 8
	bufSize  = 1 << 17 // more than any TUN read or GRO train
	txQueue  = 10000   // as ipoibd's TUN: the default 500 drops under iperf3
	// As ipoibd's fabric sockets: room for bursts of trains. When other work
	// starves the receiving thread, trains still overflow it (Udp
	// RcvbufErrors), as they would ipoibd's.
	sockBuf = 8 << 20
)

func main() {
	name := flag.String("tun", "rl0", "TUN interface to make")
	mtu := flag.Int("mtu", 65520, "the TUN's MTU")
	local := flag.String("local", "", "IPv4 UDP address to bind (addr:port)")
	remote := flag.String("remote", "", "the peer relay's IPv4 UDP address (addr:port)")
	conform := flag.Bool("conform", false, "carry standard IP packets with complete checksums, each datagram CRC'd, as an IPoIB driver on softib must (conform.go)")
	flag.Parse()
	la, err1 := netip.ParseAddrPort(*local)
	ra, err2 := netip.ParseAddrPort(*remote)
	if err := errors.Join(err1, err2); err != nil {
		fatal(err)
	}
	tun, offloads, err := openTUN(*name, *mtu)
	if err != nil {
		fatal(err)
	}
	sock, err := openUDP(la, ra)
	if err != nil {
		fatal(err)
	}
	fmt.Fprintf(os.Stderr, "relay: ready: %s MTU %d offloads %#x, %s → %s\n", *name, *mtu, offloads, la, ra)
	if *conform {
		go conformTUNToUDP(tun, sock)
		conformUDPToTUN(sock, tun)
		return
	}
	go tunToUDP(tun, sock)
	udpToTUN(sock, tun)
}

func openTUN(name string, mtu int) (fd int, offloads uint, err error) {
	fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0) // blocking
	if err != nil {
		return -1, 0, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return -1, 0, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return -1, 0, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	tso := uint(unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6)
	for _, offloads = range []uint{tso | unix.TUN_F_USO4 | unix.TUN_F_USO6, tso} { // USO since Linux 6.2
		if err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, int(offloads)); err == nil {
			break
		}
	}
	if err != nil {
		return -1, 0, fmt.Errorf("TUNSETOFFLOAD: %w", err)
	}
	// MTU, queue length and up through an ioctl socket of this namespace.
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, 0, err
	}
	defer unix.Close(s)
	ifr.SetUint32(uint32(mtu))
	if err := unix.IoctlIfreq(s, unix.SIOCSIFMTU, ifr); err != nil {
		return -1, 0, fmt.Errorf("%s MTU %d: %w", name, mtu, err)
	}
	ifr.SetUint32(txQueue)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFTXQLEN, ifr); err != nil {
		return -1, 0, fmt.Errorf("%s txqueuelen: %w", name, err)
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return -1, 0, err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return -1, 0, fmt.Errorf("%s up: %w", name, err)
	}
	return fd, offloads, nil
}

// openUDP: a blocking UDP socket connected to the peer (so it takes only
// the peer's datagrams and caches the route), sending GSO trains of
// 4096-octet datagrams and receiving GRO'd trains. IPv4 only: maxTrain
// counts IPv4's header (the bench's underlay).
func openUDP(la, ra netip.AddrPort) (int, error) {
	if !la.Addr().Is4() || !ra.Addr().Is4() {
		return -1, fmt.Errorf("%s, %s: IPv4 addresses only", la, ra)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0], sockBuf) != nil { // not root: up to the sysctl limit
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[1], sockBuf)
		}
	}
	// Set on the socket, UDP_SEGMENT applies to every send: a send longer
	// than one segment leaves as a GSO train, a shorter one as it is.
	if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT, segment); err != nil {
		return -1, fmt.Errorf("UDP_SEGMENT: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
		return -1, fmt.Errorf("UDP_GRO: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(la.Port()), Addr: la.Addr().As4()}); err != nil {
		return -1, fmt.Errorf("bind %s: %w", la, err)
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(ra.Port()), Addr: ra.Addr().As4()}); err != nil {
		return -1, fmt.Errorf("connect %s: %w", ra, err)
	}
	return fd, nil
}

// tunToUDP sends each TUN read (virtio-net header and packet) as one train.
func tunToUDP(tun, sock int) {
	runtime.LockOSThread()
	buf := make([]byte, bufSize)
	for {
		n, err := unix.Read(tun, buf)
		if err != nil {
			transient(err, "TUN read")
			continue
		}
		if n > maxTrain {
			send(sock, buf[:maxTrain])
			send(sock, buf[maxTrain:n])
		} else {
			send(sock, buf[:n])
		}
	}
}

func send(sock int, b []byte) {
	if _, err := unix.Write(sock, b); err != nil {
		transient(err, "UDP send")
	}
}

// udpToTUN writes each train to the TUN as it came. A frame's length is its
// IP header's; a frame longer than one train waits for its last octets.
func udpToTUN(sock, tun int) {
	runtime.LockOSThread()
	buf := make([]byte, bufSize)
	have := 0 // the first train of a frame, held until its end arrives
	for {
		n, err := unix.Read(sock, buf[have:])
		if err != nil {
			transient(err, "UDP receive")
			continue
		}
		if have > 0 {
			if have+n == frameLen(buf[:have]) {
				write(tun, buf[:have+n])
				have = 0
				continue
			}
			// The end was lost: this is the start of another frame.
			copy(buf, buf[have:have+n])
			have = 0
			dropped("frame without its end")
		}
		switch want := frameLen(buf[:n]); {
		case want == n:
			write(tun, buf[:n])
		case want > n && n == maxTrain:
			have = n
		default:
			dropped(fmt.Sprintf("%d-octet datagram that starts no frame (its train was lost?)", n))
		}
	}
}

// frameLen is the length of the virtio-net header and IP packet that b
// starts with, by the IP header (0 if b does not start with one).
func frameLen(b []byte) int {
	if len(b) < vnetHdrLen {
		return 0
	}
	if l := ipLen(b[vnetHdrLen:]); l > 0 {
		return vnetHdrLen + l
	}
	return 0
}

// ipLen is the length of the IP packet b starts with, by its header (0 if
// b does not start with one).
func ipLen(b []byte) int {
	if len(b) < 20 {
		return 0
	}
	switch b[0] >> 4 {
	case 4:
		return int(binary.BigEndian.Uint16(b[2:4]))
	case 6:
		if len(b) >= 40 {
			return 40 + int(binary.BigEndian.Uint16(b[4:6]))
		}
	}
	return 0
}

func write(tun int, b []byte) {
	if _, err := unix.Write(tun, b); err != nil {
		transient(err, "TUN write")
	}
}

var reported atomic.Int32

// transient reports the first few errors and carries on: a relay between
// two test hosts has no error to stop for, only packets to lose (before the
// peer listens, its ICMP port unreachable comes back as ECONNREFUSED).
func transient(err error, what string) {
	if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
		return
	}
	if errors.Is(err, unix.EBADFD) || errors.Is(err, unix.EBADF) {
		fatal(fmt.Errorf("%s: %w", what, err))
	}
	if reported.Add(1) <= 10 {
		fmt.Fprintf(os.Stderr, "relay: %s: %v\n", what, err)
	}
}

func dropped(what string) {
	if reported.Add(1) <= 10 {
		fmt.Fprintf(os.Stderr, "relay: dropped a %s\n", what)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "relay:", err)
	os.Exit(1)
}
