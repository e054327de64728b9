package softib

import (
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// Every header and trailer of a train lives in its txMsg, so framing a
// packet writes only into memory the sender already owns.
const (
	maxHeaderLen  = wire.LRHLen + ib.GRHLen + wire.BTHLen + wire.DETHLen // the largest header set softib sends (InfiniBand link)
	maxTrailerLen = 3 + wire.ICRCLen + wire.VCRCLen                      // pad, ICRC, VCRC (InfiniBand link)
)

// frame adds packet seg of a train to tx: headers, the payload straight
// from registered memory, then pad and ICRC. On IPv4 the kernel gives
// the datagrams of one GSO train the Identification values 0, 1, 2, ...
// (an unconnected DF socket starts at 0, ip_select_ident_segs; then
// inet_gso_segment counts up), and the ICRC covers it: packet seg is
// hashed with ID seg. On an InfiniBand link the packet is framed for
// route r instead (frameIB).
func (d *Device) frame(tx *txMsg, seg int, bth *wire.BTH, deth *wire.DETH, payload []byte, to netip.Addr, r *ibRoute) {
	if d.ibp != nil {
		p := wire.Packet{BTH: *bth}
		if deth != nil {
			p.DETH = *deth
		}
		d.frameIB(tx, seg, r, &p, payload)
		return
	}
	pad := wire.PadCount(len(payload))
	bth.PadCnt = pad
	hdr := tx.hdr[seg][:wire.BTHLen]
	_ = bth.Encode(hdr) // fields were range-checked when posted
	if deth != nil {
		hdr = tx.hdr[seg][:wire.BTHLen+wire.DETHLen]
		_ = deth.Encode(hdr[wire.BTHLen:])
	}
	trl := tx.trl[seg][:int(pad)+4]
	clear(trl[:pad])
	ibLen := len(hdr) + len(payload) + len(trl)
	crc := tx.startICRC(d.fab, to, uint16(seg), ibLen)
	crc.Update(hdr)
	crc.Update(payload)
	crc.Update(trl[:pad])
	wire.PutICRC(trl[pad:], crc.Sum32())
	tx.add(hdr)
	tx.add(payload)
	tx.add(trl)
	tx.segments++
	tx.bytes += ibLen
}

// frameAck builds an ACK/NAK: BTH, AETH and ICRC in one buffer, sent as
// one datagram (IPv4 ID 0), or as one native IB frame for route r.
func (d *Device) frameAck(tx *txMsg, bth *wire.BTH, aeth wire.AETH, to netip.Addr, r *ibRoute) {
	if d.ibp != nil {
		d.frameIB(tx, 0, r, &wire.Packet{BTH: *bth, AETH: aeth}, nil)
		return
	}
	b := tx.hdr[0][:wire.BTHLen+wire.AETHLen+4]
	_ = bth.Encode(b)
	_ = aeth.Encode(b[wire.BTHLen:])
	crc := tx.startICRC(d.fab, to, 0, len(b))
	crc.Update(b[:wire.BTHLen+wire.AETHLen])
	wire.PutICRC(b[wire.BTHLen+wire.AETHLen:], crc.Sum32())
	tx.add(b)
	tx.segments++
	tx.bytes += len(b)
}
