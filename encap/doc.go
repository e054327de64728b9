// Package encap is IPoIB's encapsulation (RFC 4391) as the interface's
// datapath needs it: the 4-octet encapsulation header on UD and connected
// payloads alike (docs/ipoib-wire.md §1), the MGIDs of the broadcast group
// and of IPv4/IPv6 multicast groups (§5), and the UD MTU and receive
// buffer size (§6). None of these allocates, and every decoder error is an
// *ib.FieldError naming the field.
//
// Seams: it knows only package ib. The queue pairs that carry the frames
// are package ipoib's; the SA joins of the groups are package sa's.
// KernelGroups (groups.go) reads, from the kernel, the multicast groups
// joined on the interface, whose MGIDs the interface's UD QP attaches.
package encap
