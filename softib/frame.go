package softib

import (
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
)

// Every header and trailer of a train lives in its txMsg, so framing a
// packet writes only into memory the sender already owns.
const (
	maxHeaderLen  = LRHLen + ib.GRHLen + BTHLen + DETHLen // the largest header set softib sends (InfiniBand link)
	maxTrailerLen = 3 + ICRCLen + VCRCLen                 // pad, ICRC, VCRC (InfiniBand link)
)

// frame adds packet seg of a train to tx: headers, the payload straight
// from registered memory, then pad and ICRC. On IPv4 the kernel gives
// the datagrams of one GSO train the Identification values 0, 1, 2, ...
// (an unconnected DF socket starts at 0, ip_select_ident_segs; then
// inet_gso_segment counts up), and the ICRC covers it: packet seg is
// hashed with ID seg. On an InfiniBand link the packet is framed for
// route r instead (frameIB).
func (d *Device) frame(tx *txMsg, seg int, bth *BTH, deth *DETH, payload []byte, to netip.Addr, r *ibRoute) {
	if d.ibp != nil {
		p := Packet{BTH: *bth}
		if deth != nil {
			p.DETH = *deth
		}
		d.frameIB(tx, seg, r, &p, payload)
		return
	}
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
	crc, _ := icrcStart(d.fab.local, to, d.fab.port, d.fab.port, uint16(seg), ibLen)
	crc.Update(hdr)
	crc.Update(payload)
	crc.Update(trl[:pad])
	PutICRC(trl[pad:], crc.Sum32())
	tx.add(hdr)
	tx.add(payload)
	tx.add(trl)
	tx.segments++
	tx.bytes += ibLen
}

// frameAck builds an ACK/NAK: BTH, AETH and ICRC in one buffer, sent as
// one datagram (IPv4 ID 0), or as one native IB frame for route r.
func (d *Device) frameAck(tx *txMsg, bth *BTH, aeth AETH, to netip.Addr, r *ibRoute) {
	if d.ibp != nil {
		d.frameIB(tx, 0, r, &Packet{BTH: *bth, AETH: aeth}, nil)
		return
	}
	b := tx.hdr[0][:BTHLen+AETHLen+4]
	_ = bth.Encode(b)
	_ = aeth.Encode(b[BTHLen:])
	crc, _ := icrcStart(d.fab.local, to, d.fab.port, d.fab.port, 0, len(b))
	crc.Update(b[:BTHLen+AETHLen])
	PutICRC(b[BTHLen+AETHLen:], crc.Sum32())
	tx.add(b)
	tx.segments++
	tx.bytes += len(b)
}

// icrcStart begins the ICRC of an IB packet of ibLen octets (headers to
// ICRC inclusive) between two underlay endpoints. softib rebuilds the IP
// header from the socket addresses, with the given IPv4 Identification
// and DF (as Linux sends unconnected DF datagrams), because a UDP socket
// does not see the one the kernel wrote; the TTL is masked, so any value
// does. ok is false for mixed address families.
func icrcStart(src, dst netip.Addr, srcPort, dstPort, id uint16, ibLen int) (d ICRCDigest, ok bool) {
	var h [IPv6HeaderLen + UDPHeaderLen]byte
	hdr, err := AppendIPUDPHeaders(h[:0], src, dst, srcPort, dstPort, 64, ibLen)
	if err != nil {
		return ICRCDigest{}, false
	}
	if len(hdr) == IPv4HeaderLen+UDPHeaderLen {
		hdr[4], hdr[5] = byte(id>>8), byte(id) // the checksum is masked: no update
	}
	d, err = StartICRC(hdr[:len(hdr)-UDPHeaderLen], hdr[len(hdr)-UDPHeaderLen:])
	return d, err == nil
}

// checkICRC verifies the ICRC of a received packet (ICRC slot included
// in b) from src to dst on port dstPort. On IPv4 the Identification the
// sender used is unknown: hint is tried first, and if the ICRC does not
// match it, the one ID that makes it match is solved for (solveIPv4ID).
// It returns the ID that matched.
func checkICRC(b []byte, src netip.AddrPort, dst netip.Addr, dstPort, hint uint16) (id uint16, ok bool) {
	if len(b) < BTHLen+ICRCLen {
		return 0, false
	}
	d, ok := icrcStart(src.Addr(), dst, src.Port(), dstPort, hint, len(b))
	if !ok {
		return 0, false
	}
	d.Update(b[:len(b)-ICRCLen])
	diff := d.Sum32() ^ GetICRC(b[len(b)-ICRCLen:])
	if diff == 0 {
		return hint, true
	}
	if !src.Addr().Unmap().Is4() {
		return 0, false
	}
	x, ok := solveIPv4ID(diff, len(b))
	return hint ^ x, ok
}

// checkICRCValue computes the ICRC a packet (ICRC slot included in b)
// sent as one datagram (IPv4 ID 0) must carry.
func checkICRCValue(b []byte, src netip.AddrPort, dst netip.Addr, dstPort uint16) uint32 {
	d, _ := icrcStart(src.Addr(), dst, src.Port(), dstPort, 0, len(b))
	d.Update(b[:len(b)-ICRCLen])
	return d.Sum32()
}
