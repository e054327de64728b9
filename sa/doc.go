// Package sa encodes and decodes the Subnet Administration MADs ipoibd
// needs on an InfiniBand port: the SA header (the common MAD header,
// coded by package mad, then the RMPP header, SM_Key, AttributeOffset and
// ComponentMask), PathRecord and MCMemberRecord, and the SA status codes.
//
// Layouts follow IBA Vol.1 ch.15 (SA) and ch.13 (MAD, RMPP) as rdma-core's
// umad_sa.h and umad_sa_mcm.h and the kernel's sa_query.c transcribe them.
// Every multi-octet field is big-endian. Records are padded to a multiple
// of 8 octets on the wire: AttributeOffset counts 8-octet words.
//
// The package is pure Go; the SA client that sends these over umad lives
// under the rdma build tag.
package sa
