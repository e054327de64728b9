//go:build rdma

package verbs

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// TestPortAddrFollowed: Port reports the LID, LMC and SM LID last read,
// not those read at open, and a read that changes nothing says so; a RoCE
// port reports none.
func TestPortAddrFollowed(t *testing.T) {
	d := &Device{port: ib.PortAttr{PKeys: []ib.PKey{ib.DefaultPKey}, LinkLayer: "InfiniBand"}}
	for _, tc := range []struct {
		name    string
		addr    portAddr
		changed bool
	}{
		{"at open", portAddr{lid: 0x11, smLID: 1, lmc: 0}, true},
		{"an event that changed nothing", portAddr{lid: 0x11, smLID: 1, lmc: 0}, false},
		{"the SM moved the LID and the LMC", portAddr{lid: 0x24, smLID: 1, lmc: 2}, true},
		{"a new SM", portAddr{lid: 0x24, smLID: 7, lmc: 2}, true},
	} {
		if got := d.setAddr(tc.addr); got != tc.changed {
			t.Errorf("%s: changed %v, want %v", tc.name, got, tc.changed)
		}
		if p := d.Port(); p.LID != tc.addr.lid || p.LMC != tc.addr.lmc || p.SMLID != tc.addr.smLID {
			t.Errorf("%s: Port reports LID %#x LMC %d SM LID %#x, want %+v", tc.name, p.LID, p.LMC, p.SMLID, tc.addr)
		}
	}
	roce := &Device{port: ib.PortAttr{PKeys: []ib.PKey{ib.DefaultPKey}}, ethernet: true}
	roce.setAddr(portAddr{lid: 0x5, lmc: 1})
	if p := roce.Port(); p.LID != 0 || p.LMC != 0 {
		t.Errorf("RoCE port reports LID %#x LMC %d, want none", p.LID, p.LMC)
	}
}
