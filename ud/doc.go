// Package ud is the UD endpoint of an IPoIB interface: IPoIB encapsulation,
// MGIDs; group membership and the UD send/receive path come later.
//
// Today it holds the codecs of shared/spec/ipoib-wire.md that the datapath
// runs on every UD packet: the 4-octet encapsulation header (§1), the
// mapping of the broadcast group and of IPv4/IPv6 multicast groups to MGIDs
// (§5) and the UD MTU (§6). None of them allocates, and every decoder error
// is an *ib.FieldError naming the field.
package ud
