package softib

import (
	"runtime"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// BenchmarkRNRDryReceiver measures what an RNR NAK costs the sender
// (issue 38, item 4; docs/ipoib-cm.md §7.6): the receiver has no buffer
// posted when a 64 KiB message arrives, and posts one as soon as it has
// answered the first RNR NAK. stall-ms is the time from the send's post to
// its completion: delivered after the RNR wait, or failed with "RNR retry
// counter exceeded" (the point where ipoibd, like the kernel, makes the
// connection again). Rows: the receiver's RNR timer code (ipoibd 1, the
// kernel's ib_cm 0) and the sender's RNR retry count (7, for ever; 0).
//
//	go test -run '^$' -bench RNRDryReceiver -benchtime 5x ./softib/
func BenchmarkRNRDryReceiver(b *testing.B) {
	for i, tc := range []struct {
		name     string
		timer    uint8 // the receiver's min RNR timer code
		rnrRetry uint8 // the sender's RNR retry count
		want     ib.WCStatus
	}{
		{"posted-no-RNR", 1, 7, ib.WCSuccess}, // the baseline: a buffer is there
		{"timer1-retry7", 1, 7, ib.WCSuccess},
		{"timer0-retry7", 0, 7, ib.WCSuccess},
		{"timer1-retry0", 1, 0, ib.WCRNRRetryExceeded},
		{"timer0-retry0", 0, 0, ib.WCRNRRetryExceeded},
	} {
		b.Run(tc.name, func(b *testing.B) {
			port := testutil.Port(14890 + uint16(i))
			x := newHost(b, "127.0.0.1", port)
			y := newHost(b, "127.0.0.2", port)
			var stall time.Duration
			for range b.N {
				qa, qb := connectRNR(b, x, y, tc.timer, tc.rnrRetry)
				s := x.slot(0, 65536)
				recv := []ib.RecvWR{{ID: 2, SGE: y.slot(0, 65536)}}
				baseline := i == 0
				if baseline {
					if _, err := qb.PostRecv(recv); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				if _, err := qa.PostSend([]ib.SendWR{{ID: 1, SGE: s}}); err != nil {
					b.Fatal(err)
				}
				if !baseline {
					// The receiver answers the first RNR NAK, then posts.
					for CounterValue(qb.Counters(), "rnr_naks_sent") == 0 {
						runtime.Gosched()
					}
					if _, err := qb.PostRecv(recv); err != nil {
						b.Fatal(err)
					}
				}
				wc := waitOne(b, x.scq, 5*time.Second)
				stall += time.Since(start)
				if wc.Status != tc.want {
					b.Fatalf("send completed with %v, want %v", wc.Status, tc.want)
				}
				if tc.want == ib.WCSuccess {
					waitOne(b, y.rcq, 5*time.Second)
				}
				qa.Close()
				qb.Close()
				drainCQ(x.scq)
				drainCQ(y.rcq)
			}
			b.ReportMetric(float64(stall.Microseconds())/1000/float64(b.N), "stall-ms")
		})
	}
}

// connectRNR makes an RC pair whose b side answers RNR NAKs with timer
// code timer and whose a side retries them rnrRetry times.
func connectRNR(tb testing.TB, a, b *host, timer, rnrRetry uint8) (ib.QP, ib.QP) {
	tb.Helper()
	var qs [2]ib.QP
	for k, h := range []*host{a, b} {
		q, err := h.dev.CreateQP(ib.QPAttr{Type: ib.RC, SendCQ: h.scq, RecvCQ: h.rcq, MaxSend: 16, MaxRecv: 16})
		if err != nil {
			tb.Fatal(err)
		}
		if err := q.Modify(ib.QPModify{State: ib.StateInit, PKey: ib.DefaultPKey}); err != nil {
			tb.Fatal(err)
		}
		qs[k] = q
	}
	for k, s := range []struct {
		peer  *host
		timer uint8
	}{{b, 1}, {a, timer}} {
		q, pq := qs[k], qs[1-k]
		if err := q.Modify(ib.QPModify{State: ib.StateRTR, DestGID: s.peer.dev.Port().GID, DestQPN: pq.Num(), PathMTU: ib.MTU4096, RecvPSN: 0x100, MinRNRTmr: s.timer}); err != nil {
			tb.Fatal(err)
		}
		if err := q.Modify(ib.QPModify{State: ib.StateRTS, SendPSN: 0x100, Timeout: 14, RetryCount: 7, RNRRetry: rnrRetry}); err != nil {
			tb.Fatal(err)
		}
	}
	return qs[0], qs[1]
}

// waitOne waits for the next completion of c.
func waitOne(tb testing.TB, c ib.CQ, timeout time.Duration) ib.Completion {
	tb.Helper()
	var wc [1]ib.Completion
	deadline := time.After(timeout)
	for c.Poll(wc[:]) == 0 {
		select {
		case <-c.Ready():
		case <-deadline:
			tb.Fatalf("no completion within %v", timeout)
		}
	}
	return wc[0]
}

// drainCQ takes what c holds (a closed QP's flushes).
func drainCQ(c ib.CQ) {
	var wc [16]ib.Completion
	for c.Poll(wc[:]) > 0 {
	}
}
