package ipoib

import "github.com/ipoibd/ipoibd/netdev"

// The kernel side's interfaces live in package netdev, so that its
// implementations (tun's, netdevtest's fake) need not import ipoib; these
// aliases keep their names here.
type (
	Netdev     = netdev.Netdev
	Packets    = netdev.Packets
	Link       = netdev.Link
	Routes     = netdev.Routes
	LinkEvent  = netdev.LinkEvent
	LinkChange = netdev.LinkChange
)

// Link changes (netdev.LinkChange).
const (
	AddrsChanged    = netdev.AddrsChanged
	LinkState       = netdev.LinkState
	RoutesChanged   = netdev.RoutesChanged
	AddrsUnwatched  = netdev.AddrsUnwatched
	LinkUnwatched   = netdev.LinkUnwatched
	RoutesUnwatched = netdev.RoutesUnwatched
	LinkGone        = netdev.LinkGone
)
