// Package ib is the InfiniBand vocabulary shared by every other package of
// ipoibd: GIDs, queue pair numbers, partition and queue keys, the 20-octet
// IPoIB link address and the IB MTU codes.
//
// Everything here is a plain value type with a wire codec; nothing in this
// package touches the network.
package ib
