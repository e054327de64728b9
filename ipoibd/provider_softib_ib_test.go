package main

import (
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/softib"
	"github.com/ipoibd/ipoibd/umadsa"
)

// TestIBPlace: what the subnet manager assigned a port becomes the softib
// port's place on the subnet; a port the SM has not brought up, or a
// table softib cannot hold, is refused with the reason.
func TestIBPlace(t *testing.T) {
	up := umadsa.PortInfo{LID: 0x12, LMC: 2, SMLID: 1, State: 4, Active: true,
		GID: testutil.MustGID("fe80::2:c903:0:7"), PKeys: []ib.PKey{0xffff, 0x8001}}
	for _, tc := range []struct {
		name string
		edit func(*umadsa.PortInfo)
		want string // in the error; "" for none
	}{
		{"active", func(*umadsa.PortInfo) {}, ""},
		{"not active", func(p *umadsa.PortInfo) { p.Active, p.State = false, 2 }, "not active (state 2)"},
		{"no LID", func(p *umadsa.PortInfo) { p.LID = 0 }, "LID 0"},
		{"no SM", func(p *umadsa.PortInfo) { p.SMLID = 0 }, "SM LID 0"},
		{"no P_Keys", func(p *umadsa.PortInfo) { p.PKeys = nil }, "P_Key table is empty"},
		{"a gap in the table", func(p *umadsa.PortInfo) { p.PKeys = []ib.PKey{0xffff, 0, 0x8001} }, "index 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pi := up
			tc.edit(&pi)
			var sc softib.Config
			err := ibPlace(pi, &sc)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one with %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := softib.IBConfig{LID: 0x12, LMC: 2, SMLID: 1, GIDPrefix: 0xfe80_0000_0000_0000, GUID: 0x0002_c903_0000_0007}
			if sc.IB != want || len(sc.PKeys) != 2 || sc.PKeys[1] != 0x8001 {
				t.Errorf("IB %+v P_Keys %v, want %+v [0xffff 0x8001]", sc.IB, sc.PKeys, want)
			}
		})
	}
}

// TestSoftibIBNeedsRDMA: the tests' ipoibd is built without the rdma tag,
// so --softib-link ib cannot read the port through libibumad: it says so,
// and how to build one that can.
func TestSoftibIBNeedsRDMA(t *testing.T) {
	_, errOut, code := runBinary(t, binary, "--underlay", "127.0.0.1", "--softib-link", "ib", "--softib-fabric", "127.0.0.1:4790")
	if code == 0 || !strings.Contains(errOut, "--softib-link ib") || !strings.Contains(errOut, "-tags rdma") {
		t.Errorf("exit %d, stderr %q; want a refusal naming the flag and -tags rdma", code, errOut)
	}
}
