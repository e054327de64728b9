// Package softib is a software InfiniBand adapter: it speaks the IB
// transport (RC, UC and UD queue pairs) in RoCEv2 framing (IBA Annex A17)
// over UDP port 4791, so that ipoibd runs on any Linux host without IB
// hardware.
//
// The framing lives in its own files: opcodes (opcode.go), the BTH, DETH,
// AETH and ImmDt headers, 24-bit PSN arithmetic, a zero-allocation packet
// parser and header builder (packet.go) and the ICRC with the IP and UDP
// headers it covers (icrc.go). They follow shared/spec/rocev2-framing.md;
// every decoder error is an *ib.FieldError naming the field. The adapter
// (device, fabric, queue pairs) is built on them and uses them on every
// packet, so none of them allocates on success.
package softib
