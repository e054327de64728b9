package ipoibcm

import (
	"slices"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
)

// TestManagerRNR (issue 38, item 4): our receiving QPs ask for the
// shortest RNR NAK timer, 0.01 ms; our sending QP retries RNR NAKs for
// ever towards an ipoibd peer (its QPs ask for 0.01 ms) and never towards
// a kernel peer (its QPs ask for 655.36 ms): there a dry receive queue
// fails the connection, which is made again at once, with no back-off.
func TestManagerRNR(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kernel    bool  // the peer is the kernel's ipoib (no mark in its REP)
		sendRetry uint8 // our sending QP's RNR retry count
	}{
		{name: "ipoibd peer", sendRetry: 7},
		{name: "kernel peer", kernel: true, sendRetry: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFabric(t)
			m := newMgrNode(f, 2, PolicyLinux, nil)
			var peer ib.LinkAddr
			if tc.kernel {
				peer = newLinuxPeer(f, 1).local
			} else {
				peer = newMgrNode(f, 1, PolicyLinux, nil).local
			}
			m.connect(peer)
			f.Run(time.Second)
			out := m.sendable()
			if len(out) != 1 || !out[0].Outgoing {
				t.Fatalf("sendable connections %v, want our one", out)
			}
			if out[0].comm.RNRRetry != 7 {
				t.Errorf("the REP granted RNR retry %d, want 7 (our REQ's, echoed)", out[0].comm.RNRRetry)
			}
			q := out[0].QP.(*fakeQP)
			if rtr, rts := q.mods[1], q.mods[2]; rtr.MinRNRTmr != 1 || rts.RNRRetry != tc.sendRetry {
				t.Errorf("our QP: RTR min RNR timer %d, RTS RNR retry %d; want 1 and %d", rtr.MinRNRTmr, rts.RNRRetry, tc.sendRetry)
			}

			// The peer's receive queue ran dry past our RNR retries.
			nreq := len(f.Sent(m.local.GID, cm.AttrREQ, true))
			m.m.SendFailed(f.Now, q.Num(), ib.WCRNRRetryExceeded)
			if len(m.refused) != 0 || !slices.Equal(m.downs, []string{"receiver not ready"}) {
				t.Errorf("refused %v downs %v: want the connection down, the peer not refused", m.refused, m.downs)
			}
			if got := len(f.Sent(m.local.GID, cm.AttrREQ, true)) - nreq; got != 1 {
				t.Errorf("%d REQs sent at once after the RNR failure, want 1", got)
			}
			f.Run(time.Second)
			if s := m.sendable(); len(s) != 1 || s[0].QP == out[0].QP || len(m.ups) != 2 {
				t.Errorf("after the RNR failure: sendable %v, ups %d; want a new connection up", s, len(m.ups))
			}
			if m.m.Stats.RNRFailovers != 1 || m.m.Stats.SendFails != 1 {
				t.Errorf("rnr_failovers %d send_failures %d, want 1 and 1", m.m.Stats.RNRFailovers, m.m.Stats.SendFails)
			}
		})
	}
}
