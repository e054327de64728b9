// Package cm owns InfiniBand connection management for ipoibd.
//
// Today it holds the wire codecs: the 24-octet MAD common header and every
// Communication Manager message of IBA Vol.1 chapter 12 (REQ, MRA, REJ, REP,
// RTU, DREQ, DREP, SIDR_REQ, SIDR_REP, LAP, APR), plus the two IPoIB-CM
// (RFC 4755) items carried inside them: the service ID and the private data.
// The layouts follow shared/spec/ib-cm-messages.md and shared/spec/ipoib-cm.md.
//
// The CM protocol engine (state machine, retransmission, timewait) and the
// IPoIB connection manager (crossing REQs, stale connections, per-connection
// MTU, idle teardown) will live here too; they build on these codecs.
//
// Encoding never allocates: each message type has a MarshalMAD method that
// writes a whole 256-octet MAD. Decoding either goes through DecodeMAD, which
// returns the concrete message behind the Message interface, or through the
// per-type decoders (DecodeREQ, ...), which read a 232-octet payload and do
// not allocate. Every error is an *ib.FieldError naming the offending field.
package cm
