// Package encap is IPoIB's encapsulation (RFC 4391) as the interface's
// datapath needs it; the queue pairs that carry it are package ipoib's.
//
// It has the codecs of shared/spec/ipoib-wire.md that the datapath runs on
// every packet: the 4-octet encapsulation header (§1, on UD and connected
// payloads alike), the mapping of the broadcast group and of IPv4/IPv6
// multicast groups to MGIDs (§5) and the UD MTU and receive buffer size
// (§6). None of them allocates, and every decoder error is an
// *ib.FieldError naming the field.
//
// KernelGroups (groups.go) reads the multicast groups the kernel has
// joined on the interface, whose MGIDs the interface's UD QP attaches.
package encap
