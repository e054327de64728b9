// Package ipoibcm is the IPoIB connection manager of one interface: the
// connected-mode policy of RFC 4755 on top of a CM connection service.
// It decides when to connect to a peer, what to accept, which connection
// carries our sends (the linux and rfc policies), resolves crossing REQs,
// notices peers that restarted, connections whose sends fail and idle
// ones, brings each connected QP to RTS with what the CM agreed, and
// gives each connection its MTU from the peers' private data.
//
// # Seams
//
// Below, it drives a cm.Service without knowing which: ipoibd's own CM
// engine on QP1 (cm.EngineService) or the kernel's CM through librdmacm
// (package rdmacm). It makes QPs through a QPFactory and asks PathTo for
// a peer's InfiniBand path; it opens nothing itself. Above, package ipoib
// calls Connect, Disconnect and SendFailed from its control loop, reads
// SendConnection on the datapath, and hears Up, Down and Refused. Like
// the engine it is driven by one goroutine and reads no clock.
//
// The rules (crossing, restarts, stale connections, what a kernel peer
// expects) are in docs/ipoib-cm.md and docs/linux-interop.md.
package ipoibcm
