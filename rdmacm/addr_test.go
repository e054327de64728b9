package rdmacm

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"golang.org/x/sys/unix"
)

// Both ends derive the port from the UD QPN in the listener's link address:
// never 0 ("any"), never privileged, and distinct for QPNs closer than
// 64512.
func TestQPNPort(t *testing.T) {
	for _, tt := range []struct {
		qpn  ib.QPN
		port uint16
	}{
		{0, 1024}, {0x11, 1041}, {64511, 65535}, {64512, 1024}, {0xffffff, 1024 + 0xffffff%64512},
	} {
		if got := qpnPort(tt.qpn); got != tt.port {
			t.Errorf("qpnPort(%#x) = %d, want %d", tt.qpn, got, tt.port)
		}
	}
	seen := map[uint16]ib.QPN{}
	for qpn := ib.QPN(0); qpn < 64512; qpn++ {
		p := qpnPort(qpn)
		if p < minIPoIBPort {
			t.Fatalf("qpnPort(%#x) = %d: privileged", qpn, p)
		}
		if o, dup := seen[p]; dup {
			t.Fatalf("QPNs %#x and %#x share port %d", o, qpn, p)
		}
		seen[p] = qpn
	}
}

func TestServicePort(t *testing.T) {
	p, err := servicePort(cm.IPoIBServiceID(0x48))
	if err != nil || p != qpnPort(0x48) {
		t.Errorf("servicePort(IPoIB SID of QPN 0x48) = %d, %v; want %d", p, err, qpnPort(0x48))
	}
	if _, err := servicePort(0x0000000001060000 | 80); err == nil || !strings.Contains(err.Error(), "IPoIB-CM") {
		t.Errorf("servicePort of a non-IPoIB service ID: %v", err)
	}
}

func TestAddrMode(t *testing.T) {
	v4 := ib.GIDFromAddr(netip.MustParseAddr("192.0.2.1"))
	v6 := ib.GIDFromAddr(netip.MustParseAddr("fe80::1"))
	for _, tt := range []struct {
		ethernet bool
		gid      ib.GID
		mode     addrMode
		family   int
		name     string
	}{
		{true, v4, modeIPv4, unix.AF_INET, "AF_INET (RoCE)"},
		{true, v6, modeIPv6, unix.AF_INET6, "AF_INET6 (RoCE)"},
		{false, v6, modeIB, unix.AF_IB, "AF_IB"},
		{false, v4, modeIB, unix.AF_IB, "AF_IB"},
	} {
		m := modeFor(tt.ethernet, tt.gid)
		if m != tt.mode || m.family() != tt.family || m.String() != tt.name {
			t.Errorf("modeFor(%v, %v) = %v (family %d), want %v (family %d)", tt.ethernet, tt.gid, m, m.family(), tt.name, tt.family)
		}
	}
}

// AF_IB service IDs lie in the kernel's RDMA_PS_IB range, the same the IP
// port spaces put on the wire (rdma_get_service_id: ps << 16 | port).
func TestSIDOf(t *testing.T) {
	if got, want := sidOf(1041), uint64(0x00000000013F0411); got != want {
		t.Errorf("sidOf(1041) = %#x, want %#x", got, want)
	}
	if sidOf(0)&0xffff != 0 {
		t.Error("sidOf(0) names a port")
	}
}

// cmaIPVersion mirrors how the kernel first reads a REQ's private data
// (cma_save_ip_info): version octet 0, then the IP version in the top
// nibble of the next octet; 4 or 6 send an AF_IB request down the IP path.
func cmaIPVersion(priv []byte) int {
	if priv[0] != 0 {
		return -1
	}
	return int(priv[1] >> 4)
}

func TestAFIBPad(t *testing.T) {
	var pd [cm.IPoIBPrivateDataLen]byte
	if err := (cm.PrivateData{UDQPN: 0x4abcde, ReceiveMTU: cm.LinuxReceiveMTU}).Encode(pd[:]); err != nil {
		t.Fatal(err)
	}
	if v := cmaIPVersion(pd[:]); v != 4 {
		t.Fatalf("the kernel would read IP version %d from bare private data of UD QPN 0x4abcde; the pad is for 4", v)
	}
	padded := append(make([]byte, afIBPad), pd[:]...)
	if v := cmaIPVersion(padded); v == 4 || v == 6 {
		t.Errorf("padded private data still reads as IPv%d", v)
	}
	if binary.BigEndian.Uint32(padded[afIBPad+4:]) != cm.LinuxReceiveMTU {
		t.Error("the pad moved the private data")
	}
}
