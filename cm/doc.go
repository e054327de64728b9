// Package cm is InfiniBand connection management for ipoibd: the CM wire
// codecs, the CM protocol engine, and the IPoIB connection manager that
// runs on it.
//
// The codecs (mad.go, one file a message, ipoib.go) read and write the
// 24-octet MAD common header and every Communication Manager message of
// IBA Vol.1 chapter 12 (REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ,
// SIDR_REP, LAP, APR), plus the two IPoIB-CM (RFC 4755) items carried
// inside them: the service ID and the private data. The layouts follow
// shared/spec/ib-cm-messages.md and shared/spec/ipoib-cm.md. Encoding
// never allocates: each message type has a MarshalMAD method that writes a
// whole 256-octet MAD. Decoding either goes through DecodeMAD, which
// returns the concrete message behind the Message interface, or through
// the per-type decoders (DecodeREQ, ...), which read a 232-octet payload
// and do not allocate. Every error is an *ib.FieldError naming the
// offending field.
//
// The Engine (engine.go) is the CM protocol of one port: the active and
// passive state machines, retransmission, duplicates, timewait and the
// stale-connection rule. It is fed MADs and the time and answers through
// callbacks, never reading a clock, so its tests run on a fake clock over
// a lossy fabric. MADEngine (service.go) runs it on a MAD transport
// (softib's QP1, or ib_umad on rdma-core ports), and MADSplitter
// (split.go) shares one port's QP1 among the engines of several
// interfaces (P_Key children).
//
// The Manager (manager.go) is the IPoIB connection manager of one
// interface: when to connect, what to accept, crossing REQs, peer
// restarts, the MTU of each connection and idle teardown. It drives any
// Service the same way: the Engine, or the kernel's CM through librdmacm
// (package verbs).
//
// The counters of both are derived from their stats structs
// (counters.go), so that every count is shown.
package cm
