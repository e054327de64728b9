package ipoib

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/mtu"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/offload"
)

// txReader is one TUN queue's reader: its own transmit slots and scratch,
// so that readers share nothing on the way to the QPs.
type txReader struct {
	queue int
	slots *pool
	sends sendBatch
	wc    [rxBatch]ib.Completion
	hdr   offload.Hdr
}

// txLoop reads packets from TUN queue r straight into free slots (after
// the 4-octet IPoIB header) and posts them: over the neighbor's
// connection, over UD, or to the control goroutine when the neighbor is
// not ready. A super-packet (TSO/USO) is cut into wire packets first, and
// they post as one list.
func (i *Interface) txLoop(r *txReader) {
	for {
		i.reapSends(&r.wc)
		slot, ok := i.txSlot(r)
		if !ok {
			return
		}
		buf := i.slots.bytes(slot)
		n, err := i.netdev.Read(r.queue, buf[encap.HeaderLen:encap.HeaderLen+maxSuperPacket], &r.hdr)
		if err != nil {
			i.slots.free(slot)
			// A TUN whose link was deleted reads EBADFD.
			if errors.Is(err, syscall.EBADFD) {
				err = errLinkDeleted
			} else {
				err = fmt.Errorf("reading the TUN device (queue %d): %w", r.queue, err)
			}
			i.markLost(err)
			return
		}
		if i.handedOff(slot, n, &r.hdr) {
			continue
		}
		i.sendRead(r, slot, n)
		i.postBatch(&r.sends)
	}
}

// sendRead sends the n-octet packet r read into slot with header r.hdr:
// a super-packet cut into wire packets, a checksum completed, or as it is.
func (i *Interface) sendRead(r *txReader, slot uint32, n int) {
	buf := i.slots.bytes(slot)
	switch {
	case r.hdr.GSOType != offload.GSONone:
		i.transmitSegments(r, slot, n)
	case r.hdr.Flags&offload.FlagNeedsCsum != 0 && offload.Complete(r.hdr, buf[encap.HeaderLen:encap.HeaderLen+n]) != nil:
		i.drop(slot, txDropOffload)
	default:
		i.transmit(&r.sends, slot, buf, n)
	}
}

// maxSuperPacket is the longest packet the TUN hands over: an IP packet
// of at most 64 KiB, a TSO super-packet included.
const maxSuperPacket = 65535

// txSlot returns a free slot of r's, waiting for send completions when
// every one is in flight or the sends in flight fill the send queues
// (slots.budget): the backpressure that leaves packets queued in the
// kernel. What r gathered is posted first, or the wait could be for
// itself. false: the interface is closing.
func (i *Interface) txSlot(r *txReader) (uint32, bool) {
	for {
		if slot, ok := i.slots.get(r.slots); ok {
			return slot, true
		}
		i.postBatch(&r.sends)
		if i.reapSends(&r.wc) {
			continue
		}
		i.ctr.inc(txSlotWaits)
		select {
		case <-i.sendCQ.Ready():
		case <-r.slots.refilled:
		case <-i.done:
			return 0, false
		}
	}
}

// transmitSegments cuts the TSO/USO super-packet in slot into wire
// packets of the size the kernel chose (its MSS for the path), with valid
// checksums: a peer sees what a NIC without offloads would have sent. To a
// resolved neighbor, over its connection or UD, they go packed into
// shared slots (sendPacked); else each in a slot of its own, through
// transmit, which decides for each as for any packet.
func (i *Interface) transmitSegments(r *txReader, slot uint32, n int) {
	buf := i.slots.bytes(slot)
	pkt := buf[encap.HeaderLen : encap.HeaderLen+n]
	segs, err := offload.Split(r.hdr, pkt)
	if err != nil || segs.MaxLen() > ConnectedMTU {
		i.drop(slot, txDropOffload)
		return
	}
	i.ctr.inc(txSuperPackets)
	if etherType, e, p := i.unicastPath(pkt, segs.MaxLen()); p != nil {
		i.sendPacked(r, &segs, etherType, e, p)
		i.slots.free(slot)
		return
	}
	for k := range segs.Len() {
		seg, ok := i.txSlot(r)
		if !ok {
			break
		}
		sbuf := i.slots.bytes(seg)
		m := segs.Put(k, sbuf[encap.HeaderLen:])
		i.transmit(&r.sends, seg, sbuf, m)
	}
	i.slots.free(slot)
}

// unicastPath returns the EtherType of the super-packet pkt, its
// neighbor and the path its segments of up to maxLen octets take, as
// transmit would choose it for each: the neighbor's connection when it is
// up, else UD when they fit the UD MTU. nil when pkt is not unicast to a
// resolved neighbor or its segments need another choice (too big, or
// held for a connection).
func (i *Interface) unicastPath(pkt []byte, maxLen int) (uint16, *neigh.Entry, *neigh.Path) {
	etherType, dst, ok := ipDest(pkt)
	if !ok || dst.IsMulticast() || i.isBroadcast(dst) {
		return 0, nil, nil
	}
	e := i.neigh.Lookup(dst)
	if e == nil {
		return 0, nil, nil
	}
	p := e.Path()
	switch {
	case p == nil:
	case p.QP != nil && maxLen <= p.MTU:
		return etherType, e, p
	case p.QP == nil && maxLen <= i.port.udMTU:
		return etherType, e, p
	}
	return 0, nil, nil
}

// sendPacked posts the segments of a super-packet to neighbor e on path
// p, its connection or UD, as many to a slot as fit one after another and
// the send queues' room allows (slots.budget). An RC send completes only
// when the peer acknowledges it: with a slot to each 1460-octet segment a
// TUN reader's 128 slots held 190 KB in flight and the reader waited for
// acknowledgements (tx_slot_waits), where 128 slots of 64 KiB segments
// hold 8 MB. Over UD, the neighbor is looked up and the segments counted
// once for the super-packet, not once a segment.
func (i *Interface) sendPacked(r *txReader, segs *offload.Segments, etherType uint16, e *neigh.Entry, p *neigh.Path) {
	// Each segment starts 8-aligned; all but the last are maxLen long.
	stride := (encap.HeaderLen + segs.MaxLen() + 7) &^ 7
	perSlot := slotSize / stride
	// Counted once for the super-packet: an atomic add per segment waits
	// for the segment's copy to leave the store buffer.
	var packets, octets uint64
	// Each segment's work request: over UD, addressed as a datagram.
	qp, ud, wr := p.QP, p.QP == nil, ib.SendWR{}
	if ud {
		qp, wr = i.udQP, ib.SendWR{AH: p.AH, RemoteQPN: p.Link.QPN, RemoteQKey: i.qKey()}
		i.wantConnection(e, p)
	}
	for k := 0; k < segs.Len(); {
		slot, ok := i.txSlot(r)
		if !ok {
			break
		}
		cnt := i.slots.share(slot, min(perSlot, segs.Len()-k))
		buf := i.slots.bytes(slot)
		for j := range cnt {
			at := j * stride
			m := segs.Put(k+j, buf[at+encap.HeaderLen:at+stride])
			_ = encap.PutHeader(buf[at:], etherType)
			packets++
			octets += uint64(m)
			wr.ID, wr.SGE = uint64(slot), i.slots.sgeAt(slot, at, encap.HeaderLen+m)
			i.addSend(&r.sends, qp, wr)
		}
		k += cnt
	}
	i.ctr.add(txPackets, packets)
	i.ctr.add(txBytes, octets)
	if ud {
		i.countUD(e, p, packets)
		return
	}
	i.ctr.add(txConnected, packets)
	p.Packets.Add(packets)
	p.Bytes.Add(octets)
}

// transmit sends the n-octet IP packet in slot (at offset 4).
func (i *Interface) transmit(sends *sendBatch, slot uint32, buf []byte, n int) {
	pkt := buf[encap.HeaderLen : encap.HeaderLen+n]
	etherType, dst, ok := ipDest(pkt)
	if !ok {
		i.drop(slot, txDropMalformed)
		return
	}
	if etherType == encap.EtherTypeIPv6 && isND(pkt) {
		// The daemon resolves neighbors itself; the kernel's own ND
		// (it sees a link without addresses) must not reach the fabric.
		// Its router solicitations, sent whenever the link comes up,
		// are expected: counted apart, they are no loss.
		if pkt[ipv6HeaderLen] == icmpv6RS {
			i.drop(slot, txKernelRS)
		} else {
			i.drop(slot, txDropKernelND)
		}
		return
	}
	_ = encap.PutHeader(buf, etherType)
	msgLen := encap.HeaderLen + n
	i.ctr.inc(txPackets)
	i.ctr.add(txBytes, uint64(n))

	if dst.IsMulticast() || i.isBroadcast(dst) {
		m, ok := i.multicastDest(dst)
		if !ok && i.cfg.Subnet != nil {
			i.drop(slot, txDropJoining)
			return
		}
		if !ok {
			i.drop(slot, txDropNoRoute)
			return
		}
		if n > i.port.udMTU {
			i.tooBig(slot, n, i.port.udMTU)
			return
		}
		i.ctr.inc(txMulticast)
		i.sendUD(sends, slot, msgLen, m.ah, ib.MulticastQPN)
		return
	}
	e := i.neigh.Lookup(dst)
	if e == nil {
		i.toControl(slot, msgLen, dst)
		return
	}
	p := e.Path()
	switch {
	case p == nil:
		i.toControl(slot, msgLen, dst)
	case p.QP != nil && n > p.MTU:
		i.tooBig(slot, n, p.MTU)
	case p.QP != nil:
		i.sendConnected(sends, slot, msgLen, p)
	case n <= i.port.udMTU:
		i.wantConnection(e, p)
		i.unicastUD(sends, slot, msgLen, e, p)
	case !i.connectable(p):
		i.tooBig(slot, n, i.port.udMTU) // no connection can come
	default:
		// Too big for UD: wait for the connection.
		i.wantConnection(e, p)
		i.toControl(slot, msgLen, dst)
	}
}

// tooBig answers a packet too big for its path with ICMP "fragmentation
// needed" or "packet too big" written back into the TUN, so that the
// kernel lowers its path MTU; the ICMP is built in the slot after the packet.
func (i *Interface) tooBig(slot uint32, n, pathMTU int) {
	buf := i.slots.bytes(slot)
	end := encap.HeaderLen + n
	m, err := mtu.TooBig(buf[end:], buf[encap.HeaderLen:end], pathMTU, netip.Addr{})
	if err == nil {
		if _, err = i.netdev.Write(buf[end : end+m]); err == nil {
			i.ctr.inc(txICMPTooBig)
		}
	}
	i.drop(slot, txDropTooBig)
}

// connectable reports whether the neighbor on UD path p could have a
// connection: we are in connected mode and it offers RC or UC.
func (i *Interface) connectable(p *neigh.Path) bool {
	return i.mgr != nil && !i.datagram.Load() && p.Link.Flags&(ib.FlagRC|ib.FlagUC) != 0
}

// unicastUD queues an n-octet IPoIB message in slot to neighbor e over its
// UD path p; a neighbor that could have a connection counts a fallback.
func (i *Interface) unicastUD(sends *sendBatch, slot uint32, n int, e *neigh.Entry, p *neigh.Path) {
	i.countUD(e, p, 1)
	i.sendUD(sends, slot, n, p.AH, p.Link.QPN)
}

// countUD counts packets sent to neighbor e over its UD path p, as
// fallbacks when e could have a connection.
func (i *Interface) countUD(e *neigh.Entry, p *neigh.Path, packets uint64) {
	i.ctr.add(txUD, packets)
	if i.connectable(p) {
		e.UDFallbacks.Add(packets)
	}
}

// wantConnection asks the control goroutine, once, to connect to a peer we
// are sending to over UD.
func (i *Interface) wantConnection(e *neigh.Entry, p *neigh.Path) {
	if !i.connectable(p) || e.WantConn.Load() {
		return
	}
	if e.WantConn.CompareAndSwap(false, true) {
		select {
		case i.wantConn <- e:
		default:
			e.WantConn.Store(false)
		}
	}
}

func (i *Interface) toControl(slot uint32, n int, dst netip.Addr) {
	select {
	case i.pending <- pendingPacket{slot: slot, n: n, dst: dst}:
	default:
		i.drop(slot, ctlDropBusy)
	}
}

func (i *Interface) drop(slot uint32, why counter) {
	i.ctr.inc(why)
	i.slots.free(slot)
}

// isBroadcast reports whether dst is the limited broadcast or the
// broadcast address of one of our IPv4 subnets.
func (i *Interface) isBroadcast(dst netip.Addr) bool {
	if !dst.Is4() {
		return false
	}
	if dst == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return true
	}
	for _, b := range *i.ctl.broadcasts.Load() {
		if b == dst {
			return true
		}
	}
	return false
}

// multicastDest returns the address handle of the group dst maps to,
// making it on first use.
func (i *Interface) multicastDest(dst netip.Addr) (mcastDest, bool) {
	if i.isBroadcast(dst) {
		return mcastDest{ah: *i.bcast.Load()}, true
	}
	i.mcastMu.Lock()
	defer i.mcastMu.Unlock()
	if m, ok := i.mcastAHs[dst]; ok {
		return m, true
	}
	if i.cfg.Subnet != nil {
		// On InfiniBand only the SA's join makes a group's address
		// (subnet.go): ask for a send-only one.
		select {
		case i.wantGroup <- dst:
		default:
		}
		return mcastDest{}, false
	}
	mgid, err := encap.MulticastMGID(dst, i.port.pkey, encap.LinkLocal)
	if err != nil {
		return mcastDest{}, false
	}
	ah, err := i.dev.CreateAH(ib.AHAttr{DestGID: mgid})
	if err != nil {
		return mcastDest{}, false
	}
	m := mcastDest{ah: ah, mgid: mgid}
	i.mcastAHs[dst] = m
	return m, true
}
