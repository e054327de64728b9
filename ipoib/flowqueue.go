package ipoib

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/netdev"
)

// What the interface receives is written into the TUN on a queue chosen
// by the packet's flow. tun keeps, per flow, the queue its last packet
// was written on, and queues the flow's next packets from the kernel
// there (its automatic steering): written all through one queue, every
// flow with replies would be read by that queue's reader alone, whatever
// the number of queues. An interface over several ports writes through
// its port's queue instead (package bond).

// flowWriter writes packets through the TUN queue of their flow.
type flowWriter struct {
	qw     netdev.QueueWriter
	queues uint32
}

// newFlowWriter is the flow writer of nd, nil when it has one queue or
// cannot choose (then every write goes through Write).
func newFlowWriter(nd Netdev) *flowWriter {
	qw, ok := nd.(netdev.QueueWriter)
	if !ok || nd.Queues() < 2 {
		return nil
	}
	return &flowWriter{qw: qw, queues: uint32(nd.Queues())}
}

// queueOf is pkt's queue: a hash of its addresses and, for TCP and UDP,
// its ports. The same flow always hashes alike; what does not parse goes
// to the first queue.
func (w *flowWriter) queueOf(pkt []byte) int {
	var h uint32
	var proto byte
	var l4 []byte
	switch {
	case len(pkt) >= ipv4HeaderLen && pkt[0]>>4 == 4:
		h = binary.BigEndian.Uint32(pkt[12:16]) ^ binary.BigEndian.Uint32(pkt[16:20])
		ihl := int(pkt[0]&0x0f) * 4
		// A fragment after the first has no ports: addresses only, for
		// every fragment alike.
		if binary.BigEndian.Uint16(pkt[6:8])&0x3fff == 0 && len(pkt) >= ihl+4 {
			proto, l4 = pkt[9], pkt[ihl:]
		}
	case len(pkt) >= ipv6HeaderLen && pkt[0]>>4 == 6:
		for k := 8; k < ipv6HeaderLen; k += 4 {
			h ^= binary.BigEndian.Uint32(pkt[k : k+4])
		}
		if len(pkt) >= ipv6HeaderLen+4 {
			proto, l4 = pkt[6], pkt[ipv6HeaderLen:]
		}
	default:
		return 0
	}
	if proto == protoTCP || proto == protoUDP {
		h ^= binary.BigEndian.Uint32(l4[0:4]) // both ports
	}
	h ^= h >> 16
	h *= 0x45d9f3b
	h ^= h >> 16
	return int(h % w.queues)
}
