package ipoib

import (
	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/neigh"
)

// sendBatch gathers consecutive work requests for one QP so that they post
// as one list: one provider call for the segments of a super-packet, and
// on softib one GSO train. The TUN reader and the control goroutine each
// have their own.
type sendBatch struct {
	qp  ib.QP
	n   int
	wrs [64]ib.SendWR
}

// addSend adds a work request, posting what the batch held first when it
// was for another QP or is full.
func (i *Interface) addSend(b *sendBatch, qp ib.QP, wr ib.SendWR) {
	if b.n > 0 && (b.qp != qp || b.n == len(b.wrs)) {
		i.postBatch(b)
	}
	b.qp = qp
	b.wrs[b.n] = wr
	b.n++
}

// postBatch posts what b holds. Work requests the provider refused are
// dropped and counted, and a connection that refuses is torn down.
func (i *Interface) postBatch(b *sendBatch) {
	if b.n == 0 {
		return
	}
	posted, err := b.qp.PostSend(b.wrs[:b.n])
	if err != nil {
		for _, wr := range b.wrs[max(posted, 0):b.n] {
			i.drop(uint32(wr.ID), txDropPost)
		}
		if b.qp != i.udQP {
			i.connSendFailed(b.qp.Num(), ib.WCSuccess, false)
		}
	}
	b.qp, b.n = nil, 0
}

// sendConnected queues an n-octet IPoIB message in slot on p's connection.
func (i *Interface) sendConnected(b *sendBatch, slot uint32, n int, p *neigh.Path) {
	i.ctr.inc(txConnected)
	p.Packets.Add(1)
	p.Bytes.Add(uint64(n - encap.HeaderLen))
	i.addSend(b, p.QP, ib.SendWR{ID: uint64(slot), SGE: i.slots.sge(slot, n)})
}

// sendUD queues an n-octet IPoIB message in slot as a UD datagram.
func (i *Interface) sendUD(b *sendBatch, slot uint32, n int, ah ib.AH, qpn ib.QPN) {
	i.addSend(b, i.udQP, ib.SendWR{ID: uint64(slot), SGE: i.slots.sge(slot, n), AH: ah, RemoteQPN: qpn, RemoteQKey: i.qKey()})
}

// reapSends takes send completions off the CQ: their slots go back to the
// pools, and failures on a connection go to the control goroutine. It is
// called where a slot is needed (the TUN reader, the control goroutine),
// not from a goroutine of its own: a wakeup per send costs more than the
// send on these machines. It reports whether it found any.
func (i *Interface) reapSends(wc *[rxBatch]ib.Completion) bool {
	found := false
	for {
		n := i.sendCQ.Poll(wc[:])
		if n == 0 {
			return found
		}
		found = true
		for k := range wc[:n] {
			c := &wc[k]
			i.slots.free(uint32(c.ID))
			if c.Status == ib.WCSuccess {
				continue
			}
			i.ctr.inc(txErrors)
			// Flushes follow an error already reported, or our own
			// teardown.
			if c.Status != ib.WCFlushError && c.QPN != i.port.local.QPN {
				i.connSendFailed(c.QPN, c.Status, true)
			}
		}
	}
}
