// Package rdmacm is the kernel CM's connection service: cm.Service over
// librdmacm, for ipoibd --cm kernel on rdma-core adapters. Only the daemon
// imports it; the verbs provider knows nothing of it, of the CM or of IPoIB.
//
// What it is for: while the kernel's ib_cm is loaded it owns QP1's CM
// class, so ipoibd's own CM engine cannot run there. Leaving the kernel CM
// in place keeps rdma_cm for the host's other RDMA users; this package asks
// it to set ipoibd's connections up instead. The ipoibcm.Manager drives it
// exactly as it drives the engine and sees the same events.
//
// Its limit: rdma_cm listens only on service IDs inside its own port
// spaces, never on RFC 4755's. The service therefore maps each IPoIB
// service ID to a port of RDMA_PS_IB derived from the UD QPN (addr.go),
// which another ipoibd derives in the same way and a kernel ipoib peer does
// not. It reaches ipoibd peers only, and the daemon must never advertise
// connected mode to a kernel peer over it (ipoibd's --peers ipoibd-only).
// docs/linux-interop.md has the kernel's rules behind this.
//
// Its seams:
//   - cm.Service (New): Listen, Connect, Accept, Reject, Ready, Disconnect
//     and the events they lead to, with the contract the engine keeps;
//     the RFC 4755 codec (cm.IPoIBServiceID, cm.ParseIPoIBServiceID,
//     cm.PrivateData) stays in cm.
//   - verbs.Device.RDMACMPort: the device's librdmacm context and port, so
//     that every rdma_cm id is checked to be on the same device and port as
//     the QPs. The QPs themselves are the Manager's, made through the
//     ib.Device as on any provider; librdmacm only carries their numbers,
//     and the Manager moves them to RTS with the attributes the kernel CM
//     reports (rdma_init_qp_attr).
//   - verbs.WatchFD: the Go poller's wait on the rdma_cm event channel,
//     which signals Wake; the owner then calls Poll.
//   - Counters: events by type, failed librdmacm calls by name, and the
//     connection gauges, as ib.Counter.
//
// It is cgo and builds with the tag rdma (libibverbs-dev, librdmacm-dev).
// Without the tag New reports how to rebuild, so `go build ./...` needs no
// rdma-core headers. The tests that talk to the kernel need two RDMA
// devices on one link (IPOIBD_VERBS_DEVICES, as the rxe test bed sets)
// and skip otherwise.
package rdmacm
