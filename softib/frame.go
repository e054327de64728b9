package softib

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
)

// Every header and trailer of a train lives in its txMsg, so framing a
// packet writes only into memory the sender already owns.
const (
	maxHeaderLen  = BTHLen + DETHLen // the largest header set softib sends
	maxTrailerLen = 3 + 4            // pad + ICRC
)

// frame adds packet seg of a train to tx: headers, the payload straight
// from registered memory, then pad and ICRC.
func (d *Device) frame(tx *txMsg, seg int, bth *BTH, deth *DETH, payload []byte, to netip.Addr) {
	pad := PadCount(len(payload))
	bth.PadCnt = pad
	hdr := tx.hdr[seg][:BTHLen]
	_ = bth.Encode(hdr) // fields were range-checked when posted
	if deth != nil {
		hdr = tx.hdr[seg][:BTHLen+DETHLen]
		_ = deth.Encode(hdr[BTHLen:])
	}
	trl := tx.trl[seg][:int(pad)+4]
	clear(trl[:pad])
	ibLen := len(hdr) + len(payload) + len(trl)
	crc := icrcBegin(&tx.scratch, d.fab.local, to, d.fab.port, ibLen)
	crc = icrcHeaders(crc, hdr)
	crc = crc32.Update(crc, crc32.IEEETable, payload)
	crc = crc32.Update(crc, crc32.IEEETable, trl[:pad])
	binary.LittleEndian.PutUint32(trl[pad:], crc)
	tx.add(hdr)
	tx.add(payload)
	tx.add(trl)
	tx.segments++
	tx.bytes += ibLen
}

// frameAck builds an ACK/NAK: BTH, AETH and ICRC in one buffer.
func (d *Device) frameAck(tx *txMsg, bth *BTH, aeth AETH, to netip.Addr) {
	b := tx.hdr[0][:BTHLen+AETHLen+4]
	_ = bth.Encode(b)
	_ = aeth.Encode(b[BTHLen:])
	crc := icrcBegin(&tx.scratch, d.fab.local, to, d.fab.port, len(b))
	crc = icrcHeaders(crc, b[:BTHLen+AETHLen])
	binary.LittleEndian.PutUint32(b[BTHLen+AETHLen:], crc)
	tx.add(b)
	tx.segments++
	tx.bytes += len(b)
}

// icrcScratch holds the masked IP and UDP headers while they are hashed;
// callers own one so that it does not escape to the heap per packet.
type icrcScratch [8 + 40 + 8]byte

// icrcBegin starts the ICRC of an IB packet of ibLen octets (headers to
// ICRC inclusive) between two underlay addresses: the eight 0xFF octets
// standing in for the LRH, then the IP and UDP headers with their variant
// fields masked. softib reconstructs the IP header from the socket
// addresses (IPv4: ID 0 and DF, as Linux sends unconnected DF datagrams),
// because a UDP socket does not see the one the kernel wrote.
func icrcBegin(b *icrcScratch, src, dst netip.Addr, port uint16, ibLen int) uint32 {
	n := 8
	for i := range 8 {
		b[i] = 0xff
	}
	udpLen := 8 + ibLen
	if src.Is4() {
		ip := b[n : n+20]
		ip[0], ip[1] = 0x45, 0xff // version/IHL, TOS masked
		binary.BigEndian.PutUint16(ip[2:], uint16(20+udpLen))
		ip[6] = 0x40                // DF, ID 0
		ip[8], ip[9] = 0xff, 17     // TTL masked, UDP
		ip[10], ip[11] = 0xff, 0xff // header checksum masked
		s, t := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], t[:])
		n += 20
	} else {
		ip := b[n : n+40]
		ip[0], ip[1], ip[2], ip[3] = 0x6f, 0xff, 0xff, 0xff // traffic class and flow label masked
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6], ip[7] = 17, 0xff // UDP, hop limit masked
		s, t := src.As16(), dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], t[:])
		n += 40
	}
	udp := b[n : n+8]
	binary.BigEndian.PutUint16(udp[0:], port)
	binary.BigEndian.PutUint16(udp[2:], port)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	udp[6], udp[7] = 0xff, 0xff // checksum masked
	n += 8
	return crc32.Update(0, crc32.IEEETable, b[:n])
}

var maskedOctet = []byte{0xff}

// icrcHeaders continues the ICRC over the transport headers, with BTH
// octet 4 (FECN, BECN, reserved) masked.
func icrcHeaders(crc uint32, hdr []byte) uint32 {
	crc = crc32.Update(crc, crc32.IEEETable, hdr[:4])
	crc = crc32.Update(crc, crc32.IEEETable, maskedOctet)
	return crc32.Update(crc, crc32.IEEETable, hdr[5:])
}

// checkICRC verifies the ICRC of a received packet.
func checkICRC(scratch *icrcScratch, b []byte, src, dst netip.Addr, port uint16) bool {
	return len(b) >= BTHLen+ICRCLen && icrcOf(scratch, b, src, dst, port) == binary.LittleEndian.Uint32(b[len(b)-ICRCLen:])
}

// checkICRCValue computes the ICRC a packet (ICRC slot included in b) must
// carry.
func checkICRCValue(b []byte, src, dst netip.Addr, port uint16) uint32 {
	return icrcOf(new(icrcScratch), b, src, dst, port)
}

func icrcOf(scratch *icrcScratch, b []byte, src, dst netip.Addr, port uint16) uint32 {
	body := b[:len(b)-ICRCLen]
	crc := icrcBegin(scratch, src, dst, port, len(b))
	crc = icrcHeaders(crc, body[:BTHLen])
	return crc32.Update(crc, crc32.IEEETable, body[BTHLen:])
}

// ICRC computes the invariant CRC of a packet from its real IP and UDP
// headers (IPv4 without options, or IPv6) and the IB packet up to, not
// including, the ICRC. Captures and tests use it; the datapath builds the
// same string incrementally in icrcBegin.
func ICRC(ipUDP, ibPacket []byte) (uint32, error) {
	var b [8 + 40 + 8]byte
	for i := range 8 {
		b[i] = 0xff
	}
	var n int
	switch {
	case len(ipUDP) == 20+8 && ipUDP[0] == 0x45:
		n = 8 + copy(b[8:], ipUDP)
		b[8+1] = 0xff                 // TOS
		b[8+8] = 0xff                 // TTL
		b[8+10], b[8+11] = 0xff, 0xff // header checksum
	case len(ipUDP) == 40+8 && ipUDP[0]>>4 == 6:
		n = 8 + copy(b[8:], ipUDP)
		b[8], b[9], b[10], b[11] = 0x6f|b[8]&0xf0&0x60, 0xff, 0xff, 0xff // traffic class, flow label
		b[8+7] = 0xff                                                    // hop limit
	default:
		return 0, errorf("ICRC: %d octets of IP and UDP header, want 28 (IPv4) or 48 (IPv6)", len(ipUDP))
	}
	b[n-2], b[n-1] = 0xff, 0xff // UDP checksum
	if len(ibPacket) < BTHLen {
		return 0, ib.NeedLen("ICRC", "BTH", ibPacket, BTHLen)
	}
	crc := crc32.Update(0, crc32.IEEETable, b[:n])
	crc = icrcHeaders(crc, ibPacket[:BTHLen])
	return crc32.Update(crc, crc32.IEEETable, ibPacket[BTHLen:]), nil
}
