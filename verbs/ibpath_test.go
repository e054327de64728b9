//go:build rdma

package verbs

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// An ib.Path reaches the C helpers only on an InfiniBand port and only when
// it names a LID: RoCE keeps its GID-only address whatever the caller puts
// in the path. Fields are cut to their IBA widths.
func TestIBPath(t *testing.T) {
	full := ib.Path{DLID: 0x1234, SL: 0x1f, StaticRate: 0xc3, SrcPathBits: 0xff, GRH: true, HopLimit: 2, TrafficClass: 0xa0, FlowLabel: 0xfabcde}
	for _, c := range []struct {
		name     string
		ethernet bool
		path     ib.Path
		ok       bool
		// want: dlid, sl, static_rate, src_path_bits, grh, hop_limit, traffic_class, flow_label
		want [8]uint32
	}{
		{"RoCE ignores a path", true, full, false, [8]uint32{}},
		{"RoCE, zero path", true, ib.Path{}, false, [8]uint32{}},
		{"IB, zero path: GID only as before", false, ib.Path{}, false, [8]uint32{}},
		{"IB, SL without a LID is no path", false, ib.Path{SL: 3, GRH: true}, false, [8]uint32{}},
		{"IB, LID only", false, ib.Path{DLID: 7, SL: 1, StaticRate: 3}, true, [8]uint32{7, 1, 3, 0, 0, 0, 0, 0}},
		{"IB, widths cut", false, full, true, [8]uint32{0x1234, 0xf, 0x03, 0x7f, 1, 2, 0xa0, 0xabcde}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &Device{ethernet: c.ethernet}
			p, ok := d.ibPath(c.path)
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v", ok, c.ok)
			}
			got := [8]uint32{uint32(p.dlid), uint32(p.sl), uint32(p.static_rate), uint32(p.src_path_bits),
				uint32(p.grh), uint32(p.hop_limit), uint32(p.traffic_class), uint32(p.flow_label)}
			if got != c.want {
				t.Errorf("got %#x, want %#x", got, c.want)
			}
		})
	}
}
