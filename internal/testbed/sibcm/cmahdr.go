package main

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// rdma_cm on IP addressing (the kernel's cma.c, librdmacm's cma-hdr.h) puts
// two things on the CM wire that ib_cm itself knows nothing about:
//
//   - the service ID of a REQ is the port space in octets 5-6 and the
//     destination port in octets 7-8: 0x0000000001PP0000 | port;
//   - the REQ's private data starts with a 36-octet header naming both
//     ends' IP addresses and the sender's port; the consumer's private
//     data follows it.
//
// The kernel reads the header on every REQ for an IP-addressed listener
// (cma_save_ip_info, cma_match_private_data) and refuses the connection
// when the version or IP version is wrong. Nothing else in the project
// needs this, so it lives beside the one program that does.

// Port spaces (enum rdma_ucm_port_space) as they appear in a service ID.
const (
	psTCP = 0x0106 // RDMA_PS_TCP: reliable connections (RC)
	psUDP = 0x0111 // RDMA_PS_UDP: datagrams, SIDR
	psIB  = 0x013f // RDMA_PS_IB: any QP type
)

// servicePrefix is what every IP-addressed rdma_cm service ID has above
// the low octet of its port space: each port space is 0x01PP.
const servicePrefix = 0x0000000001000000

// serviceID is the service ID rdma_cm listens on for port in port space ps.
func serviceID(ps, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// splitServiceID returns the port space and port of an rdma_cm service ID,
// or ok false for a service ID outside the IP port spaces (an IBA one, such
// as IPoIB's 0x1000000000000000|QPN).
func splitServiceID(sid uint64) (ps, port uint16, ok bool) {
	if sid&0xffffffffff000000 != servicePrefix {
		return 0, 0, false
	}
	ps = uint16(sid >> 16)
	switch ps {
	case psTCP, psUDP, psIB:
		return ps, uint16(sid), true
	}
	return 0, 0, false
}

// Layout of the header (struct cma_hdr).
const (
	cmaHeaderLen = 36
	cmaVersion   = 0x00 // CMA_VERSION
)

// cmaHeader is rdma_cm's private-data header. Src and Dst are the sender's
// and the receiver's IP addresses (both IPv4 or both IPv6); Port is the
// sender's port (the receiver's is in the service ID).
type cmaHeader struct {
	Port     uint16
	Src, Dst netip.Addr
}

// marshal writes the header into b[0:36].
func (h cmaHeader) marshal(b []byte) error {
	if len(b) < cmaHeaderLen {
		return fmt.Errorf("cma header: buffer of %d octets, need %d", len(b), cmaHeaderLen)
	}
	// Two IPv4 addresses (mapped or not) make an IPv4 header; two IPv6
	// ones an IPv6 header.
	src, dst := h.Src, h.Dst
	ver := byte(6)
	switch {
	case !src.IsValid() || !dst.IsValid() || src.Zone() != "" || dst.Zone() != "":
		return fmt.Errorf("cma header: addresses %v and %v", h.Src, h.Dst)
	case src.Unmap().Is4() && dst.Unmap().Is4():
		src, dst, ver = src.Unmap(), dst.Unmap(), 4
	case src.Is4() || dst.Is4():
		return fmt.Errorf("cma header: addresses %v and %v are not one IP version", h.Src, h.Dst)
	}
	b = b[:cmaHeaderLen]
	clear(b)
	b[0] = cmaVersion
	b[1] = ver << 4
	binary.BigEndian.PutUint16(b[2:4], h.Port)
	putCMAAddr(b[4:20], src)
	putCMAAddr(b[20:36], dst)
	return nil
}

// putCMAAddr writes union cma_ip_addr: an IPv6 address whole, an IPv4 one
// in the last four octets after zeros.
func putCMAAddr(b []byte, a netip.Addr) {
	if a.Is4() {
		v4 := a.As4()
		copy(b[12:16], v4[:])
		return
	}
	v6 := a.As16()
	copy(b, v6[:])
}

// parseCMAHeader reads the header at the start of a REQ's private data and
// returns it with the consumer's private data after it. Like the kernel it
// looks only at the high nibble of the IP version octet and ignores the
// padding in front of an IPv4 address.
func parseCMAHeader(b []byte) (cmaHeader, []byte, error) {
	if len(b) < cmaHeaderLen {
		return cmaHeader{}, nil, fmt.Errorf("cma header: %d octets of private data, need %d", len(b), cmaHeaderLen)
	}
	if b[0] != cmaVersion {
		return cmaHeader{}, nil, fmt.Errorf("cma header: version %d, want %d", b[0], cmaVersion)
	}
	h := cmaHeader{Port: binary.BigEndian.Uint16(b[2:4])}
	switch ver := b[1] >> 4; ver {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(b[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(b[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(b[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return cmaHeader{}, nil, fmt.Errorf("cma header: IP version %d, want 4 or 6", ver)
	}
	return h, b[cmaHeaderLen:], nil
}
