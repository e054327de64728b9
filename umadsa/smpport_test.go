package umadsa

import (
	"slices"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// portInfoAttr builds a PortInfo attribute with the fields parsePortInfo reads.
func portInfoAttr(lid, smLID uint16, lmc, state, smSL uint8) []byte {
	b := make([]byte, smpDataLen)
	copy(b[8:], []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0})
	b[16], b[17] = byte(lid>>8), byte(lid)
	b[18], b[19] = byte(smLID>>8), byte(smLID)
	b[32] = 0x20 | state&0x0f // LinkSpeedSupported | PortState
	b[34] = 0xc0 | lmc&0x07   // M_KeyProtectBits | LMC
	b[36] = 0x50 | smSL&0x0f  // NeighborMTU | MasterSMSL
	return b
}

func pkeyBlock(keys ...uint16) []byte {
	b := make([]byte, smpDataLen)
	for i, k := range keys {
		b[2*i], b[2*i+1] = byte(k>>8), byte(k)
	}
	return b
}

func TestParsePortInfo(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pi, pkeys []byte
		want      PortInfo
		err       bool
	}{
		{name: "active, LMC 2, two partitions", pi: portInfoAttr(0x14, 1, 2, 4, 3), pkeys: pkeyBlock(0xffff, 0x8002),
			want: PortInfo{LID: 0x14, SMLID: 1, LMC: 2, State: 4, Active: true, SMSL: 3, PKeys: []ib.PKey{0xffff, 0x8002}, PKey0: 0xffff}},
		{name: "init, no LID yet", pi: portInfoAttr(0, 0, 0, 2, 0), pkeys: pkeyBlock(0xffff),
			want: PortInfo{State: 2, PKeys: []ib.PKey{0xffff}, PKey0: 0xffff}},
		{name: "gap kept by index", pi: portInfoAttr(3, 1, 0, 4, 0), pkeys: pkeyBlock(0xffff, 0, 0x0003),
			want: PortInfo{LID: 3, SMLID: 1, State: 4, Active: true, PKeys: []ib.PKey{0xffff, 0, 0x0003}, PKey0: 0xffff}},
		{name: "short PortInfo", pi: make([]byte, 40), pkeys: pkeyBlock(0xffff), err: true},
		{name: "short P_Key block", pi: portInfoAttr(3, 1, 0, 4, 0), pkeys: make([]byte, 10), err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePortInfo(tc.pi, tc.pkeys)
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want error %v", err, tc.err)
			}
			if tc.err {
				return
			}
			tc.want.GID = ib.GID{0xfe, 0x80}
			if got.LID != tc.want.LID || got.LMC != tc.want.LMC || got.SMLID != tc.want.SMLID || got.Active != tc.want.Active ||
				!slices.Equal(got.PKeys, tc.want.PKeys) || got.State != tc.want.State || got.SMSL != tc.want.SMSL || got.GID != tc.want.GID || got.PKey0 != tc.want.PKey0 {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// FuzzParsePortInfo: whatever an SMA answers, parsing gives an error or a
// reading, never a panic, and a P_Key table no longer than one block.
func FuzzParsePortInfo(f *testing.F) {
	f.Add(portInfoAttr(0x14, 1, 2, 4, 3), pkeyBlock(0xffff, 0x8002))
	f.Add([]byte{}, []byte{1})
	f.Fuzz(func(t *testing.T, pi, pkeys []byte) {
		got, err := parsePortInfo(pi, pkeys)
		if err == nil && len(got.PKeys) > pkeysPerBlock {
			t.Fatalf("%d P_Keys from one block", len(got.PKeys))
		}
	})
}
