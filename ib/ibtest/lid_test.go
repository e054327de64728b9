package ibtest

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// TestUDByLID: on a LID-routed fabric a datagram goes where its address
// handle's LID says, and its completion shows what an InfiniBand adapter
// reports: the sender's LID with its path bits, the SL, and a source GID
// only when a GRH came with it.
func TestUDByLID(t *testing.T) {
	for _, tc := range []struct {
		name     string
		path     func(b *end) ib.Path
		wantGRH  bool
		wantLID  uint16
		delivers bool
	}{
		{"no GRH", func(b *end) ib.Path { return ib.Path{DLID: b.dev.Port().LID, SL: 3} }, false, 0x11, true},
		{"with a GRH", func(b *end) ib.Path { return ib.Path{DLID: b.dev.Port().LID, SL: 5, GRH: true, HopLimit: 1} }, true, 0x11, true},
		{"path bits", func(b *end) ib.Path { return ib.Path{DLID: b.dev.Port().LID, SrcPathBits: 2} }, false, 0x13, true},
		{"by GID alone", func(*end) ib.Path { return ib.Path{} }, true, 0x11, true},
		{"an unrouted LID", func(*end) ib.Path { return ib.Path{DLID: 0x99} }, false, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFabric()
			a, b := newEnd(t, f, Config{LID: 0x11}), newEnd(t, f, Config{LID: 0x22})
			qa, qb := udReady(t, a, ib.DefaultPKey, 7), udReady(t, b, ib.DefaultPKey, 7)
			if _, err := qb.PostRecv([]ib.RecvWR{{ID: 1, SGE: b.sge(0, 2048)}}); err != nil {
				t.Fatal(err)
			}
			path := tc.path(b)
			ah, _ := a.dev.CreateAH(ib.AHAttr{DestGID: b.dev.Port().GID, Path: path})
			if _, err := qa.PostSend([]ib.SendWR{{ID: 2, SGE: a.put(0, []byte("hello")), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: 7}}); err != nil {
				t.Fatal(err)
			}
			if !tc.delivers {
				none(t, b.dev, b.rcq)
				if v := f.Counters()[fabricNoDest].Value; v != 1 {
					t.Errorf("no_destination %d, want 1", v)
				}
				return
			}
			wc := wait(t, b.rcq)
			wantGID := ib.GID{}
			if tc.wantGRH {
				wantGID = a.dev.Port().GID
			}
			if wc.Status != ib.WCSuccess || wc.SrcLID != tc.wantLID || wc.SL != path.SL || wc.GRH != tc.wantGRH || wc.SrcGID != wantGID || wc.SrcQPN != qa.Num() {
				t.Errorf("completion %+v; want from LID %#x SL %d GRH %v GID %v", wc, tc.wantLID, path.SL, tc.wantGRH, wantGID)
			}
		})
	}
	f := NewFabric()
	newEnd(t, f, Config{LID: 0x11})
	if _, err := f.Open(Config{LID: 0x11}); err == nil {
		t.Error("a second port with LID 0x11 opened")
	}
	if _, err := f.Open(Config{LID: 0xc001}); err == nil {
		t.Error("a port with multicast LID 0xc001 opened")
	}
}
