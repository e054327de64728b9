// Package ib is the InfiniBand vocabulary every other package of ipoibd
// speaks, and the provider boundary they drive an adapter through.
//
// The vocabulary is plain value types with wire codecs: GIDs, queue pair
// numbers, partition and queue keys, the 20-octet IPoIB link address with
// its RC/UC flags (docs/ipoib-wire.md §2) and the IB MTU codes. Their
// decoders, and the wire codecs built on them (cm, sa, encap, neigh,
// softib, offload), report a *FieldError naming the offending field
// (errors.go).
//
// The seam: provider.go is the set of interfaces an adapter implements
// (Device, QP, CQ, SRQ, MR, AH, the QP1 MADService, counters); softib and
// verbs implement them, ipoib and cm use them and never name a provider.
// They follow verbs closely so that the same code runs on both. A Slab
// (slab.go) is packet memory mapped outside the Go heap for them
// (docs/design.md, "The provider boundary"). Nothing here touches the
// network.
package ib
