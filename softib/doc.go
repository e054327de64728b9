// Package softib is a software InfiniBand adapter: it speaks the IB
// transport (RC, UC and UD queue pairs, SRQ, QP1 MADs) in RoCEv2 framing
// (IBA Annex A17) over UDP port 4791, so that ipoibd runs on any Linux
// host without IB hardware, and interoperates with the kernel's rxe.
//
// The seam is package ib: softib implements its provider interfaces and
// imports nothing else of ours but its own codecs (package wire) and the
// MAD queue's fair share (madqueue); only the daemon (ipoibd) and tests
// choose it. The interface above cannot tell it from verbs.
//
// The framing is package wire (softib/wire): opcodes, the transport
// headers, PSN arithmetic, the packet parser and header builder, the ICRC
// and the native InfiniBand frame, codecs with no state, as
// docs/rocev2-framing.md lays them out. The adapter (device, fabric,
// queue pairs, the send and receive engines) is built on them and uses
// them on every packet, so none of them allocates on success.
//
// Its completion queues, receive queues (a QP's own and SRQs), QP1's queue
// of received MADs and the QP state checks are package ibqueue's, which
// the in-memory provider ib/ibtest shares.
//
// On the wire it takes what other RoCEv2 stacks send (rxe, hardware): any
// UDP source port, hashed into the ICRC as received, and any IPv4
// Identification, which a UDP socket cannot see but the ICRC covers: the
// receiver solves for it (wire.CheckDatagramICRC). A GSO train it sends
// carries the IDs the kernel gives its datagrams, 0, 1, 2, ..., each in
// its ICRC (docs/linux-interop.md). RC and UC packets count only from the QP's
// peer address (rx_drop_wrong_source), ACKs and NAKs only for a PSN
// outstanding (rx_stale_acks), and QP numbers are random, so a third
// host on the underlay can neither guess a connection nor break one with a
// stray packet.
//
// A device opened with LinkLayer "InfiniBand" is a port on a simulated
// InfiniBand subnet instead: native IB frames (LRH, a GRH when the address
// asks for one, BTH onwards, ICRC and VCRC: wire.IBFrame) carried in UDP
// to the fabric forwarder of package ibfwd, addressed by LID, checked on
// receipt as a port checks them (ibport.go). See docs/ib-link-layer.md.
package softib
