// Package verbs is the hardware provider of the ib interfaces: InfiniBand and
// RoCE adapters driven through rdma-core (libibverbs; device contexts come
// from librdmacm when it lists the device, so that package rdmacm, the kernel
// CM's connection service, can put its rdma_cm ids on the same context). The
// provider sets up no connections and knows nothing of IPoIB: it imports
// neither cm nor ipoib (deps_test.go holds it to that).
//
// The provider is cgo and builds only with the tag rdma (and libibverbs-dev,
// librdmacm-dev and libibumad-dev installed: CM MADs go through libibumad,
// so that ibsim's libumad2sim.so can carry them as it carries the SA's). Without the tag Open reports how to rebuild, so
// the default build stays pure Go.
//
// Per packet the provider neither allocates nor takes a channel operation:
// work requests are staged in C memory owned by each queue, the adapter's
// wr_id names an entry of a preallocated table (see wrid.go), and completion
// queues are drained in batches into a C array owned by the queue.
//
// Two exported pieces exist only for package rdmacm: Device.RDMACMPort (the
// context and port its ids must be on) and WatchFD (the Go poller's wait on
// a file descriptor, for its event channel).
package verbs
