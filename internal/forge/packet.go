// Package forge builds and sends IB packets the way a hostile third host on
// the underlay would: RoCEv2 packets with a valid ICRC (RC SENDs, ACKs,
// NAKs, RNR NAKs) and CM MADs to QP1, sent from the host's own address or,
// through a raw socket, from someone else's. It also watches a link for the
// QPNs and PSNs such a host could sniff. It exists for the end-to-end tests
// that prove forged packets do no harm; it uses the codecs of the IB wire
// (softib/wire) and cm and adds nothing to them, and no adapter.
package forge

import (
	"fmt"
	"net/netip"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// Port is the UDP port forged packets come from and go to: RoCEv2's.
// softib receivers rebuild the ICRC's UDP header with it as the source
// port too, since their socket does not hand them the real header.
const Port = wire.UDPPort

// Build appends to dst the UDP payload of a RoCEv2 packet (BTH to ICRC)
// carrying p from src to dst's address, with the ICRC a receiver at to
// computes for a packet from src.
func Build(b []byte, src, to netip.Addr, p *wire.Packet) ([]byte, error) {
	start := len(b)
	b, err := wire.AppendPacket(b, p)
	if err != nil {
		return b[:start], err
	}
	pkt := b[start:]
	var hdr [wire.IPv6HeaderLen + wire.UDPHeaderLen]byte
	h, err := wire.AppendIPUDPHeaders(hdr[:0], src, to, Port, Port, 64, len(pkt))
	if err != nil {
		return b[:start], err
	}
	ipLen := len(h) - wire.UDPHeaderLen
	crc, err := wire.ICRC(h[:ipLen], h[ipLen:], pkt[:len(pkt)-wire.ICRCLen])
	if err != nil {
		return b[:start], err
	}
	wire.PutICRC(pkt[len(pkt)-wire.ICRCLen:], crc)
	return b, nil
}

// Ack is an RC Acknowledge (ACK, NAK or RNR NAK, as aeth says) to qpn with
// psn, on the default partition.
func Ack(qpn ib.QPN, psn wire.PSN, aeth wire.AETH) *wire.Packet {
	return &wire.Packet{
		BTH:  wire.BTH{Opcode: wire.OpRCAck, PKey: ib.DefaultPKey, DestQP: qpn, PSN: psn},
		AETH: aeth,
	}
}

// RCSend is an RC SEND Only carrying payload to qpn with psn.
func RCSend(qpn ib.QPN, psn wire.PSN, payload []byte) *wire.Packet {
	return &wire.Packet{
		BTH:     wire.BTH{Opcode: wire.OpRCSendOnly, PKey: ib.DefaultPKey, DestQP: qpn, PSN: psn, AckReq: true},
		Payload: payload,
	}
}

// MAD is a UD SEND Only of a 256-octet management datagram to QP1, as a
// CM sends it.
func MAD(mad []byte) *wire.Packet {
	return &wire.Packet{
		BTH:     wire.BTH{Opcode: wire.OpUDSendOnly, PKey: ib.DefaultPKey, DestQP: ib.QP1, SE: true},
		DETH:    wire.DETH{QKey: ib.GSIQKey, SrcQP: ib.QP1},
		Payload: mad,
	}
}

// Peer is what a REQ claims about its sender: the identity the CM of the
// receiver checks (CA GUID, port GID) and the IPoIB link address parts.
type Peer struct {
	GID   ib.GID // the REQ's primary path local GID
	GUID  uint64 // the REQ's local CA GUID
	UDQPN ib.QPN // the IPoIB UD QPN in the private data (the link address)
	QPN   ib.QPN // the REQ's local QPN: the connection's QP
	PSN   uint32 // the starting PSN
}

// GUIDOf is the CA GUID softib derives from a port GID: its last 8 octets.
func GUIDOf(g ib.GID) uint64 {
	var v uint64
	for _, o := range g[8:] {
		v = v<<8 | uint64(o)
	}
	return v
}

// REQ builds the 256-octet MAD of an IPoIB-CM REQ (RC) from `from` to the
// IPoIB interface whose UD QPN is toUDQPN at GID to, as ipoibd's CM would
// send it, with comm ID commID and transaction ID tid.
func REQ(from Peer, to ib.GID, toUDQPN ib.QPN, commID uint32, tid uint64) ([]byte, error) {
	req := cm.REQ{
		LocalCommID: commID, ServiceID: cm.IPoIBServiceID(toUDQPN), LocalCAGUID: from.GUID,
		LocalQPN: from.QPN & ib.QPNMask, RemoteCMResponseTimeout: 18, LocalCMResponseTimeout: 18,
		TransportType: cm.TransportRC, StartingPSN: from.PSN & 0xffffff, RetryCount: 7,
		PKey: ib.DefaultPKey, PathMTU: ib.MTU4096, RNRRetryCount: 7, MaxCMRetries: 15, SRQ: true,
		Primary: cm.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: from.GID, RemoteGID: to,
			HopLimit: 1, LocalACKTimeout: 14},
	}
	if err := (cm.PrivateData{UDQPN: from.UDQPN & ib.QPNMask, ReceiveMTU: cm.LinuxReceiveMTU}).Encode(req.PrivateData[:]); err != nil {
		return nil, err
	}
	mad := make([]byte, cm.MADLen)
	if err := req.MarshalMAD(mad, tid); err != nil {
		return nil, fmt.Errorf("forge: REQ: %w", err)
	}
	return mad, nil
}

// IPoIBUDP is the payload of an IPoIB-CM message carrying one IPv4 UDP
// datagram from src to dst, port to port: the 4-octet IPoIB header, then
// the IP packet (UDP checksum 0, as IPv4 allows).
func IPoIBUDP(src, dst netip.Addr, port uint16, data []byte) ([]byte, error) {
	if !src.Is4() || !dst.Is4() {
		return nil, fmt.Errorf("forge: IPoIBUDP wants IPv4 addresses, have %v and %v", src, dst)
	}
	b := make([]byte, 4+wire.IPv4HeaderLen+wire.UDPHeaderLen+len(data))
	if err := encap.PutHeader(b, encap.EtherTypeIPv4); err != nil {
		return nil, err
	}
	ip := b[4:]
	n := len(ip)
	ip[0], ip[2], ip[3] = 0x45, byte(n>>8), byte(n)
	ip[8], ip[9] = 64, 17 // TTL, UDP
	s, d := src.As4(), dst.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	putChecksum(ip[10:12], ip[:wire.IPv4HeaderLen])
	u := ip[wire.IPv4HeaderLen:]
	u[0], u[1] = byte(port>>8), byte(port)
	u[2], u[3] = byte(port>>8), byte(port)
	ul := wire.UDPHeaderLen + len(data)
	u[4], u[5] = byte(ul>>8), byte(ul)
	copy(u[wire.UDPHeaderLen:], data)
	return b, nil
}
