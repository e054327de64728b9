package sapath

import (
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/sa"
)

var (
	us   = testutil.MustGID("fe80::2:c903:0:1")
	peer = testutil.MustGID("fe80::2:c903:0:3")
)

// record is what OpenSM answers for a path within its subnet: hop limit
// 0, exact MTU 2048, rate 10 Gb/s, packet lifetime 18.
func record() sa.PathRecord {
	return sa.PathRecord{DGID: peer, SGID: us, DLID: 3, SLID: 0x11, Reversible: true, NumbPath: 1, PKey: 0xffff, SL: 0,
		MTU: sa.Selected{Selector: sa.Exactly, Value: 4}, Rate: sa.Selected{Selector: sa.Exactly, Value: 3},
		Lifetime: sa.Selected{Selector: sa.Exactly, Value: 18}}
}

func TestFromRecord(t *testing.T) {
	for _, c := range []struct {
		name     string
		edit     func(*sa.PathRecord)
		lmc, ack uint8
		ah       ib.Path
		cm       cm.Path
		err      string
	}{
		{name: "subnet-local: LRH only, LIDs in the REQ", edit: func(*sa.PathRecord) {},
			ah: ib.Path{DLID: 3, StaticRate: 3},
			cm: cm.Path{LocalLID: 0x11, RemoteLID: 3, LocalGID: us, RemoteGID: peer, PacketRate: 3, SubnetLocal: true, LocalACKTimeout: 19}},
		{name: "hop limit 1: a GRH, still subnet-local", edit: func(r *sa.PathRecord) { r.HopLimit, r.SL, r.TClass, r.FlowLabel = 1, 5, 0x20, 0x12345 },
			ah: ib.Path{DLID: 3, SL: 5, StaticRate: 3, GRH: true, HopLimit: 1, TrafficClass: 0x20, FlowLabel: 0x12345},
			cm: cm.Path{LocalLID: 0x11, RemoteLID: 3, LocalGID: us, RemoteGID: peer, FlowLabel: 0x12345, PacketRate: 3, TrafficClass: 0x20, HopLimit: 1, SL: 5, SubnetLocal: true, LocalACKTimeout: 19}},
		{name: "routed: permissive LIDs in the REQ", edit: func(r *sa.PathRecord) { r.HopLimit = 64 },
			ah: ib.Path{DLID: 3, StaticRate: 3, GRH: true, HopLimit: 64},
			cm: cm.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: us, RemoteGID: peer, PacketRate: 3, HopLimit: 64, LocalACKTimeout: 19}},
		{name: "LMC 2: source path bits from our SLID", edit: func(*sa.PathRecord) {}, lmc: 2,
			ah: ib.Path{DLID: 3, StaticRate: 3, SrcPathBits: 1},
			cm: cm.Path{LocalLID: 0x11, RemoteLID: 3, LocalGID: us, RemoteGID: peer, PacketRate: 3, SubnetLocal: true, LocalACKTimeout: 19}},
		{name: "CA ACK delay counts", edit: func(*sa.PathRecord) {}, ack: 18,
			ah: ib.Path{DLID: 3, StaticRate: 3},
			cm: cm.Path{LocalLID: 0x11, RemoteLID: 3, LocalGID: us, RemoteGID: peer, PacketRate: 3, SubnetLocal: true, LocalACKTimeout: 20}},
		{name: "no DLID", edit: func(r *sa.PathRecord) { r.DLID = 0 }, err: "DLID 0x0000 is not a unicast LID"},
		{name: "multicast DLID", edit: func(r *sa.PathRecord) { r.DLID = 0xc001 }, err: "DLID 0xc001 is not a unicast LID"},
		{name: "permissive DLID", edit: func(r *sa.PathRecord) { r.DLID = 0xffff }, err: "not a unicast LID"},
		{name: "bad MTU", edit: func(r *sa.PathRecord) { r.MTU.Value = 9 }, err: "MTU code 9 is not an IB MTU"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := record()
			c.edit(&r)
			p, err := FromRecord(r, c.lmc, c.ack)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.AH != c.ah {
				t.Errorf("AH %+v\nwant %+v", p.AH, c.ah)
			}
			if p.CM != c.cm {
				t.Errorf("CM %+v\nwant %+v", p.CM, c.cm)
			}
			if p.MTU != ib.MTU2048 || p.Record != r {
				t.Errorf("MTU %v record %+v", p.MTU, p.Record)
			}
		})
	}
}

// Rows worked through the kernel's cm_ack_timeout by hand.
func TestACKTimeout(t *testing.T) {
	for _, c := range []struct{ delay, life, want uint8 }{
		{0, 0, 2},   // 1, and the delay 0 is within half of it
		{0, 18, 19}, // life + 1
		{15, 18, 19},
		{18, 18, 20}, // equal shares: double
		{19, 18, 20},
		{20, 18, 21},
		{20, 5, 20}, // the delay dominates
		{0, 30, 31},
		{0, 31, 31}, // capped
		{0, 63, 31},
		{31, 31, 31},
	} {
		if got := ACKTimeout(c.delay, c.life); got != c.want {
			t.Errorf("ACKTimeout(%d, %d) = %d, want %d", c.delay, c.life, got, c.want)
		}
	}
}
