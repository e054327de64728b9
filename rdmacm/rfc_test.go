//go:build rdma

package rdmacm

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"unsafe"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"golang.org/x/sys/unix"
)

// TestDestination: a REQ to another ipoibd goes to the service ID's rdma_cm
// port with the AF_IB pad; one to an RFC 4755 peer (NewRFCSender) names the
// service ID itself in sockaddr_ib and carries the private data from octet
// 0, as a kernel ipoib peer's ib_cm listener and ipoib read them.
func TestDestination(t *testing.T) {
	gid := ib.GID{0xfe, 0x80, 15: 0x42}
	var pd [cm.IPoIBPrivateDataLen]byte
	if err := (cm.PrivateData{UDQPN: 0x4abcde, ReceiveMTU: cm.LinuxReceiveMTU}).Encode(pd[:]); err != nil {
		t.Fatal(err)
	}
	sid := cm.IPoIBServiceID(0x48)
	for _, tc := range []struct {
		name    string
		rfc     bool
		wantSID uint64
		wantPad int
	}{
		{"another ipoibd: the mapped port", false, sidOf(qpnPort(0x48)), afIBPad},
		{"an RFC 4755 peer: the service ID as it is", true, sid, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Service{mode: modeIB, rfcIDs: tc.rfc, pkey: 0xffff}
			a, priv, err := s.destination(cm.ConnectParams{RemoteGID: gid, ServiceID: sid, PrivateData: pd[:]})
			if err != nil {
				t.Fatal(err)
			}
			raw := unsafe.Slice((*byte)(unsafe.Pointer(&a.ss)), int(a.len))
			if f := binary.NativeEndian.Uint16(raw[0:2]); f != unix.AF_IB || !bytes.Equal(raw[8:24], gid[:]) {
				t.Errorf("family %d, address % x", f, raw[8:24])
			}
			if got := binary.BigEndian.Uint64(raw[24:32]); got != tc.wantSID {
				t.Errorf("sib_sid %#016x, want %#016x", got, tc.wantSID)
			}
			if !bytes.Equal(priv[tc.wantPad:], pd[:]) || len(priv) != len(pd)+tc.wantPad {
				t.Errorf("private data % x, want %d pad octets then % x", priv, tc.wantPad, pd)
			}
		})
	}
	s := &Service{mode: modeIB, rfcIDs: true}
	if _, _, err := s.destination(cm.ConnectParams{RemoteGID: gid, ServiceID: 0x13F0411}); err == nil {
		t.Error("an RFC sender took a service ID that is not IPoIB's")
	}
}

// TestRFCSenderRefusedOnRoCE: rdma_cm takes AF_IB on InfiniBand ports only
// (cma_validate_port), so on the test bed's rxe the RFC sender is refused
// with a message that says so.
func TestRFCSenderRefusedOnRoCE(t *testing.T) {
	a, _ := openPair(t)
	_, err := NewRFCSender(a.dev, func(cm.Event) {})
	if err == nil || !strings.Contains(err.Error(), "need an InfiniBand port") {
		t.Fatalf("NewRFCSender on %s: %v", a.dev.Name(), err)
	}
}
