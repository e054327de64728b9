package softib

import (
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// Sends posted together leave in as few GSO trains as the rule "one
// length, but for a shorter last" allows, across message boundaries, and
// every message still arrives whole and in order.
func TestRCTrains(t *testing.T) {
	a := newHost(t, "127.0.0.1", testutil.Port(14861))
	b := newHost(t, "127.0.0.2", testutil.Port(14861))
	qa, qb := connect(t, ib.RC, a, b, 7, 7)
	repeat := func(n, size int) []int {
		out := make([]int, n)
		for k := range out {
			out[k] = size
		}
		return out
	}
	tests := []struct {
		name  string
		sizes []int
		sends int
	}{
		{"equal small messages, one train", repeat(40, 1504), 1},
		{"a shorter one ends the train", []int{1504, 1504, 1000, 1504, 1504}, 2},
		{"a longer one starts a new train", []int{1000, 1000, 1504}, 2},
		{"full packets of two messages, one train", []int{8192, 8192}, 1},
		{"a message's short last packet ends the train", []int{5000, 4096}, 2},
		{"64 KiB messages, 15 packets a train", []int{65536, 65536}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k := range tc.sizes {
				if _, err := qb.PostRecv([]ib.RecvWR{{ID: uint64(k), SGE: b.slot(k, 65536)}}); err != nil {
					t.Fatal(err)
				}
			}
			wrs := make([]ib.SendWR, len(tc.sizes))
			for k, size := range tc.sizes {
				wrs[k] = ib.SendWR{ID: uint64(k), SGE: a.slot(k, size)}
				testutil.Fill(a.bytes(wrs[k].SGE), k+size)
			}
			before := CounterValue(a.dev.Counters(), "tx_sends")
			if n, err := qa.PostSend(wrs); err != nil || n != len(wrs) {
				t.Fatalf("PostSend: %d, %v", n, err)
			}
			for _, wc := range poll(t, a.scq, len(wrs), 5*time.Second) {
				if wc.Status != ib.WCSuccess {
					t.Fatalf("send completion %+v", wc)
				}
			}
			if got := CounterValue(a.dev.Counters(), "tx_sends") - before; got != uint64(tc.sends) {
				t.Errorf("%d underlay sends, want %d", got, tc.sends)
			}
			for n, wc := range poll(t, b.rcq, len(wrs), 5*time.Second) {
				size := tc.sizes[n]
				if wc.Status != ib.WCSuccess || wc.ID != uint64(n) || int(wc.ByteLen) != size {
					t.Fatalf("message %d: completion %+v", n, wc)
				}
				want := make([]byte, size)
				testutil.Fill(want, n+size)
				if got := b.bytes(b.slot(n, size)); string(got) != string(want) {
					t.Fatalf("message %d corrupted", n)
				}
			}
		})
	}
}
