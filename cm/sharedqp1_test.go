package cm

import (
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// edited decodes a golden MAD, lets edit change the message and marshals
// it again.
func edited[M Message](t *testing.T, golden []byte, edit func(M)) ib.MAD {
	t.Helper()
	_, msg, err := DecodeMAD(golden)
	if err != nil {
		t.Fatal(err)
	}
	edit(msg.(M))
	var m ib.MAD
	if err := msg.MarshalMAD(m.Data[:], 1); err != nil {
		t.Fatal(err)
	}
	return m
}

// SharedQP1 sends each MAD to the share it is for: REQs by their service
// ID, the rest by the tag in the receiver's comm ID; anything else to the
// first share, whose engine answers it as a lone engine would.
func TestSharedQP1Routes(t *testing.T) {
	const qpnA, qpnB = ib.QPN(0x000111), ib.QPN(0x000222)
	tr := &chanMADs{in: make(chan ib.MAD)}
	s := NewSharedQP1(tr)
	defer s.Close()
	a, err := s.Open(IPoIBServiceID(qpnA))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Open(IPoIBServiceID(qpnB))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(IPoIBServiceID(qpnB)); err == nil {
		t.Error("a second share for the same service ID was opened")
	}
	if a.Tag() == b.Tag() || a.Tag() == 0 || b.Tag() == 0 {
		t.Fatalf("tags %d and %d", a.Tag(), b.Tag())
	}
	toB := uint32(b.Tag())<<24 | 0x123456
	for _, tc := range []struct {
		name string
		mad  ib.MAD
		want *QP1Share
	}{
		{"REQ for B's service ID", edited(t, goldenREQ, func(m *REQ) { m.ServiceID = IPoIBServiceID(qpnB) }), b},
		{"REQ for A's service ID", edited(t, goldenREQ, func(m *REQ) { m.ServiceID = IPoIBServiceID(qpnA) }), a},
		{"REQ for no interface", edited(t, goldenREQ, func(m *REQ) { m.ServiceID = IPoIBServiceID(0x333) }), a},
		{"REQ for another service", edited(t, goldenREQ, func(m *REQ) { m.ServiceID = 0x0106000000000001 }), a},
		{"SIDR REQ for B", edited(t, goldenSIDRREQ, func(m *SIDRREQ) { m.ServiceID = IPoIBServiceID(qpnB) }), b},
		{"REP to B's comm ID", edited(t, goldenREP, func(m *REP) { m.RemoteCommID = toB }), b},
		{"RTU to B", edited(t, goldenRTU, func(m *RTU) { m.RemoteCommID = toB }), b},
		{"REJ to B", edited(t, goldenREJ, func(m *REJ) { m.RemoteCommID = toB }), b},
		{"MRA to B", edited(t, goldenMRA, func(m *MRA) { m.RemoteCommID = toB }), b},
		{"DREQ to B", edited(t, goldenDREQ, func(m *DREQ) { m.RemoteCommID = toB }), b},
		{"DREP to B", edited(t, goldenDREP, func(m *DREP) { m.RemoteCommID = toB }), b},
		{"DREQ to A", edited(t, goldenDREQ, func(m *DREQ) { m.RemoteCommID = uint32(a.Tag())<<24 | 7 }), a},
		{"DREQ to a tag nobody has", edited(t, goldenDREQ, func(m *DREQ) { m.RemoteCommID = 0xee000001 }), a},
		{"malformed", ib.MAD{}, a},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr.in <- tc.mad
			var got *QP1Share
			select {
			case <-a.Recv():
				got = a
			case <-b.Recv():
				got = b
			case <-time.After(5 * time.Second):
				t.Fatal("routed nowhere")
			}
			if got != tc.want {
				t.Errorf("went to tag %d, want tag %d", got.Tag(), tc.want.Tag())
			}
		})
	}
}

// A closed share gets nothing more and its tag is given out again only
// after every other; closing SharedQP1 closes the shares still open.
func TestSharedQP1Close(t *testing.T) {
	tr := &chanMADs{in: make(chan ib.MAD)}
	s := NewSharedQP1(tr)
	a, _ := s.Open(1)
	b, _ := s.Open(2)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, open := <-b.Recv(); open {
		t.Error("a closed share still receives")
	}
	_ = b.Close() // twice is harmless
	tr.in <- edited(t, goldenDREQ, func(m *DREQ) { m.RemoteCommID = uint32(b.Tag())<<24 | 1 })
	if _, ok := <-a.Recv(); !ok {
		t.Error("the DREQ for a closed share did not reach the first engine")
	}
	c, _ := s.Open(3)
	if c.Tag() == b.Tag() {
		t.Errorf("tag %d given out again at once", c.Tag())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []*QP1Share{a, c} {
		if _, open := <-sub.Recv(); open {
			t.Errorf("tag %d still open after SharedQP1 closed", sub.Tag())
		}
	}
	if _, err := s.Open(4); err == nil {
		t.Error("opened a share of a closed SharedQP1")
	}
}

// An engine with a tag chooses comm IDs carrying it, so that replies find
// it through SharedQP1.
func TestEngineCommIDTag(t *testing.T) {
	e := NewEngine(EngineConfig{GID: ib.GID{15: 1}, PKey: ib.DefaultPKey, CommIDTag: 0x5a, Send: func(ib.MADAddr, []byte) error { return nil }})
	for range 100 {
		if id := e.newCommID(); id>>24 != 0x5a {
			t.Fatalf("comm ID %#08x without the tag", id)
		}
	}
}

// EngineOnSharedQP1 gives each interface of a port its engine on its own
// share of QP1, choosing comm IDs with that share's tag, and refuses a
// second service for one UD QPN.
func TestEngineOnSharedQP1(t *testing.T) {
	s := NewSharedQP1(&chanMADs{in: make(chan ib.MAD)})
	defer s.Close()
	newService := EngineOnSharedQP1(s)
	params := func(qpn ib.QPN) ServiceParams {
		return ServiceParams{Port: ib.PortAttr{GID: ib.GID{15: 1}}, PKey: ib.DefaultPKey, UDQPN: qpn, Events: func(Event) {}}
	}
	var tags []uint32
	for _, qpn := range []ib.QPN{0x11, 0x22} {
		svc, err := newService(params(qpn))
		if err != nil {
			t.Fatal(err)
		}
		c, err := svc.Connect(time.Now(), ConnectParams{RemoteGID: ib.GID{15: 2}, ServiceID: IPoIBServiceID(0x33), LocalQPN: 9, PathMTU: ib.MTU2048})
		if err != nil {
			t.Fatal(err)
		}
		tags = append(tags, c.LocalCommID>>24)
	}
	if tags[0] == tags[1] || tags[0] == 0 || tags[1] == 0 {
		t.Errorf("comm ID tags %v: want two different, not 0", tags)
	}
	if _, err := newService(params(0x22)); err == nil {
		t.Error("a second service for UD QPN 0x22")
	}
}
