// Package neigh is neighbor resolution for an IPoIB interface: the ARP
// over IPoIB and IPv6 ND codecs, the neighbor table the datapath reads
// without locks, the resolution state machine of each entry (state.go:
// events in, actions out, on the caller's clock), and bounded learning
// from solicitations (learn.go).
//
// The codecs follow docs/ipoib-wire.md §3 (ARP with hardware type 32 and
// 20-octet link addresses) and §4 (the IPoIB link-layer address option of
// RFC 4391 in neighbor solicitations and advertisements, RFC 4861). The
// datapath calls them for every ARP or ND packet, so none of them
// allocates on success; every decoder error is an *ib.FieldError naming
// the field.
//
// Seams: the package sends nothing and keeps no timers of its own. Its
// owner, the interface's control goroutine (package ipoib), feeds it
// events and carries out the actions it returns; connections are not its
// business, only the link addresses they are keyed by.
package neigh
