package main

import (
	"net/netip"

	"github.com/ipoibd/ipoibd/bond"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
)

// netif is an interface the daemon serves: on one port (ipoib.Interface)
// or over several (bond.Bond, the first interface with --underlay given
// more than once). The control socket, the metrics and the state file
// see no difference.
type netif interface {
	Name() string
	PKey() ib.PKey
	LinkAddr() ib.LinkAddr
	Show() ipoib.Info
	Stats() []ib.Counter
	Neighbors() []ipoib.NeighInfo
	Connections() []ipoib.ConnInfo
	FlushNeighbors(ip netip.Addr) int
	SetMode(m ipoib.Mode) error
	InNetns(f func() error) error
	Start()
	Close()
	Lost() <-chan struct{}
	LostErr() error
	Closing() <-chan struct{}
}

var (
	_ netif = (*ipoib.Interface)(nil)
	_ netif = (*bond.Bond)(nil)
)
