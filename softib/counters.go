package softib

import (
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibqueue"
)

// dropCause names why the device dropped a datagram; every drop is counted.
type dropCause int

const (
	dropMalformed    dropCause = iota // headers do not parse
	dropBadICRC                       // invariant CRC mismatch
	dropPKey                          // partition check failed
	dropQKey                          // UD Q_Key check failed
	dropUnknownQP                     // no such destination QP
	dropQPState                       // QP not ready to receive
	dropNoRecv                        // UD: no receive buffer posted
	dropTooLong                       // message larger than the posted buffer
	dropPSN                           // RC/UC: out-of-window or out-of-order packet
	dropUCIncomplete                  // UC: message with a missing packet
	dropNotMember                     // multicast for a group nobody here joined
	dropCQOverrun                     // completion queue full
	dropTxError                       // the underlay refused a send
	dropWrongSource                   // RC/UC: not from the QP's peer address to ours
	dropStaleAck                      // RC: ACK/NAK for a PSN not outstanding (a duplicate after a retransmission: no loss)
	dropSourceShare                   // QP1: the MAD queue is over half full and the MAD's source has had its share (package madqueue)
	dropBadVCRC                       // InfiniBand link: variant CRC mismatch
	dropDLIDZero                      // InfiniBand link: DLID 0, which names no port
	dropWrongDLID                     // InfiniBand link: a unicast DLID not ours under our LMC
	numDropCauses

	// numRoCEDropCauses are the causes a RoCE device reports: the ones
	// before the InfiniBand link's.
	numRoCEDropCauses = dropBadVCRC
)

// dropNames are the counters' names; those ib/ibtest counts too are
// package ibqueue's.
var dropNames = [numDropCauses]string{
	dropMalformed:    ibqueue.DropMalformed.Name(),
	dropBadICRC:      "rx_drop_bad_icrc",
	dropPKey:         ibqueue.DropPKey.Name(),
	dropQKey:         ibqueue.DropQKey.Name(),
	dropUnknownQP:    ibqueue.DropUnknownQP.Name(),
	dropQPState:      ibqueue.DropQPState.Name(),
	dropNoRecv:       ibqueue.DropNoRecv.Name(),
	dropTooLong:      ibqueue.DropTooLong.Name(),
	dropPSN:          "rx_drop_psn",
	dropUCIncomplete: "rx_drop_uc_incomplete",
	dropNotMember:    ibqueue.DropNotMember.Name(),
	dropCQOverrun:    ibqueue.DropCQOverrun.Name(),
	dropTxError:      "tx_error",
	dropWrongSource:  ibqueue.DropWrongSource.Name(),
	dropStaleAck:     "rx_stale_acks",
	dropSourceShare:  "rx_drop_mad_source_share",
	dropBadVCRC:      "rx_drop_bad_vcrc",
	dropDLIDZero:     "rx_drop_dlid_zero",
	dropWrongDLID:    "rx_drop_wrong_dlid",
}

// deviceCounters are updated from the receive goroutine and posting
// goroutines at once, hence atomics.
type deviceCounters struct {
	rxPackets, rxBytes, txPackets, txBytes atomic.Uint64
	txSends                                atomic.Uint64 // underlay sendmsg calls, a GSO train being one
	drops                                  [numDropCauses]atomic.Uint64
}

func (d *Device) count(c dropCause) { d.ctr.drops[c].Add(1) }

// rxCount is what the receive goroutine received since it last published
// it: two atomic adds a train instead of two a packet, each a full fence
// behind the packet's copy.
type rxCount struct{ packets, octets uint64 }

func (r *rxCount) add(n int) {
	r.packets++
	r.octets += uint64(n)
}

// publish adds the count to the device's counters (at the end of every
// train and batch, before any consumer runs).
func (r *rxCount) publish(c *deviceCounters) {
	if r.packets == 0 {
		return
	}
	c.rxPackets.Add(r.packets)
	c.rxBytes.Add(r.octets)
	*r = rxCount{}
}

// Counters returns the device-wide counters.
func (d *Device) Counters() []ib.Counter {
	out := []ib.Counter{
		{Name: "rx_packets", Value: d.ctr.rxPackets.Load()},
		{Name: "rx_bytes", Value: d.ctr.rxBytes.Load()},
		{Name: "tx_packets", Value: d.ctr.txPackets.Load()},
		{Name: "tx_bytes", Value: d.ctr.txBytes.Load()},
		{Name: "tx_sends", Value: d.ctr.txSends.Load()},
	}
	n := numRoCEDropCauses
	if d.ibp != nil {
		n = numDropCauses
	}
	for c := range n {
		out = append(out, ib.Counter{Name: dropNames[c], Value: d.ctr.drops[c].Load()})
	}
	return out
}

// CounterNames are the names of the device's counters on either link
// layer (Counters lists the InfiniBand link's drops only on ib), in
// Counters' order: the daemon documents every one.
func CounterNames() []string {
	var d Device
	var names []string
	for _, c := range d.Counters() {
		names = append(names, c.Name)
	}
	return append(names, dropNames[numRoCEDropCauses:]...)
}

// CounterValue returns the value of the counter called name, or 0.
func CounterValue(cs []ib.Counter, name string) uint64 {
	for _, c := range cs {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// qpCounters are per queue pair.
type qpCounters struct {
	txPackets, txBytes, rxPackets, rxBytes atomic.Uint64
	txMessages, rxMessages                 atomic.Uint64
	retransmits, timeouts                  atomic.Uint64
	rnrNAKsSent, rnrNAKsRcvd               atomic.Uint64
	seqNAKsSent, seqNAKsRcvd               atomic.Uint64
	acksSent, duplicates                   atomic.Uint64
}

func (c *qpCounters) snapshot() []ib.Counter {
	return []ib.Counter{
		{Name: "tx_packets", Value: c.txPackets.Load()},
		{Name: "tx_bytes", Value: c.txBytes.Load()},
		{Name: "tx_messages", Value: c.txMessages.Load()},
		{Name: "rx_packets", Value: c.rxPackets.Load()},
		{Name: "rx_bytes", Value: c.rxBytes.Load()},
		{Name: "rx_messages", Value: c.rxMessages.Load()},
		{Name: ib.QPCounterRetransmits, Value: c.retransmits.Load()},
		{Name: "ack_timeouts", Value: c.timeouts.Load()},
		{Name: "rnr_naks_sent", Value: c.rnrNAKsSent.Load()},
		{Name: ib.QPCounterRNRNAKs, Value: c.rnrNAKsRcvd.Load()},
		{Name: "seq_naks_sent", Value: c.seqNAKsSent.Load()},
		{Name: "seq_naks_received", Value: c.seqNAKsRcvd.Load()},
		{Name: "acks_sent", Value: c.acksSent.Load()},
		{Name: "duplicates", Value: c.duplicates.Load()},
	}
}

// QPCounterNames names the counters every QP reports (ib.QPCounterNamer),
// in the order of QP.Counters.
func (d *Device) QPCounterNames() []string {
	var c qpCounters
	snap := c.snapshot()
	names := make([]string, len(snap))
	for k, x := range snap {
		names[k] = x.Name
	}
	return names
}
