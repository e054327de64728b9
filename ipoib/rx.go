package ipoib

import (
	"errors"
	"syscall"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/offload"
)

// rxBatch is how many completions one poll takes.
const rxBatch = 64

// rxLoop drains receive completions whenever the CQ signals: IP packets go
// to the TUN straight from their slot, ARP and ND are copied to the control
// goroutine, and every slot is posted again, once per batch. A provider
// that runs drainRecv itself (ib.CQHandler) signals only for completions
// added outside its receive goroutine.
func (i *Interface) rxLoop() {
	for {
		select {
		case <-i.recvCQ.Ready():
			i.drainRecv()
		case <-i.done:
			return
		}
	}
}

// drainRecv handles receive completions until the CQ is empty. It runs on
// the rx goroutine or the provider's; rxMu keeps them apart.
func (i *Interface) drainRecv() {
	i.rxMu.Lock()
	defer i.rxMu.Unlock()
	if i.stopping.Load() {
		return
	}
	i.drainLocked(false)
}

// drainLocked is drainRecv's work, with rxMu held. holdUD keeps the UD
// QP's slots from being posted again: the UD QP is being made again
// (reinitUD), which posts all of them once it is ready.
func (i *Interface) drainLocked(holdUD bool) {
	wc, udWRs, srqWRs := &i.rxBuf.wc, &i.rxBuf.udWRs, &i.rxBuf.srqWRs
	for {
		n := i.recvCQ.Poll(wc[:])
		if n == 0 {
			return
		}
		nud, nsrq := 0, 0
		for k := range wc[:n] {
			c := &wc[k]
			slot := uint32(c.ID)
			if c.Status == ib.WCFlushError && slot >= firstUDRx {
				continue // the UD QP is closing
			}
			// A flushed SRQ slot was taken by a connection that closed
			// mid-message: it goes back to the SRQ like any other.
			if c.Status != ib.WCSuccess && c.Status != ib.WCFlushError {
				i.ctr.inc(rxErrors)
			} else if c.Status == ib.WCSuccess {
				i.receive(slot, c)
			}
			if slot < firstUDRx {
				srqWRs[nsrq] = ib.RecvWR{ID: uint64(slot), SGE: i.slots.recvSGE(slot)}
				nsrq++
			} else if !holdUD {
				udWRs[nud] = ib.RecvWR{ID: uint64(slot), SGE: i.slots.recvSGE(slot)}
				nud++
			}
		}
		// The TUN must have what the slots hold before they are posted
		// again.
		i.flushCoalesced()
		if nud > 0 {
			_, _ = i.udQP.PostRecv(udWRs[:nud])
		}
		if nsrq > 0 {
			_, _ = i.srq.PostRecv(srqWRs[:nsrq])
		}
	}
}

// rxBuffers is drainRecv's scratch, kept in the Interface so that neither
// goroutine allocates it per call.
type rxBuffers struct {
	wc     [rxBatch]ib.Completion
	udWRs  [rxBatch]ib.RecvWR
	srqWRs [rxBatch]ib.RecvWR
	// gro gathers the TCP segments of one flow in a batch of completions
	// into one super-packet for the TUN (when offloads are on).
	gro      offload.Coalescer
	groOn    bool
	groBytes uint64 // IP octets gro holds
}

// receive handles one received IPoIB message.
func (i *Interface) receive(slot uint32, c *ib.Completion) {
	buf := i.slots.bytes(slot)
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
	if _, err := i.netdev.Write(pkt); err != nil {
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
		_, err = i.netdev.Write(parts[0])
	} else {
		_, err = i.netdev.WriteGSO(h, parts)
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
	if conn := i.mgr.ByQPN(c.QPN); conn != nil {
		conn.Traffic.RxPackets.Add(1)
		conn.Traffic.RxBytes.Add(uint64(c.ByteLen - encap.HeaderLen))
	}
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
