package softib

import "net/netip"

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
	crc := icrcStart(d.fab.local, to, d.fab.port, ibLen)
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

// frameAck builds an ACK/NAK: BTH, AETH and ICRC in one buffer.
func (d *Device) frameAck(tx *txMsg, bth *BTH, aeth AETH, to netip.Addr) {
	b := tx.hdr[0][:BTHLen+AETHLen+4]
	_ = bth.Encode(b)
	_ = aeth.Encode(b[BTHLen:])
	crc := icrcStart(d.fab.local, to, d.fab.port, len(b))
	crc.Update(b[:BTHLen+AETHLen])
	PutICRC(b[BTHLen+AETHLen:], crc.Sum32())
	tx.add(b)
	tx.segments++
	tx.bytes += len(b)
}

// icrcStart begins the ICRC of an IB packet of ibLen octets (headers to
// ICRC inclusive) between two underlay addresses. softib rebuilds the IP
// header from the socket addresses (IPv4: ID 0 and DF, as Linux sends
// unconnected DF datagrams), because a UDP socket does not see the one the
// kernel wrote; the TTL is masked, so any value does.
func icrcStart(src, dst netip.Addr, port uint16, ibLen int) ICRCDigest {
	var h [IPv6HeaderLen + UDPHeaderLen]byte
	hdr, err := AppendIPUDPHeaders(h[:0], src, dst, port, port, 64, ibLen)
	if err != nil {
		return ICRCDigest{} // mixed families: no ICRC will match
	}
	d, _ := StartICRC(hdr[:len(hdr)-UDPHeaderLen], hdr[len(hdr)-UDPHeaderLen:])
	return d
}

// checkICRC verifies the ICRC of a received packet (ICRC slot included in b).
func checkICRC(b []byte, src, dst netip.Addr, port uint16) bool {
	return len(b) >= BTHLen+ICRCLen && checkICRCValue(b, src, dst, port) == GetICRC(b[len(b)-ICRCLen:])
}

// checkICRCValue computes the ICRC a packet (ICRC slot included in b) must
// carry.
func checkICRCValue(b []byte, src, dst netip.Addr, port uint16) uint32 {
	d := icrcStart(src, dst, port, len(b))
	d.Update(b[:len(b)-ICRCLen])
	return d.Sum32()
}
