package cm

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// Who a MAD is from on an InfiniBand subnet without GRHs (issue 22 item 1,
// issue 27 item 1): the peer checks and the setup-slot shares key on the
// source LID the fabric shows, never on what a REQ claims.

// fromLID is a GRH-less MAD address from lid, as verbs and softib's
// InfiniBand link layer report it.
func fromLID(lid uint16) ib.MADAddr {
	return ib.MADAddr{QPN: ib.QP1, PKey: addrPKey, Path: ib.Path{DLID: lid, SrcPathBits: 2}}
}

// TestEnginePeerBySourceLID: once an exchange exists, MADs that name it
// count only from the LID its peer's MADs came from; the same MADs from
// another LID (a third host that learnt the comm IDs) change nothing and
// are counted, and a REQ naming a live connection's QP from another LID
// does not make it stale.
func TestEnginePeerBySourceLID(t *testing.T) {
	other := fromLID(0x40)
	for _, tc := range []struct {
		name   string
		active bool
		from   ib.MADAddr
		msg    func(c *Comm) Message
		ends   bool // the connection ends (else it stays established)
		unk    AttrID
		stale  uint64
		foreig uint64
	}{
		{"passive: DREQ from the peer's LID", false, addrFrom, func(c *Comm) Message {
			return &DREQ{LocalCommID: 0x100, RemoteCommID: c.LocalCommID, RemoteQPN: 0x77}
		}, true, 0, 0, 0},
		{"passive: DREQ from another LID", false, other, func(c *Comm) Message {
			return &DREQ{LocalCommID: 0x100, RemoteCommID: c.LocalCommID, RemoteQPN: 0x77}
		}, false, AttrDREQ, 0, 0},
		{"passive: REJ from another LID", false, other, func(c *Comm) Message {
			return &REJ{LocalCommID: 0x100, RemoteCommID: c.LocalCommID, MessageRejected: MsgOther, Reason: RejConsumerReject}
		}, false, AttrREJ, 0, 0},
		{"passive: REQ naming the connection's QP from the peer's LID", false, addrFrom, func(*Comm) Message {
			return addrREQ(0x101, 0x42)
		}, true, 0, 1, 0},
		{"passive: REQ naming the connection's QP from another LID", false, other, func(*Comm) Message {
			return addrREQ(0x101, 0x42)
		}, false, 0, 0, 1},
		{"active: DREQ from the LID the REP came from", true, addrFrom, func(c *Comm) Message {
			return &DREQ{LocalCommID: 0x200, RemoteCommID: c.LocalCommID, RemoteQPN: 0x55}
		}, true, 0, 0, 0},
		{"active: DREQ from another LID", true, other, func(c *Comm) Message {
			return &DREQ{LocalCommID: 0x200, RemoteCommID: c.LocalCommID, RemoteQPN: 0x55}
		}, false, AttrDREQ, 0, 0},
		{"active: REP again from another LID", true, other, func(c *Comm) Message {
			return activeREP(c, 0x42)
		}, false, AttrREP, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAddrEngine(t, nil)
			var c *Comm
			if tc.active {
				c, _ = a.e.Connect(a.now, activeParams)
				a.feed(addrFrom, activeREP(c, 0x42), c.tid) // the peer answers from another of its LIDs
				if err := a.e.Ready(c); err != nil {
					t.Fatal(err)
				}
			} else {
				c = a.passiveEstablished()
			}
			a.feed(tc.from, tc.msg(c), 7)
			if ended := c.State != StateEstablished; ended != tc.ends {
				t.Errorf("state %v after the MAD, want ended %v", c.State, tc.ends)
			}
			if tc.unk != 0 && a.e.Stats.Unknown.Of(tc.unk) != 1 {
				t.Errorf("unknown %v: %d, want 1", tc.unk, a.e.Stats.Unknown.Of(tc.unk))
			}
			if a.e.Stats.Stale != tc.stale || a.e.Stats.StaleForeign != tc.foreig {
				t.Errorf("stale %d foreign %d, want %d %d", a.e.Stats.Stale, a.e.Stats.StaleForeign, tc.stale, tc.foreig)
			}
		})
	}
}

// TestEngineSetupSlotsBySource: REQs without a GRH share the setup slots
// by their source LID, whatever port GIDs and CA GUIDs they claim: a
// flood from one LID holds MaxHalfOpenPerSource slots, and a newcomer
// from another LID (or GID) still gets its connection during it.
func TestEngineSetupSlotsBySource(t *testing.T) {
	const per = DefaultMaxHalfOpenPerSource
	for _, tc := range []struct {
		name      string
		from      func(s int) ib.MADAddr // the source of flood REQ s
		sources   int
		reqs      int // per source
		wantBusy  uint64
		wantFull  uint64
		newcomer  ib.MADAddr
		wantLines int
	}{
		{"1000 REQs from one LID claiming 1000 GIDs", func(int) ib.MADAddr { return fromLID(0x30) }, 1, 1000,
			1000 - per, 0, fromLID(0x31), 1},
		{"17 REQs from each of 12 LIDs", func(s int) ib.MADAddr { return fromLID(uint16(0x30 + s)) }, 12, per + 1,
			12, 0, fromLID(0x50), 1},
		{"1000 REQs from one GID (RoCE framing)", func(int) ib.MADAddr {
			return ib.MADAddr{GID: gidN(77), QPN: ib.QP1, PKey: addrPKey}
		}, 1, 1000, 1000 - per, 0, ib.MADAddr{GID: gidN(78), QPN: ib.QP1, PKey: addrPKey}, 1},
		{"every slot taken by 300 LIDs: refused as full", func(s int) ib.MADAddr { return fromLID(uint16(0x100 + s)) }, 300, 1,
			0, 300 - 256, fromLID(0x31), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			a := newAddrEngine(t, func(c *EngineConfig) {
				c.Log = slog.New(slog.NewTextHandler(&logs, nil))
			})
			n := uint32(0x1000)
			for s := range tc.sources {
				for i := range tc.reqs {
					n++
					claim := gidN(int(n))
					r := testREQ(claim, uint64(n), n, ib.QPN(n))
					from := tc.from(s)
					if from.GID != (ib.GID{}) {
						r.Primary.LocalGID = from.GID // a RoCE flood must pass the GID check
					}
					a.feed(from, r, uint64(i))
					a.now = a.now.Add(time.Millisecond)
				}
			}
			if a.e.Stats.BusySource != tc.wantBusy || a.e.Stats.Full != tc.wantFull {
				t.Errorf("refused as busy source %d, as full %d; want %d, %d", a.e.Stats.BusySource, a.e.Stats.Full, tc.wantBusy, tc.wantFull)
			}
			cs := a.e.Counters()
			wantCounter(t, cs, "req_busy_source", tc.wantBusy)
			wantCounter(t, cs, "req_refused_full", tc.wantFull)
			if got := strings.Count(logs.String(), "refusing REQs from a source"); got != tc.wantLines {
				t.Errorf("%d log lines about flooding sources, want %d:\n%s", got, tc.wantLines, logs.String())
			}
			if tc.wantLines > 0 && !strings.Contains(logs.String(), "source=") {
				t.Errorf("the log line names no source: %s", logs.String())
			}
			// The newcomer's REQ is answered with a REP, unless every slot
			// is taken.
			claim := gidN(5)
			r := testREQ(claim, 0x0002c90300000005, 0x77, 0x99)
			if tc.newcomer.GID != (ib.GID{}) {
				r.Primary.LocalGID = tc.newcomer.GID
			}
			out := a.feed(tc.newcomer, r, 9)
			want := AttrREP
			if tc.wantFull > 0 {
				want = AttrREJ
			}
			if len(out) != 1 || out[0].attr != want {
				t.Errorf("the newcomer got %v, want one %v", out, want)
			}
		})
	}
}

// TestEngineFloodLogRateLimited: a flood that goes on draws one log line
// per floodLogEvery, each naming the source and what was refused.
func TestEngineFloodLogRateLimited(t *testing.T) {
	var logs bytes.Buffer
	a := newAddrEngine(t, func(c *EngineConfig) { c.Log = slog.New(slog.NewTextHandler(&logs, nil)) })
	for i := range 3000 {
		r := testREQ(gidN(i+10), uint64(i+10), uint32(i+1), ib.QPN(i+1))
		a.feed(fromLID(0x30), r, uint64(i))
		a.now = a.now.Add(10 * time.Millisecond) // 30 s in all
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines over 30 s, want 3:\n%s", len(lines), logs.String())
	}
	for _, l := range lines {
		if !strings.Contains(l, `source="LID 0x30"`) {
			t.Errorf("line does not name LID 0x30: %s", l)
		}
	}
	if !strings.Contains(lines[1], "refused_since_last_line=1000") {
		t.Errorf("second line: %s, want 1000 refused since the first", lines[1])
	}
}

// TestEngineSetLMC: the passive side's source path bits follow the port's
// LMC as the SM changes it (the low LMC bits of the REQ's remote LID).
func TestEngineSetLMC(t *testing.T) {
	a := newAddrEngine(t, func(c *EngineConfig) { c.LMC = 0 })
	for _, tc := range []struct {
		lmc      uint8
		wantBits uint8
	}{{0, 0}, {2, 1}, {7, 0x21}} {
		a.e.SetLMC(tc.lmc)
		r := addrREQ(0x100+uint32(tc.lmc), ib.QPN(0x42+uint32(tc.lmc)))
		out := a.feed(addrFrom, r, 1)
		if len(out) != 1 || out[0].attr != AttrREP || out[0].to.Path.SrcPathBits != tc.wantBits {
			t.Errorf("LMC %d: sent %v, want a REP from path bits %#x of remote LID %#x", tc.lmc, out, tc.wantBits, r.Primary.RemoteLID)
		}
	}
}
