package mtu

import "net/netip"

// Dest is one destination and its MTU, as a netdev's host routes take
// them in a batch (netdev.Routes.SetMany).
type Dest struct {
	Addr netip.Addr
	MTU  int
}
