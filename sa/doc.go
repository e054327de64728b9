// Package sa is the protocol side of InfiniBand Subnet Administration as
// ipoibd needs it: the SA MADs (the SA header: the common MAD header, coded
// by package mad, then the RMPP header, SM_Key, AttributeOffset and
// ComponentMask; PathRecord; MCMemberRecord; the SA status codes) and the
// requests the interface asks: joins with the parameters a new group gets
// (JoinRequest, GroupParams, ParamsOf), leaves and path queries (join.go).
//
// Layouts follow IBA Vol.1 ch.15 (SA) and ch.13 (MAD, RMPP) as rdma-core's
// umad_sa.h and umad_sa_mcm.h and the kernel's sa_query.c transcribe them;
// the kernel's join rules are in docs/ipoib-wire.md §5. Every multi-octet
// field is big-endian. Records are padded to a multiple of 8 octets on the
// wire: AttributeOffset counts 8-octet words.
//
// Seams: the package is pure Go and does no I/O. Package umadsa sends
// these requests over libibumad; package ipoib asks for joins in sa's
// types through its Subnet interface, so it never imports a transport;
// sapath caches the path answers.
package sa
