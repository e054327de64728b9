package rdmacm

import (
	"fmt"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"golang.org/x/sys/unix"
)

// How the connection service addresses its peers through librdmacm.
//
// The kernel's rdma_cm cannot listen on the RFC 4755 service ID: with
// AF_IB it binds only service IDs inside its own port spaces
// (0x00000000PPPPxxxx, cma_select_ib_ps; anything else is
// EPROTONOSUPPORT), and with IP addresses the service ID on the wire is
// always the port space and a 16-bit port. So every port type carries the
// connection to a 16-bit port derived from the UD QPN that the IPoIB
// service ID names, in the port space RDMA_PS_IB (which, unlike
// RDMA_PS_TCP, lets the QP type be RC or UC):
//
//   - RoCE, IPv4-mapped GID: AF_INET, the GID's IPv4 address and the port
//     (wire service ID 0x00000000013F0000 | port);
//   - RoCE, other GID: AF_INET6 likewise (link-local: scoped to the GID's
//     interface);
//   - InfiniBand: AF_IB, the port GID and service ID
//     RDMA_IB_PS_IB | port (the same wire service ID).
//
// The peer derives the same port from the QPN in our link address, so the
// RFC's rule "connect to the service ID of the destination's UD QPN" holds
// in this mapped form. It does not interoperate with the Linux ipoib
// driver, which listens on 0x1000000000000000 | QPN itself (though both
// can run on one adapter port: their service IDs differ).

// Port space values of librdmacm's rdma_cma.h (abi.go checks them).
const (
	rdmaPSIB     = 0x013F                 // RDMA_PS_IB
	rdmaIBPSIB   = uint64(rdmaPSIB) << 16 // RDMA_IB_PS_IB: its AF_IB service IDs
	minIPoIBPort = 1024                   // below: privileged (CAP_NET_BIND_SERVICE)
)

// qpnPort maps a UD QPN to the port its interface listens on: 1024 plus
// the QPN modulo 64512, so the port is never 0 (which would mean "any")
// nor privileged. QPNs that differ by a multiple of 64512 share a port;
// that matters only for two interfaces on the same address (GID), where
// the second Listen fails with EADDRINUSE.
func qpnPort(qpn ib.QPN) uint16 {
	const span = 1<<16 - minIPoIBPort
	return uint16(minIPoIBPort + uint32(qpn&ib.QPNMask)%span)
}

// servicePort returns the port an IPoIB-CM service ID maps to.
func servicePort(serviceID uint64) (uint16, error) {
	qpn, err := cm.ParseIPoIBServiceID(serviceID)
	if err != nil {
		return 0, fmt.Errorf("rdmacm: only IPoIB-CM service IDs map to rdma_cm ports: %w", err)
	}
	return qpnPort(qpn), nil
}

// addrMode is the address family the service uses on its port.
type addrMode uint8

const (
	modeIPv4 addrMode = iota + 1 // RoCE, IPv4-mapped GID
	modeIPv6                     // RoCE, other GID
	modeIB                       // InfiniBand
)

// modeFor picks the address family for a port: IP on Ethernet (RoCE),
// where the kernel refuses AF_IB, and AF_IB on InfiniBand, which needs no
// IPoIB netdev with an address.
func modeFor(ethernet bool, gid ib.GID) addrMode {
	switch {
	case !ethernet:
		return modeIB
	case gid.IsIPv4Mapped():
		return modeIPv4
	}
	return modeIPv6
}

func (m addrMode) family() int {
	switch m {
	case modeIPv4:
		return unix.AF_INET
	case modeIPv6:
		return unix.AF_INET6
	}
	return unix.AF_IB
}

func (m addrMode) String() string {
	switch m {
	case modeIPv4:
		return "AF_INET (RoCE)"
	case modeIPv6:
		return "AF_INET6 (RoCE)"
	}
	return "AF_IB"
}

// afIBPad is how many zero octets go in front of our private data in an
// AF_IB REQ. The kernel first reads a REQ's private data as rdma_cm's IP
// header (cma_save_ip_info): version octet 0 and an IP-version nibble of 4
// or 6 make it look for an IP net device, and without one it drops the
// REQ. IPoIB private data starts with 0 and then the top of the UD QPN, so
// peers with a UD QPN of 0x4xxxxx or 0x6xxxxx could not connect; four zero
// octets make the version nibble 0, and the receiver strips them.
const afIBPad = 4

// sidOf returns the AF_IB service ID of a port (0: any port, for a source
// address).
func sidOf(port uint16) uint64 { return rdmaIBPSIB | uint64(port) }
