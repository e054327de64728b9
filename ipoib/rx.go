package ipoib

import (
	"errors"
	"syscall"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
	"github.com/ipoibd/ipoibd/offload"
)

// rxBatch is how many completions one poll takes.
const rxBatch = 64

// The port's receive CQ carries the completions of every interface on
// the port (portpool.go). Port.drain takes them off in batches and hands
// each to the interface that owns its QP: IP packets go to that
// interface's TUN straight from their slot, ARP and ND are copied to its
// control goroutine, and every slot is posted again, once per batch:
// SRQ slots to the port's SRQ, UD slots to their interface's UD QP.

// portRx is the port's drain scratch, kept in the Port so that no
// goroutine allocates it per call.
type portRx struct {
	wc     [rxBatch]ib.Completion
	udWRs  [rxBatch]ib.RecvWR
	srqWRs [rxBatch]ib.RecvWR
}

// drain handles receive completions until the CQ is empty. It runs on the
// port's rx goroutine or the provider's; rxMu keeps them apart.
func (p *Port) drain() {
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	p.drainLocked()
}

// drainLocked is drain's work, with rxMu held. Consecutive completions of
// one interface are handled as a batch: its coalesced packets are written
// and its UD slots posted when the next belongs to another, and always
// before the SRQ slots are posted again, as the TUN must have what they
// hold first.
func (p *Port) drainLocked() {
	r := &p.rx
	for {
		n := p.recvCQ.Poll(r.wc[:])
		if n == 0 {
			return
		}
		var cur *Interface
		nud, nsrq := 0, 0
		for k := range r.wc[:n] {
			c := &r.wc[k]
			i := p.owners.get(c.QPN)
			if i != cur {
				cur.endBatch(r.udWRs[:nud])
				cur, nud = i, 0
			}
			if c.ID&srqWRID != 0 {
				// A flushed SRQ slot was taken by a connection that
				// closed mid-message: it goes back like any other.
				slot := uint32(c.ID)
				if i != nil {
					i.srqCompletion(p.srqBytes(slot), c)
				}
				r.srqWRs[nsrq] = ib.RecvWR{ID: c.ID, SGE: p.srqSGE(slot)}
				nsrq++
			} else if i != nil && i.udCompletion(c) {
				// Without an owner it was a closed interface's UD slot,
				// whose ring goes with it.
				r.udWRs[nud] = ib.RecvWR{ID: c.ID, SGE: i.slots.recvSGE(uint32(c.ID))}
				nud++
			}
		}
		cur.endBatch(r.udWRs[:nud])
		if nsrq > 0 {
			_, _ = p.srq.PostRecv(r.srqWRs[:nsrq])
		}
	}
}

// srqCompletion handles a completion of an SRQ slot on one of i's
// connected QPs.
func (i *Interface) srqCompletion(buf []byte, c *ib.Completion) {
	switch {
	case i.stopping.Load(): // Close has begun: the TUN is not touched
	case c.Status == ib.WCSuccess:
		i.receive(buf, c)
	case c.Status != ib.WCFlushError:
		i.ctr.inc(rxErrors)
	}
}

// udCompletion handles a completion of one of i's UD receive slots and
// reports whether it is posted again: not when flushed (the UD QP is
// closing, or made ready again, which posts every slot: udHeld), nor
// once Close has begun.
func (i *Interface) udCompletion(c *ib.Completion) bool {
	slot := uint32(c.ID)
	if c.Status == ib.WCFlushError || !i.slots.isUDRx(slot) {
		return false
	}
	if i.stopping.Load() {
		return false
	}
	if c.Status != ib.WCSuccess {
		i.ctr.inc(rxErrors)
	} else {
		i.receive(i.slots.bytes(slot), c)
	}
	return !i.udHeld
}

// endBatch ends a batch of i's completions: the TUN gets what the
// coalescer holds, and the UD slots wrs are posted again. Nothing for a
// nil i.
func (i *Interface) endBatch(wrs []ib.RecvWR) {
	if i == nil {
		return
	}
	i.publishConnRx()
	i.flushCoalesced()
	if len(wrs) > 0 {
		_, _ = i.udQP.PostRecv(wrs)
	}
}

// rxBuffers is the receive path's state of one interface, used under
// its port's rxMu.
type rxBuffers struct {
	// gro gathers the TCP segments of one flow in a batch of completions
	// into one super-packet for the TUN (when offloads are on).
	gro      offload.Coalescer
	groOn    bool
	groBytes uint64 // IP octets gro holds
	// connRx is what the batch received on one connection, not yet in its
	// Traffic: a lookup and two atomic adds a run of messages instead of
	// one each.
	connRx struct {
		qpn            ib.QPN
		conn           *ipoibcm.Connection
		packets, bytes uint64
	}
}

// receive handles one received IPoIB message, in buf.
func (i *Interface) receive(buf []byte, c *ib.Completion) {
	var msg []byte
	if c.QPN == i.port.local.QPN {
		if c.ByteLen < ib.GRHLen || int(c.ByteLen) > len(buf) {
			i.ctr.inc(rxDropMalformed)
			return
		}
		if c.SrcQPN == i.port.local.QPN && c.SrcGID == i.port.local.GID {
			i.ctr.inc(rxMulticastOwn) // the fabric delivers a group's packets to every member, us too
			return
		}
		msg = buf[ib.GRHLen:c.ByteLen]
	} else {
		if int(c.ByteLen) > len(buf) {
			i.ctr.inc(rxDropMalformed)
			return
		}
		msg = buf[:c.ByteLen]
		i.countReceived(c)
	}
	etherType, err := encap.ParseHeader(msg)
	if err != nil {
		i.ctr.inc(rxDropMalformed)
		return
	}
	pkt := msg[encap.HeaderLen:]
	switch etherType {
	case encap.EtherTypeARP:
		i.neighToControl(etherType, pkt, c)
		return
	case encap.EtherTypeIPv6:
		if isND(pkt) {
			i.neighToControl(etherType, pkt, c)
			return
		}
	case encap.EtherTypeIPv4:
	default:
		i.ctr.inc(rxDropEtherType)
		return
	}
	if _, _, ok := ipDest(pkt); !ok {
		i.ctr.inc(rxDropMalformed)
		return
	}
	i.deliver(pkt)
}

// deliver writes an IP packet to the TUN, or holds it to go with the
// segments of its flow that follow in this batch.
func (i *Interface) deliver(pkt []byte) {
	r := &i.rxBuf
	if r.groOn {
		if r.gro.Add(pkt) {
			r.groBytes += uint64(len(pkt))
			return
		}
		if r.gro.Held() > 0 {
			i.flushCoalesced()
			if r.gro.Add(pkt) {
				r.groBytes += uint64(len(pkt))
				return
			}
		}
	}
	if _, err := i.write(pkt); err != nil {
		i.countWriteFailed(err, 1)
		return
	}
	i.ctr.inc(rxPackets)
	i.ctr.add(rxBytes, uint64(len(pkt)))
}

// flushCoalesced writes what the coalescer holds: one packet as it came,
// several as one super-packet. Counters count the packets received.
func (i *Interface) flushCoalesced() {
	r := &i.rxBuf
	held := r.gro.Held()
	if held == 0 {
		return
	}
	bytes := r.groBytes
	r.groBytes = 0
	h, parts := r.gro.Flush()
	var err error
	if held == 1 {
		_, err = i.write(parts[0])
	} else {
		_, err = i.writeGSO(h, parts)
	}
	if err != nil {
		i.countWriteFailed(err, uint64(held))
		return
	}
	if held > 1 {
		i.ctr.inc(rxCoalesced)
	}
	i.ctr.add(rxPackets, uint64(held))
	i.ctr.add(rxBytes, bytes)
}

// write writes a received packet through its flow's queue.
func (i *Interface) write(pkt []byte) (int, error) {
	if i.flows != nil {
		return i.flows.qw.WriteOn(i.flows.queueOf(pkt), pkt)
	}
	return i.netdev.Write(pkt)
}

// writeGSO writes a coalesced super-packet through its flow's queue.
func (i *Interface) writeGSO(h offload.Hdr, parts [][]byte) (int, error) {
	if i.flows != nil {
		return i.flows.qw.WriteGSOOn(i.flows.queueOf(parts[0]), h, parts)
	}
	return i.netdev.WriteGSO(h, parts)
}

// countWriteFailed counts n received packets the TUN did not take. While
// the interface is administratively down the kernel refuses every write
// (EIO), as it drops what a down NIC receives: the operator's choice, not
// a fault, so it is not counted as a drop.
func (i *Interface) countWriteFailed(err error, n uint64) {
	if errors.Is(err, syscall.EIO) {
		i.ctr.add(rxLinkDown, n)
		return
	}
	i.ctr.add(rxDropTUN, n)
}

// countReceived adds a message received on a connected QP to its
// connection's traffic.
func (i *Interface) countReceived(c *ib.Completion) {
	if i.mgr == nil || c.ByteLen < encap.HeaderLen {
		return
	}
	r := &i.rxBuf.connRx
	if r.conn == nil || r.qpn != c.QPN {
		i.publishConnRx()
		if r.conn = i.mgr.ByQPN(c.QPN); r.conn == nil {
			return
		}
		r.qpn = c.QPN
	}
	r.packets++
	r.bytes += uint64(c.ByteLen - encap.HeaderLen)
}

// publishConnRx adds what countReceived gathered to its connection's
// Traffic (at the end of each batch, and when the connection changes).
func (i *Interface) publishConnRx() {
	r := &i.rxBuf.connRx
	if r.conn != nil {
		r.conn.Traffic.RxPackets.Add(r.packets)
		r.conn.Traffic.RxBytes.Add(r.bytes)
	}
	r.conn, r.packets, r.bytes = nil, 0, 0
}

// neighToControl copies an ARP or ND packet for the control goroutine.
func (i *Interface) neighToControl(etherType uint16, pkt []byte, c *ib.Completion) {
	var m neighPacket
	if len(pkt) > len(m.data) {
		i.ctr.inc(rxDropMalformed)
		return
	}
	m.etherType, m.n = etherType, copy(m.data[:], pkt)
	m.src = ib.LinkAddr{QPN: c.SrcQPN, GID: c.SrcGID}
	m.srcLID, m.grh = c.SrcLID, c.GRH
	if isReply(etherType, pkt) {
		select {
		case i.rxReply <- m:
		default:
			i.ctr.inc(ctlDropBusy)
		}
		return
	}
	select {
	case i.rxSolicit <- m:
	default:
		i.ctr.inc(ctlDropSolicitBusy)
	}
}
