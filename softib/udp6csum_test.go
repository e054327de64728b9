package softib

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/softib/wire"
	"golang.org/x/sys/unix"
)

// rxe sends RoCEv2 over IPv6 with UDP checksum 0 (prepare_udp_hdr), which
// a Linux UDPv6 socket drops unless it opted in with UDP_NO_CHECK6_RX: found
// by ibv_*_pingpong on rxe against softib in the test bed, where every
// IPv6 packet from rxe vanished. Here a zero-checksum datagram (what
// UDP_NO_CHECK6_TX sends) must reach a UD QP.
func TestIPv6ZeroUDPChecksumAccepted(t *testing.T) {
	const qkey = 0x11111111
	port := testutil.Port(14840)
	h := newHost(t, "::1", port)
	q := udQP(t, h, qkey)
	if _, err := q.PostRecv([]ib.RecvWR{{ID: 7, SGE: h.slot(0, 64+ib.GRHLen)}}); err != nil {
		t.Fatal(err)
	}

	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: netip.IPv6Loopback().As16()}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	srcPort := uint16(sa.(*unix.SockaddrInet6).Port)

	payload := []byte("zero checksum") // 13 octets: 3 of pad
	pad := wire.PadCount(len(payload))
	pkt := make([]byte, wire.BTHLen+wire.DETHLen, wire.BTHLen+wire.DETHLen+len(payload)+int(pad)+wire.ICRCLen)
	if err := (wire.BTH{Opcode: wire.OpUDSendOnly, PKey: ib.DefaultPKey, DestQP: q.Num(), PSN: 1, PadCnt: pad}).Encode(pkt); err != nil {
		t.Fatal(err)
	}
	if err := (wire.DETH{QKey: qkey, SrcQP: 0x123}).Encode(pkt[wire.BTHLen:]); err != nil {
		t.Fatal(err)
	}
	pkt = append(pkt, payload...)
	pkt = append(pkt, make([]byte, pad)...)
	lo := netip.IPv6Loopback()
	hdrs, err := wire.AppendIPUDPHeaders(nil, lo, lo, srcPort, port, 64, len(pkt)+wire.ICRCLen)
	if err != nil {
		t.Fatal(err)
	}
	crc, err := wire.ICRC(hdrs[:wire.IPv6HeaderLen], hdrs[wire.IPv6HeaderLen:], pkt)
	if err != nil {
		t.Fatal(err)
	}
	pkt = append(pkt, 0, 0, 0, 0)
	wire.PutICRC(pkt[len(pkt)-wire.ICRCLen:], crc)
	if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet6{Addr: lo.As16(), Port: int(port)}); err != nil {
		t.Fatal(err)
	}

	wc := poll(t, h.rcq, 1, 2*time.Second)[0]
	if wc.Status != ib.WCSuccess || wc.ID != 7 || wc.SrcQPN != 0x123 || wc.ByteLen != uint32(ib.GRHLen+len(payload)) {
		t.Fatalf("receive completion %+v", wc)
	}
	if got := h.bytes(h.slot(0, ib.GRHLen+len(payload)))[ib.GRHLen:]; string(got) != string(payload) {
		t.Errorf("payload %q, want %q", got, payload)
	}
}
