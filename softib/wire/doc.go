// Package wire is the IB wire that softib speaks, apart from the adapter:
// the codecs of the IB transport's headers and trailers, with no I/O and
// no state. It is to softib what the kernel's rxe_hdr.h, rxe_opcode.c and
// rxe_icrc.c are to rxe's requester, responder and completer.
//
// It holds the opcodes (opcode.go), the BTH, DETH, AETH and ImmDt headers,
// 24-bit PSN arithmetic (psn.go), a zero-allocation packet parser and
// header builder (packet.go), and the ICRC with the IP and UDP headers it
// covers (icrc.go), as docs/rocev2-framing.md lays them out. A RoCEv2
// packet travels as a UDP datagram whose IP header a socket does not see:
// frame.go rebuilds it from the two endpoints to start or check the ICRC,
// and on IPv4 solves for the one field it cannot know, the Identification
// (ipid.go). The native InfiniBand frame (LRH, GRH, BTH onwards, ICRC and
// VCRC: lrh.go, ibcrc.go, ibframe.go) is the one softib's InfiniBand link
// layer and the fabric forwarder of package ibfwd exchange
// (docs/ib-link-layer.md).
//
// Every decoder error is an *ib.FieldError naming the field. The adapter
// uses these on every packet, so none of them allocates on success.
// Beside softib, the forwarder (ibfwd) and the packet forgers of the
// end-to-end tests (internal/forge) use it without the adapter.
package wire
