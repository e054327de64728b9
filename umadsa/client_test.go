package umadsa

import (
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/sa"
)

type reply struct {
	mad    []byte
	status int
}

// fakeSA answers each Send with what answer returns for that send (the
// try number counts from 0); Recv hands the replies out in order and
// reports a timeout at once when there are none.
type fakeSA struct {
	answer func(req []byte, try int) []reply
	sent   [][]byte
	lids   []uint16
	queue  []reply
}

func (f *fakeSA) Send(mad []byte, lid uint16, _ time.Duration) error {
	// ib_umad refuses a send whose TID an earlier one still holds (its
	// is_duplicate): here every earlier send is still outstanding.
	for _, s := range f.sent {
		if string(s[8:16]) == string(mad[8:16]) {
			return syscall.EINVAL
		}
	}
	f.queue = append(f.queue, f.answer(append([]byte(nil), mad...), len(f.sent))...)
	f.sent = append(f.sent, append([]byte(nil), mad...))
	f.lids = append(f.lids, lid)
	return nil
}

func (f *fakeSA) Recv(buf []byte, _ time.Duration) (int, int, error) {
	if len(f.queue) == 0 {
		return 0, 0, ErrRecvTimeout
	}
	r := f.queue[0]
	f.queue = f.queue[1:]
	return copy(buf, r.mad), r.status, nil
}

// answerTo makes the SA's answer to req: the response method, status st,
// the TID's high 32 bits set as the kernel sets them, rec as the record.
func answerTo(t *testing.T, req []byte, st sa.Status, rec sa.Record) []byte {
	h, _, err := sa.DecodeMAD(req)
	if err != nil {
		t.Fatal(err)
	}
	h.Method = h.Method.Response()
	h.Status = st
	h.TransactionID |= 0xabcd0000_00000000
	h.AttributeOffset = uint16(rec.Len() / 8)
	out := make([]byte, sa.MADLen)
	if err := h.Encode(out); err != nil {
		t.Fatal(err)
	}
	if err := rec.Encode(out[sa.HeaderLen:]); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	us     = gid("fe80::10:1")
	peer   = gid("fe80::10:3")
	bcast  = gid("ff12:401b:ffff::ffff:ffff")
	v4grp  = gid("ff12:401b:ffff::1")
	answer = sa.PathRecord{DGID: peer, SGID: us, DLID: 3, SLID: 1, Reversible: true, NumbPath: 1, PKey: 0xffff,
		MTU: sa.Selected{Selector: sa.Exactly, Value: 3}, Rate: sa.Selected{Selector: sa.Exactly, Value: 3},
		Lifetime: sa.Selected{Selector: sa.Exactly, Value: 18}}
)

var gid = testutil.MustGID

func newClient(f *fakeSA, smlid uint16) *Client {
	return New(f, Config{PortGID: us, SMLID: func() (uint16, error) { return smlid, nil }, Timeout: time.Millisecond, Retries: 2})
}

func TestPathRecordRetries(t *testing.T) {
	var first []byte // the first try's request, for the late answer
	stale := func(t *testing.T, req []byte) []byte {
		b := answerTo(t, req, 0, &answer)
		b[15]++ // another request's TID
		return b
	}
	tests := []struct {
		name    string
		answer  func(t *testing.T, req []byte, try int) []reply
		tries   int
		err     string // substring; "" for success
		stale   uint64
		timeout bool
	}{
		{"first try", func(t *testing.T, req []byte, _ int) []reply {
			return []reply{{mad: answerTo(t, req, 0, &answer)}}
		}, 1, "", 0, false},
		{"silent once", func(t *testing.T, req []byte, try int) []reply {
			if try == 0 {
				return nil
			}
			return []reply{{mad: answerTo(t, req, 0, &answer)}}
		}, 2, "", 0, false},
		{"MAD layer timeout, then an answer", func(t *testing.T, req []byte, try int) []reply {
			if try == 0 {
				return []reply{{mad: req, status: 110}}
			}
			return []reply{{mad: answerTo(t, req, 0, &answer)}}
		}, 2, "", 0, false},
		{"stale answer skipped", func(t *testing.T, req []byte, _ int) []reply {
			return []reply{{mad: stale(t, req)}, {mad: answerTo(t, req, 0, &answer)}}
		}, 1, "", 1, false},
		{"our own request echoed is not an answer", func(t *testing.T, req []byte, _ int) []reply {
			return []reply{{mad: req}, {mad: answerTo(t, req, 0, &answer)}}
		}, 1, "", 1, false},
		{"never", func(*testing.T, []byte, int) []reply { return nil }, 3,
			"SA Get PathRecord to SM LID 1: no answer after 3 tries of 1ms each: is the subnet manager running?", 0, true},
		{"no records", func(t *testing.T, req []byte, _ int) []reply {
			return []reply{{mad: answerTo(t, req, sa.StatusNoRecords, &answer)}}
		}, 1, "SA Get PathRecord: status 0x0300 ERR_NO_RECORDS", 0, false},
		{"busy then fine", func(t *testing.T, req []byte, try int) []reply {
			if try == 0 {
				return []reply{{mad: answerTo(t, req, sa.StatusBusy, &answer)}}
			}
			return []reply{{mad: answerTo(t, req, 0, &answer)}}
		}, 2, "", 0, false},
		{"busy always", func(t *testing.T, req []byte, _ int) []reply {
			return []reply{{mad: answerTo(t, req, sa.StatusBusy, &answer)}}
		}, 3, "status 0x0001 busy", 0, false},
		{"a late answer to the first try, during the second", func(t *testing.T, req []byte, try int) []reply {
			if try == 0 {
				first = req
				return nil
			}
			return []reply{{mad: answerTo(t, first, 0, &answer)}}
		}, 2, "", 0, false},
		{"answer for another GID", func(t *testing.T, req []byte, _ int) []reply {
			other := answer
			other.DGID = us
			return []reply{{mad: answerTo(t, req, 0, &other)}}
		}, 1, "answered for fe80::10:1", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeSA{}
			f.answer = func(req []byte, try int) []reply { return tt.answer(t, req, try) }
			c := newClient(f, 1)
			p, err := c.PathRecord(peer, 0xffff)
			if tt.err == "" && (err != nil || p != answer) {
				t.Fatalf("got %+v, %v", p, err)
			}
			if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("error %v, want %q", err, tt.err)
			}
			var te *TimeoutError
			if errors.As(err, &te) != tt.timeout {
				t.Errorf("TimeoutError %v, want %v", err, tt.timeout)
			}
			if len(f.sent) != tt.tries {
				t.Errorf("%d tries, want %d", len(f.sent), tt.tries)
			}
			// A retry is the first try with a TID of its own.
			for i, s := range f.sent {
				same := string(s[:8]) == string(f.sent[0][:8]) && string(s[16:]) == string(f.sent[0][16:])
				if !same || (i > 0 && string(s[8:16]) == string(f.sent[i-1][8:16])) || f.lids[i] != 1 {
					t.Errorf("try %d: not the first with a new TID, or went to LID %d", i, f.lids[i])
				}
			}
			if got := c.C.Stale.Load(); got != tt.stale {
				t.Errorf("%d stale, want %d", got, tt.stale)
			}
			if got := c.C.Retries.Load(); got != uint64(tt.tries-1) {
				t.Errorf("%d retries counted, want %d", got, tt.tries-1)
			}
		})
	}
}

// What goes on the wire: the kernel's components for each request.
func TestRequests(t *testing.T) {
	params := &sa.GroupParams{QKey: 0x0b1b, MTU: sa.Selected{Selector: sa.Exactly, Value: 4}, Rate: sa.Selected{Selector: sa.Exactly, Value: 3}, HopLimit: 1}
	tests := []struct {
		name string
		call func(c *Client) error
		hdr  sa.Header
		rec  sa.Record
	}{
		{"path", func(c *Client) error { _, err := c.PathRecord(peer, 0xffff); return err },
			sa.Header{Method: sa.MethodGet, AttributeID: sa.AttrPathRecord, ComponentMask: 0x380c},
			&sa.PathRecord{DGID: peer, SGID: us, Reversible: true, NumbPath: 1, PKey: 0xffff}},
		{"join", func(c *Client) error { _, err := c.Join(sa.JoinRequest{MGID: bcast, PKey: 0xffff}); return err },
			sa.Header{Method: sa.MethodSet, AttributeID: sa.AttrMCMemberRecord, ComponentMask: 0x10083},
			&sa.MCMemberRecord{MGID: bcast, PortGID: us, PKey: 0xffff, JoinState: sa.FullMember}},
		{"join and create", func(c *Client) error {
			_, err := c.Join(sa.JoinRequest{MGID: v4grp, PKey: 0xffff, Create: params})
			return err
		},
			sa.Header{Method: sa.MethodSet, AttributeID: sa.AttrMCMemberRecord, ComponentMask: 0x173f7},
			&sa.MCMemberRecord{MGID: v4grp, PortGID: us, QKey: 0x0b1b, MTU: params.MTU, Rate: params.Rate, HopLimit: 1,
				PKey: 0xffff, JoinState: sa.FullMember}},
		{"send-only join", func(c *Client) error {
			_, err := c.Join(sa.JoinRequest{MGID: v4grp, PKey: 0xffff, State: sa.SendOnlyFullMember})
			return err
		},
			sa.Header{Method: sa.MethodSet, AttributeID: sa.AttrMCMemberRecord, ComponentMask: 0x10083},
			&sa.MCMemberRecord{MGID: v4grp, PortGID: us, PKey: 0xffff, JoinState: sa.SendOnlyFullMember}},
		{"leave", func(c *Client) error { return c.Leave(v4grp, 0xffff, 0) },
			sa.Header{Method: sa.MethodDelete, AttributeID: sa.AttrMCMemberRecord, ComponentMask: 0x10003},
			&sa.MCMemberRecord{MGID: v4grp, PortGID: us, PKey: 0xffff, JoinState: sa.FullMember}},
	}
	for _, tt := range tests {
		f := &fakeSA{}
		f.answer = func(req []byte, _ int) []reply {
			h, data, _ := sa.DecodeMAD(req)
			var rec sa.Record
			if h.AttributeID == sa.AttrPathRecord {
				p, _ := sa.DecodePathRecord(data)
				rec = &p
			} else {
				m, _ := sa.DecodeMCMemberRecord(data)
				rec = &m
			}
			return []reply{{mad: answerTo(t, req, 0, rec)}}
		}
		if err := tt.call(newClient(f, 7)); err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		h, data, err := sa.DecodeMAD(f.sent[0])
		if err != nil {
			t.Fatal(err)
		}
		if h.Method != tt.hdr.Method || h.AttributeID != tt.hdr.AttributeID || h.ComponentMask != tt.hdr.ComponentMask ||
			h.TransactionID>>32 != 0 || h.RMPP.Version != 1 || f.lids[0] != 7 {
			t.Errorf("%s: sent header %+v to LID %d", tt.name, h, f.lids[0])
		}
		var want [sa.DataLen]byte
		if err := tt.rec.Encode(want[:]); err != nil {
			t.Fatal(err)
		}
		if string(data) != string(want[:]) {
			t.Errorf("%s: sent record\n% x\nwant\n% x", tt.name, data[:tt.rec.Len()], want[:tt.rec.Len()])
		}
	}
}

func TestJoinAnswer(t *testing.T) {
	group := sa.MCMemberRecord{MGID: bcast, PortGID: us, QKey: 0x0b1b, MLID: 0xc000, MTU: sa.Selected{Selector: sa.Exactly, Value: 4},
		PKey: 0xffff, Rate: sa.Selected{Selector: sa.Exactly, Value: 3}, Scope: 2, JoinState: sa.FullMember}
	f := &fakeSA{answer: func(req []byte, _ int) []reply { return []reply{{mad: answerTo(t, req, 0, &group)}} }}
	c := newClient(f, 1)
	g, err := c.Join(sa.JoinRequest{MGID: bcast, PKey: 0xffff})
	if err != nil || g != group {
		t.Fatalf("join: %+v, %v", g, err)
	}
	p := sa.ParamsOf(g)
	if *p != (sa.GroupParams{QKey: 0x0b1b, MTU: sa.Selected{Selector: sa.Exactly, Value: 4}, Rate: sa.Selected{Selector: sa.Exactly, Value: 3}}) {
		t.Errorf("ParamsOf: %+v", p)
	}
	// A refused join is one error naming the status.
	f.answer = func(req []byte, _ int) []reply { return []reply{{mad: answerTo(t, req, sa.StatusReqInvalid, &group)}} }
	_, err = c.Join(sa.JoinRequest{MGID: bcast, PKey: 0xffff, Create: &sa.GroupParams{QKey: 0x1234}})
	var se *sa.StatusError
	if !errors.As(err, &se) || se.Status != sa.StatusReqInvalid || !strings.HasPrefix(err.Error(), "SA Set MCMemberRecord: status 0x0200 ERR_REQ_INVALID") {
		t.Errorf("refused join: %v", err)
	}
	if c.C.StatusErrors.Load() != 1 || c.C.Requests.Load() != 2 {
		t.Errorf("counters: %d status errors, %d requests", c.C.StatusErrors.Load(), c.C.Requests.Load())
	}
}

func TestNoSM(t *testing.T) {
	f := &fakeSA{answer: func([]byte, int) []reply { return nil }}
	if _, err := newClient(f, 0).PathRecord(peer, 0xffff); !errors.Is(err, ErrNoSM) || len(f.sent) != 0 {
		t.Errorf("SM LID 0: %v after %d sends", err, len(f.sent))
	}
	c := New(f, Config{SMLID: func() (uint16, error) { return 0, errors.New("port gone") }})
	if err := c.Leave(v4grp, 0xffff, 0); err == nil || err.Error() != "port gone" {
		t.Errorf("SMLID error: %v", err)
	}
}

// TestFollowSM: requests go to the SM LID the port read at start until
// FollowSM names another source; then each request asks it again, so a
// move of the SM is followed at the next request.
func TestFollowSM(t *testing.T) {
	f := &fakeSA{answer: func(req []byte, _ int) []reply {
		return []reply{{mad: answerTo(t, req, 0, &answer)}}
	}}
	c := newClient(f, 1)
	sm := uint16(4)
	for i, step := range []struct {
		follow bool
		sm     uint16 // the port's SM LID from the events, once followed
		want   uint16
	}{
		{want: 1},
		{follow: true, sm: 4, want: 4},
		{sm: 6, want: 6}, // the SM moved: the next request goes there
		{sm: 6, want: 6},
	} {
		if step.follow {
			c.FollowSM(func() (uint16, error) { return sm, nil })
		}
		sm = step.sm
		if _, err := c.PathRecord(peer, 0xffff); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := f.lids[len(f.lids)-1]; got != step.want {
			t.Fatalf("request %d went to LID %d, want %d", i, got, step.want)
		}
	}
}

// silentSA never answers: each Recv waits its whole timeout. It records
// whether it was used while or after it was closed.
type silentSA struct {
	sent     chan struct{}
	inRecv   atomic.Int32
	closed   atomic.Bool
	misused  atomic.Bool
	closings atomic.Int32
}

func (f *silentSA) Send([]byte, uint16, time.Duration) error {
	f.misused.CompareAndSwap(false, f.closed.Load())
	select {
	case f.sent <- struct{}{}:
	default:
	}
	return nil
}

func (f *silentSA) Recv(_ []byte, d time.Duration) (int, int, error) {
	f.inRecv.Add(1)
	defer f.inRecv.Add(-1)
	f.misused.CompareAndSwap(false, f.closed.Load())
	<-time.After(d)
	return 0, 0, ErrRecvTimeout
}

func (f *silentSA) Close() error {
	f.misused.CompareAndSwap(false, f.inRecv.Load() != 0)
	f.closed.Store(true)
	f.closings.Add(1)
	return nil
}

// TestCloseUnderRequest: Close ends a request that waits for an answer
// and closes the transport only after the request let go of it (a umad
// handle freed under umad_recv is memory written after free); later
// requests fail at once without sending.
func TestCloseUnderRequest(t *testing.T) {
	f := &silentSA{sent: make(chan struct{}, 1)}
	c := New(f, Config{PortGID: us, SMLID: func() (uint16, error) { return 1, nil }, Timeout: time.Hour, Retries: 1})
	errc := make(chan error, 1)
	go func() {
		_, err := c.PathRecord(peer, 0xffff)
		errc <- err
	}()
	<-f.sent
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("the request under way ended with %v, want ErrClosed", err)
	}
	if _, err := c.PathRecord(peer, 0xffff); !errors.Is(err, ErrClosed) {
		t.Fatalf("a request after Close: %v, want ErrClosed", err)
	}
	if f.misused.Load() || f.closings.Load() != 1 {
		t.Fatalf("transport used while or after closing: %v, closed %d times", f.misused.Load(), f.closings.Load())
	}
}
