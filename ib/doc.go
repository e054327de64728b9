// Package ib is the InfiniBand vocabulary shared by every other package of
// ipoibd, and the provider boundary they drive an adapter through.
//
// The vocabulary is plain value types with wire codecs: GIDs, queue pair
// numbers, partition and queue keys, the 20-octet IPoIB link address and
// the IB MTU codes. Their decoders, and the wire codecs of cm, ud, neigh
// and softib, report a *FieldError naming the offending field (errors.go).
//
// The provider boundary (provider.go) is the interfaces an adapter
// implements: Device, QP, CQ, SRQ, MR, AH, the QP1 MADService and
// counters. They follow verbs closely, so that cm and ipoib run the same
// on softib and on rdma-core (package verbs). A Slab (slab.go) is packet
// memory mapped outside the Go heap for them. Nothing here touches the
// network.
package ib
