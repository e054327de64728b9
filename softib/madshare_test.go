package softib

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// madTally drains a MAD service's queue and counts its MADs by source.
func madTally(t *testing.T, mads ib.MADService, key func(ib.MADAddr) int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for {
		select {
		case m := <-mads.Recv():
			got[key(m.From)]++
		default:
			return got
		}
	}
}

// TestMADQueueSourceShareIB: on an InfiniBand port, QP1's queue to the CM
// gives each source, keyed by its LID, a fair share (package madqueue):
// a flood from one LID cannot fill it, another LID's MAD still goes in,
// the same LID with a GRH is the same source, and a drained queue starts
// every count again. Frames are handed to the port as its forwarder would.
func TestMADQueueSourceShareIB(t *testing.T) {
	type send struct {
		slid uint16
		grh  bool
		n    int
	}
	type step struct {
		send  []send
		drain bool           // read the queue empty first
		want  map[uint16]int // MADs queued by SLID after the step
		share uint64         // rx_drop_mad_source_share after the step
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{{
		name: "a flood from one LID, then another LID is still queued",
		steps: []step{
			{send: []send{{slid: 0x30, n: 300}}, want: map[uint16]int{0x30: 129}, share: 171},
			{send: []send{{slid: 0x31, n: 1}}, want: map[uint16]int{0x30: 129, 0x31: 1}, share: 171},
		},
	}, {
		name: "the same LID with a GRH is the same source",
		steps: []step{
			{send: []send{{slid: 0x30, n: 200}, {slid: 0x30, grh: true, n: 5}, {slid: 0x32, grh: true, n: 5}},
				want: map[uint16]int{0x30: 129, 0x32: 5}, share: 76},
		},
	}, {
		// Past half full, every source still has its own share.
		name: "many sources, then a flood",
		steps: []step{
			{send: func() []send {
				var s []send
				for lid := uint16(0x100); lid < 0x100+150; lid++ {
					s = append(s, send{slid: lid, n: 1})
				}
				return append(s, send{slid: 0x30, n: 100})
			}(), want: func() map[uint16]int {
				m := map[uint16]int{0x30: 64}
				for lid := uint16(0x100); lid < 0x100+150; lid++ {
					m[lid] = 1
				}
				return m
			}(), share: 36},
		},
	}, {
		name: "the queue empties and the shares start again",
		steps: []step{
			{send: []send{{slid: 0x30, n: 200}}, want: map[uint16]int{0x30: 129}, share: 71},
			{drain: true, send: []send{{slid: 0x31, n: 200}}, want: map[uint16]int{0x31: 129}, share: 142},
			// 0x30's count started again when the queue was seen empty.
			{send: []send{{slid: 0x30, n: 100}}, want: map[uint16]int{0x31: 129, 0x30: 64}, share: 178},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := openIBPort(t)
			mads, err := d.MADs()
			if err != nil {
				t.Fatal(err)
			}
			defer mads.Close()
			from := d.ibp.cfg.Forwarder
			for k, s := range tc.steps {
				if s.drain {
					madTally(t, mads, func(ib.MADAddr) int { return 0 })
				}
				for _, x := range s.send {
					fr := wire.IBFrame{LRH: wire.LRH{DLID: 0x20, SLID: x.slid}, HasGRH: x.grh,
						GRH:    wire.GRH{HopLmt: 1, SGID: ib.GID{0xfe, 0x80, 15: byte(x.slid)}, DGID: d.Port().GID},
						Packet: wire.Packet{BTH: wire.BTH{Opcode: wire.OpUDSendOnly, PKey: ib.DefaultPKey, DestQP: ib.QP1}, DETH: wire.DETH{QKey: ib.GSIQKey, SrcQP: ib.QP1}, Payload: make([]byte, madLen)}}
					b, err := wire.AppendIBFrame(nil, &fr)
					if err != nil {
						t.Fatal(err)
					}
					for range x.n {
						d.receive(b, from, d.fab.local, 0)
					}
					d.endBatch()
				}
				if s.want != nil {
					// Read the queue and put it back as it was, in order.
					var held []ib.MAD
					for len(mads.Recv()) > 0 {
						held = append(held, <-mads.Recv())
					}
					got := map[uint16]int{}
					for _, m := range held {
						got[m.From.Path.DLID]++
						d.mads.Current().Requeue(m)
					}
					if len(got) != len(s.want) {
						t.Errorf("step %d: queued from %d LIDs, want %d", k, len(got), len(s.want))
					}
					for lid, n := range s.want {
						if got[lid] != n {
							t.Errorf("step %d: %d MADs from LID %#x queued, want %d", k, got[lid], lid, n)
						}
					}
				}
				if n := CounterValue(d.Counters(), "rx_drop_mad_source_share"); n != s.share {
					t.Errorf("step %d: rx_drop_mad_source_share %d, want %d", k, n, s.share)
				}
				if n := CounterValue(d.Counters(), "rx_drop_no_recv_buffer"); n != 0 {
					t.Errorf("step %d: rx_drop_no_recv_buffer %d, want 0", k, n)
				}
			}
		})
	}
}

// TestMADQueueSourceShareRoCE: over RoCE framing the source is the
// sender's GID (its underlay address). One host's flood over the real
// underlay takes little more than half of QP1's queue; a second host's
// MAD after it is queued, and nothing is lost to a full queue.
func TestMADQueueSourceShareRoCE(t *testing.T) {
	port := testutil.Port(14871)
	victim := newHost(t, "127.0.0.1", port)
	flooder := newHost(t, "127.0.0.2", port)
	other := newHost(t, "127.0.0.3", port)
	mads, err := victim.dev.MADs()
	if err != nil {
		t.Fatal(err)
	}
	defer mads.Close()
	to := ib.MADAddr{GID: victim.dev.Port().GID, QPN: ib.QP1}
	send := func(h *host, n int) {
		ms, err := h.dev.MADs()
		if err != nil {
			t.Fatal(err)
		}
		defer ms.Close()
		for range n {
			if err := ms.Send(to, make([]byte, madLen)); err != nil {
				t.Fatal(err)
			}
		}
	}
	const flood = 400
	send(flooder, flood)
	waitCounters(t, victim.dev, flood, "rx_packets")
	send(other, 1)
	waitCounters(t, victim.dev, flood+1, "rx_packets")
	got := madTally(t, mads, func(a ib.MADAddr) int {
		switch a.GID {
		case flooder.dev.Port().GID:
			return 1
		case other.dev.Port().GID:
			return 2
		}
		return 0
	})
	if got[1] != madQueue/2+1 || got[2] != 1 || got[0] != 0 {
		t.Errorf("queued %d MADs of the flood's, %d of the other host's, %d of neither; want %d, 1, 0", got[1], got[2], got[0], madQueue/2+1)
	}
	for name, want := range map[string]uint64{"rx_drop_mad_source_share": flood - madQueue/2 - 1, "rx_drop_no_recv_buffer": 0} {
		if n := CounterValue(victim.dev.Counters(), name); n != want {
			t.Errorf("%s %d, want %d", name, n, want)
		}
	}
}
