//go:build rdma

package verbs

import (
	"errors"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
)

// RDMACMPort is what a connection service over librdmacm needs of a Device
// beyond ib.Device, to put its rdma_cm ids on the same device context and
// port as the Device's QPs.
type RDMACMPort struct {
	// Context is the device's struct ibv_context *, as librdmacm's
	// rdma_get_devices listed it: librdmacm puts the same pointer in every
	// rdma_cm id bound to this device (the id's verbs field), and the QPs
	// this Device makes live on it. Compare it; do not dereference it.
	Context unsafe.Pointer
	Port    uint8 // the port number an id on this port carries
	// Ethernet is true on RoCE (IP addresses), false on InfiniBand (AF_IB).
	Ethernet bool
	// Ifindex is, on RoCE, the network interface of the port's GID: the
	// scope of an IPv6 link-local GID. 0 on InfiniBand.
	Ifindex int
}

// RDMACMPort returns the port's librdmacm context. It is exported for
// package rdmacm alone, the kernel CM's connection service (ipoibd --cm
// kernel), which lives outside this provider so that the provider knows
// nothing of the CM or IPoIB; that service checks each id against it
// (rdma_cm picks the device by address and route) and leaves the QPs to
// the Device. It fails after Close, and on a device opened with NoRDMACM,
// whose context librdmacm never saw.
func (d *Device) RDMACMPort() (RDMACMPort, error) {
	if d.closed.Load() {
		return RDMACMPort{}, ib.ErrClosed
	}
	if d.own {
		return RDMACMPort{}, errors.New("verbs: " + d.cfg.Device + " was opened without librdmacm (NoRDMACM, or the rdma_ucm module is not loaded), so rdma_cm cannot share its context")
	}
	return RDMACMPort{Context: unsafe.Pointer(d.ctx), Port: d.portNum, Ethernet: d.ethernet, Ifindex: d.ifindex}, nil
}
