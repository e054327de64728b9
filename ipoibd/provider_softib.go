package main

import (
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/softib"
)

// softibPKeyHint says where a P_Key missing from softib's table comes from.
const softibPKeyHint = "softib: list it in --softib-pkeys"

// softibMTUHint says where softib's IB MTU, and so datagram mode's MTU,
// comes from.
const softibMTUHint = "softib's IB MTU is the largest that fits the underlay's MTU: 1500 gives 1024, about 2100 gives 2048; see ipoibd(8)"

// openSoftib opens the software adapter and puts it in cfg. Its
// connection service is always ipoibd's own, on its QP1. On RoCE framing
// it has no subnet administrator: the underlay's multicast and addresses
// serve; on the InfiniBand link layer it is a node of a subnet
// (openSoftibIB).
func openSoftib(sc softib.Config, cfg *ipoib.Config) (ib.Device, error) {
	if sc.LinkLayer == softib.LinkInfiniBand {
		return openSoftibIB(sc, cfg)
	}
	dev, err := softib.Open(sc)
	if err != nil {
		return nil, err // not dev: a nil *softib.Device is no nil ib.Device
	}
	cfg.Device = dev
	return dev, nil
}
