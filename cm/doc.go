// Package cm is the InfiniBand Communication Manager (IBA Vol.1 chapter
// 12): the CM wire codecs, the CM protocol engine, and the connection
// service that consumers such as ipoibd's IPoIB connection manager
// (package ipoib/ipoibcm) set connections up through. What to connect to
// and what to accept is the consumer's; this package only speaks CM.
//
// # Vocabulary
//
//   - A connection service (Service) sets connections up and tears them
//     down for one consumer and reports what happens as Events; it keeps
//     each connection as a *Comm. There are two: ours, the EngineService,
//     which is the Engine run on QP1 MADs (--cm own); and the kernel's CM
//     reached through librdmacm (--cm kernel), package rdmacm, which
//     implements Service from outside this package.
//   - The Engine is the CM protocol itself: the active and passive state
//     machines, retransmission, duplicates, timewait and the
//     stale-connection rule. It is fed MADs and the time and answers
//     through callbacks, never reading a clock, so its tests run on a
//     fake clock over a lossy in-memory fabric: package cm/cmtest, which
//     the tests of consumers such as ipoibcm drive their managers on too.
//     Its core and MAD dispatch are in engine.go; its exchanges in
//     engine_setup.go (REQ, MRA, REP, RTU), engine_teardown.go (DREQ,
//     DREP, REJ, timewait) and engine_timers.go (retries, timeouts).
//   - A ServiceMaker makes the connection service of one interface from
//     ServiceParams: EngineOnQP1 on a device's QP1 alone, or
//     EngineOnSharedQP1 on its share of a port's QP1.
//   - SharedQP1 shares one port's QP1 among several Engines (an
//     interface and its P_Key children), each on a QP1Share opened for
//     its service ID.
//
// # Codecs
//
// mad.go and one file a message read and write every CM message (REQ,
// MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP, LAP, APR); the
// 24-octet common header is package mad's. ipoib.go codes the two
// IPoIB-CM (RFC 4755) items carried inside CM messages: the service ID and
// the private data. The layouts are in docs/ib-cm-messages.md and
// docs/ipoib-cm.md; how Linux peers use them, in docs/linux-interop.md.
// Encoding never allocates: each message type has a MarshalMAD method that
// writes a whole 256-octet MAD. Decoding either goes through DecodeMAD,
// which returns the concrete message behind the Message interface, or
// through the per-type decoders (DecodeREQ, ...), which read a 232-octet
// payload and do not allocate. Every error is an *ib.FieldError naming
// the offending field.
//
// # Seams
//
// Below: MADs come and go through ib.MADService (softib's QP1, or ib_umad
// on rdma-core ports), which never looks inside them. Above: a consumer
// drives any Service the same way (Listen, Connect, Accept, ...; wait on
// Wake and call Poll; call Expire at Next) and never knows which one it
// has. The counters of the Engine are derived from its stats struct
// (counters.go, StatCounters), so that every count is shown.
package cm
