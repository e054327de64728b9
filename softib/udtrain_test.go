package softib

import (
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// A burst of UD sends leaves in as few underlay sends as GSO allows, and
// every datagram still arrives whole, in order, at its own destination.
func TestUDTrains(t *testing.T) {
	a := newHost(t, "127.0.0.1", testutil.Port(14860))
	b := newHost(t, "127.0.0.2", testutil.Port(14860))
	c := newHost(t, "127.0.0.3", testutil.Port(14860))
	const qkey = 0x0b1b
	qa, qb, qc := udQP(t, a, qkey), udQP(t, b, qkey), udQP(t, c, qkey)
	toB, err := a.dev.CreateAH(ib.AHAttr{DestGID: b.dev.Port().GID})
	if err != nil {
		t.Fatal(err)
	}
	toC, err := a.dev.CreateAH(ib.AHAttr{DestGID: c.dev.Port().GID})
	if err != nil {
		t.Fatal(err)
	}
	type dg struct {
		toC  bool
		size int
	}
	same := func(n, size int) []dg {
		out := make([]dg, n)
		for k := range out {
			out[k] = dg{size: size}
		}
		return out
	}
	tests := []struct {
		name  string
		burst []dg
		sends int
	}{
		{"one", same(1, 2044), 1},
		{"equal sizes", same(15, 4092), 1},
		{"short last", append(same(14, 4092), dg{size: 1000}), 1},
		{"a train holds 64 KiB", same(16, 4092), 2},
		{"short in the middle ends the train", append(append(same(3, 2044), dg{size: 100}), same(3, 2044)...), 2},
		{"longer one starts a new train", append(same(2, 1000), same(2, 2044)...), 2},
		{"many small datagrams, one train", same(32, 64), 1},
		{"destinations alternate", []dg{{false, 500}, {true, 500}, {false, 500}, {true, 500}}, 4},
		{"wrong Q_Key splits", nil, 2}, // built below
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			burst := tc.burst
			qkeys := make([]ib.QKey, 0)
			if burst == nil {
				burst = same(4, 700)
				qkeys = []ib.QKey{qkey, qkey, 0x1234, 0x1234}
			}
			want := map[bool][]int{}
			wrs := make([]ib.SendWR, len(burst))
			for k, d := range burst {
				sge := a.slot(k, d.size)
				testutil.Fill(a.bytes(sge), k)
				wrs[k] = ib.SendWR{ID: uint64(k), SGE: sge, AH: toB, RemoteQPN: qb.Num(), RemoteQKey: qkey}
				if d.toC {
					wrs[k].AH, wrs[k].RemoteQPN = toC, qc.Num()
				}
				if len(qkeys) > 0 {
					wrs[k].RemoteQKey = qkeys[k]
				}
				if wrs[k].RemoteQKey == qkey {
					want[d.toC] = append(want[d.toC], k)
				}
			}
			for _, h := range []struct {
				h  *host
				q  ib.QP
				to bool
			}{{b, qb, false}, {c, qc, true}} {
				for k := range want[h.to] {
					if _, err := h.q.PostRecv([]ib.RecvWR{{ID: uint64(k), SGE: h.h.slot(k, 4096+ib.GRHLen)}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			before := CounterValue(a.dev.Counters(), "tx_sends")
			if n, err := qa.PostSend(wrs); err != nil || n != len(wrs) {
				t.Fatalf("PostSend: %d, %v", n, err)
			}
			for _, wc := range poll(t, a.scq, len(wrs), time.Second) {
				if wc.Status != ib.WCSuccess {
					t.Fatalf("send completion %+v", wc)
				}
			}
			if got := CounterValue(a.dev.Counters(), "tx_sends") - before; got != uint64(tc.sends) {
				t.Errorf("%d underlay sends, want %d", got, tc.sends)
			}
			for _, h := range []struct {
				h  *host
				cq ib.CQ
				to bool
			}{{b, b.rcq, false}, {c, c.rcq, true}} {
				wcs := poll(t, h.cq, len(want[h.to]), 2*time.Second)
				for n, wc := range wcs {
					k := want[h.to][n]
					if wc.Status != ib.WCSuccess || int(wc.ByteLen) != burst[k].size+ib.GRHLen {
						t.Fatalf("datagram %d: completion %+v", k, wc)
					}
					exp := make([]byte, burst[k].size)
					testutil.Fill(exp, k)
					got := h.h.bytes(h.h.slot(int(wc.ID), burst[k].size+ib.GRHLen))[ib.GRHLen:]
					if string(got) != string(exp) {
						t.Fatalf("datagram %d arrived as %d-th, corrupted or out of order", k, n)
					}
				}
			}
		})
	}
}
