package softib

import (
	"encoding/binary"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/inetsum"
	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/softib/wire"
	"golang.org/x/sys/unix"
)

// tunWire is a softib device whose underlay is a TUN interface in a
// namespace: every datagram it sends is read back as the IP packet the
// kernel put on the wire (a TUN device has no segmentation offload, so a
// GSO train arrives cut into its datagrams, with the IDs the kernel gave
// them), and any IP packet written to it reaches the device as from a
// foreign stack (rxe, hardware).
type tunWire struct {
	t    *testing.T
	tun  *os.File
	h    *host
	self netip.Addr // the device's underlay address
	peer netip.Addr // a host behind the TUN
}

func newTunWire(t *testing.T) *tunWire {
	t.Helper()
	n := testnet.New(t, testnet.Config{Hosts: 1})
	w := &tunWire{t: t, self: netip.MustParseAddr("10.66.0.1"), peer: netip.MustParseAddr("10.66.0.2")}
	n.In(0, func() {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			t.Skipf("no TUN: %v", err)
		}
		ifr, _ := unix.NewIfreq("sib0")
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			t.Fatalf("TUNSETIFF: %v", err)
		}
		w.tun = os.NewFile(uintptr(fd), "sib0")
	})
	t.Cleanup(func() { w.tun.Close() })
	for _, args := range [][]string{
		{"link", "set", "sib0", "mtu", "9000"},
		{"addr", "add", "10.66.0.1/24", "dev", "sib0"},
		{"link", "set", "sib0", "up"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", n.Hosts[0].NS}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	n.In(0, func() { w.h = newHost(t, w.self.String(), wire.UDPPort) })
	return w
}

// read returns the next IPv4/UDP packet the device sent.
func (w *tunWire) read() []byte {
	w.t.Helper()
	buf := make([]byte, 65536)
	if err := w.tun.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		w.t.Fatal(err)
	}
	for {
		n, err := w.tun.Read(buf)
		if err != nil {
			w.t.Fatalf("reading the TUN: %v", err)
		}
		p := buf[:n]
		if len(p) >= wire.IPv4HeaderLen+wire.UDPHeaderLen && p[0] == 0x45 && p[9] == unix.IPPROTO_UDP {
			return p
		}
		// Anything else (IPv6 router solicitations...) is not ours.
	}
}

// write injects an IPv4/UDP packet carrying ibp (ICRC slot included,
// filled in here unless badICRC) from src to the device, with the given
// IPv4 Identification.
func (w *tunWire) write(src netip.AddrPort, id uint16, ibp []byte, badICRC bool) {
	w.t.Helper()
	hdr, err := wire.AppendIPUDPHeaders(nil, src.Addr(), w.self, src.Port(), wire.UDPPort, 64, len(ibp))
	if err != nil {
		w.t.Fatal(err)
	}
	binary.BigEndian.PutUint16(hdr[4:6], id)
	hdr[10], hdr[11] = 0, 0
	binary.BigEndian.PutUint16(hdr[10:12], inetsum.Checksum(0, hdr[:wire.IPv4HeaderLen]))
	crc, err := wire.ICRC(hdr[:wire.IPv4HeaderLen], hdr[wire.IPv4HeaderLen:], ibp[:len(ibp)-wire.ICRCLen])
	if err != nil {
		w.t.Fatal(err)
	}
	if badICRC {
		crc ^= 0x00100000
	}
	wire.PutICRC(ibp[len(ibp)-wire.ICRCLen:], crc)
	if _, err := w.tun.Write(append(hdr, ibp...)); err != nil {
		w.t.Fatalf("writing the TUN: %v", err)
	}
}

// rcQP makes an RC QP of the device connected to QPN peerQPN at the peer.
func (w *tunWire) rcQP(peerQPN ib.QPN, sendPSN, recvPSN uint32) ib.QP {
	w.t.Helper()
	h := w.h
	q, err := h.dev.CreateQP(ib.QPAttr{Type: ib.RC, SendCQ: h.scq, RecvCQ: h.rcq, MaxSend: 64, MaxRecv: 64})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, m := range []ib.QPModify{
		{State: ib.StateInit, PKey: ib.DefaultPKey},
		{State: ib.StateRTR, DestGID: ib.GIDFromAddr(w.peer), DestQPN: peerQPN, PathMTU: ib.MTU4096, RecvPSN: recvPSN, MinRNRTmr: 1},
		{State: ib.StateRTS, SendPSN: sendPSN, Timeout: 18, RetryCount: 7, RNRRetry: 7},
	} {
		if err := q.Modify(m); err != nil {
			w.t.Fatal(err)
		}
	}
	return q
}

// waitCounter waits until the device counter reaches want: the receive
// goroutine counts a drop once it has dealt with the packet.
func waitCounter(t *testing.T, d *Device, name string, want uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for CounterValue(d.Counters(), name) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d, want %d", name, CounterValue(d.Counters(), name), want)
		}
		time.Sleep(time.Millisecond)
	}
	if got := CounterValue(d.Counters(), name); got != want {
		t.Fatalf("%s = %d, want %d", name, got, want)
	}
}

// A GSO train leaves as datagrams whose IPv4 IDs the kernel numbered 0,
// 1, 2, ... (inet_gso_segment), and every datagram's ICRC, recomputed
// from the bytes on the wire, is right: a receiver that checks the ICRC
// over the real IP header (rxe, hardware) takes them all.
func TestGSOTrainICRCOnTheWire(t *testing.T) {
	w := newTunWire(t)
	const peerQPN = 0x5a5a5
	q := w.rcQP(peerQPN, 0x10, 0x20)
	// 65536 octets at path MTU 4096: 16 packets, which leave as a train of
	// 15 (the most 65507 octets of UDP payload hold) and one more.
	s := w.h.slot(0, 65536)
	testutil.Fill(w.h.bytes(s), 3)
	if _, err := q.PostSend([]ib.SendWR{{ID: 1, SGE: s}}); err != nil {
		t.Fatal(err)
	}
	wantIDs := []uint16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0}
	var payload []byte
	for i, wantID := range wantIDs {
		pkt := w.read()
		ip, udp, ibp, icrc := splitIPUDP(t, pkt)
		if id := binary.BigEndian.Uint16(ip[4:6]); id != wantID {
			t.Errorf("datagram %d: IPv4 ID %d, want %d", i, id, wantID)
		}
		if ip[6]&0x40 == 0 {
			t.Errorf("datagram %d: DF not set", i)
		}
		if port := binary.BigEndian.Uint16(udp[2:4]); port != wire.UDPPort {
			t.Errorf("datagram %d: UDP destination port %d", i, port)
		}
		want, err := wire.ICRC(ip, udp, ibp)
		if err != nil {
			t.Fatal(err)
		}
		if got := wire.GetICRC(icrc); got != want {
			t.Errorf("datagram %d (ID %d): ICRC %08x, the real headers give %08x", i, binary.BigEndian.Uint16(ip[4:6]), got, want)
		}
		var p wire.Packet
		if err := wire.ParsePacket(pkt[wire.IPv4HeaderLen+wire.UDPHeaderLen:], &p); err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if p.BTH.PSN != wire.PSN(0x10+i) || p.BTH.DestQP != peerQPN {
			t.Errorf("datagram %d: PSN %#x to QP %#x", i, p.BTH.PSN, p.BTH.DestQP)
		}
		payload = append(payload, p.Payload...)
	}
	if string(payload) != string(w.h.bytes(s)) {
		t.Error("the datagrams do not carry the message")
	}
}

// Packets from a foreign RoCEv2 stack: any UDP source port (rxe sends from
// 0xC000 + a hash of the QPN) and any IPv4 ID, both covered by the ICRC,
// are taken; a wrong ICRC or a stranger's address are not.
func TestForeignSenderAnySourcePortAndID(t *testing.T) {
	w := newTunWire(t)
	const peerQPN = 0x31337
	q := w.rcQP(peerQPN, 0x100, 0x200)
	if _, err := q.PostRecv([]ib.RecvWR{{ID: 7, SGE: w.h.slot(1, 4096)}}); err != nil {
		t.Fatal(err)
	}
	send := func(psn wire.PSN, payload string) []byte {
		b := make([]byte, wire.BTHLen+len(payload)+wire.ICRCLen)
		(&wire.BTH{Opcode: wire.OpRCSendOnly, PKey: ib.DefaultPKey, DestQP: q.Num(), PSN: psn, AckReq: true}).Encode(b)
		copy(b[wire.BTHLen:], payload)
		return b
	}
	peer := func(port uint16) netip.AddrPort { return netip.AddrPortFrom(w.peer, port) }
	stranger := netip.AddrPortFrom(netip.MustParseAddr("10.66.0.3"), 0xc001)

	w.write(peer(0xc1a5), 0x1234, send(0x200, "bad!"), true)
	waitCounter(t, w.h.dev, "rx_drop_bad_icrc", 1)
	w.write(stranger, 0x4321, send(0x200, "evil"), false)
	waitCounter(t, w.h.dev, "rx_drop_wrong_source", 1)
	w.write(peer(0xc1a5), 0xbeef, send(0x200, "real"), false)
	wc := poll(t, w.h.rcq, 1, 5*time.Second)[0]
	if wc.Status != ib.WCSuccess || wc.ID != 7 || string(w.h.bytes(w.h.slot(1, int(wc.ByteLen)))) != "real" {
		t.Fatalf("receive %+v", wc)
	}
	// The ACK goes back to the fabric port (softib sends from 4791).
	ack := w.read()
	var p wire.Packet
	if err := wire.ParsePacket(ack[wire.IPv4HeaderLen+wire.UDPHeaderLen:], &p); err != nil || p.BTH.Opcode != wire.OpRCAck || p.BTH.PSN != 0x200 || p.BTH.DestQP != peerQPN {
		t.Fatalf("ACK %+v, %v", p.BTH, err)
	}

	// The requester side: a send, acknowledged from another port and ID.
	s := w.h.slot(2, 100)
	if _, err := q.PostSend([]ib.SendWR{{ID: 9, SGE: s}}); err != nil {
		t.Fatal(err)
	}
	if err := wire.ParsePacket(w.read()[wire.IPv4HeaderLen+wire.UDPHeaderLen:], &p); err != nil || p.BTH.PSN != 0x100 {
		t.Fatalf("send %+v, %v", p.BTH, err)
	}
	ackOf := func(psn wire.PSN) []byte {
		b := make([]byte, wire.BTHLen+wire.AETHLen+wire.ICRCLen)
		(&wire.BTH{Opcode: wire.OpRCAck, PKey: ib.DefaultPKey, DestQP: q.Num(), PSN: psn}).Encode(b)
		wire.ACK(1).Encode(b[wire.BTHLen:])
		return b
	}
	w.write(stranger, 7, ackOf(0x100), false)
	waitCounter(t, w.h.dev, "rx_drop_wrong_source", 2)
	w.write(peer(0xd00d), 0x8001, ackOf(0x100), false)
	if wc := poll(t, w.h.scq, 1, 5*time.Second)[0]; wc.Status != ib.WCSuccess || wc.ID != 9 {
		t.Fatalf("send completion %+v", wc)
	}
	if v := CounterValue(w.h.dev.Counters(), "rx_drop_bad_icrc"); v != 1 {
		t.Errorf("rx_drop_bad_icrc = %d, want 1", v)
	}
}

// splitIPUDP splits a captured packet into IP header, UDP header, IB
// packet without ICRC and the ICRC octets.
func splitIPUDP(t testing.TB, pkt []byte) (ip, udp, ibp, icrc []byte) {
	t.Helper()
	n := wire.IPv4HeaderLen
	if pkt[0]>>4 == 6 {
		n = wire.IPv6HeaderLen
	}
	return pkt[:n], pkt[n : n+wire.UDPHeaderLen], pkt[n+wire.UDPHeaderLen : len(pkt)-wire.ICRCLen], pkt[len(pkt)-wire.ICRCLen:]
}
