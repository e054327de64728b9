// Package ibtest is an in-memory provider behind the ib interfaces, for
// tests, as wireguard-go's conn/bindtest is for its Bind: a Fabric on
// which Devices are opened, each a port with a GID, a GUID, a P_Key table
// and a link layer. Datagrams (UD, multicast, QP1 MADs) and messages (RC,
// UC) go from device to device through memory: no sockets, no root, no
// network namespaces.
//
// Its semantics follow softib where ipoib and cm depend on them, and its
// queues are softib's own (package ibqueue: CQs, receive queues and SRQs,
// QP1's MAD queue, the QP state checks, drop counter names): QPs move
// Reset→Init→RTR→RTS (and to Error or back to Reset from anywhere); UD
// receives carry ib.GRHLen octets of GRH in front of the payload and are
// checked against the port's P_Key table, the QP's P_Key and its Q_Key; a
// connected QP takes messages only from the GID named in its RTR
// transition; RC sends complete when the peer took them, and fail with
// WCRetryExceeded when the peer is gone (no device, no such QP, not
// receiving); Error and Close flush outstanding work. A device opened
// with a LID (Config.LID) is also reached by it, as on an InfiniBand
// subnet: a UD address handle naming a LID sends there, with a GRH only
// when the path asks, and the receive completion reports the sender's LID,
// the SL and whether a GRH came (a source GID only then).
//
// Seams that differ from a real adapter, on purpose:
//   - RC and UC messages travel whole (up to MaxMessage octets); there are
//     no packets, PSNs or ACK timers, so an RC failure is immediate.
//   - An RC message that finds no receive buffer waits at the responder
//     while the sender's RNR retry count is 7 (infinite) and is retried
//     whenever receives are posted; with a finite count it fails the
//     sender with WCRNRRetryExceeded after that many retries.
//   - Loss and reordering (Fabric.SetImpair) hit only what is unreliable
//     on a real fabric: UD datagrams, UC messages and MADs. They are drawn
//     from a seeded generator and counted (Fabric.Counters).
//
// Each device delivers on one goroutine of its own, which also runs the
// ib.CQHandler of the CQs it filled, as softib's receive goroutine does;
// Close stops it, so nothing is left running after a test.
package ibtest
