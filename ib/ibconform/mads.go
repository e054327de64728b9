package ibconform

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

var madRules = []rule{{"QP1 carries MADs", qp1MADs}}

func timeAfter(d time.Duration) <-chan time.Time { return time.After(d) }

func qp1MADs(t *testing.T, a, b *end) {
	if a.cfg.noMADs != "" {
		t.Skip(a.cfg.noMADs)
	}
	ma, err := a.dev.MADs()
	if err != nil {
		t.Fatalf("%s: MADs: %v", a.dev.Name(), err)
	}
	defer ma.Close()
	mb, err := b.dev.MADs()
	if err != nil {
		t.Fatalf("%s: MADs: %v", b.dev.Name(), err)
	}
	defer mb.Close()
	mad := cmMAD()
	if err := ma.Send(ib.MADAddr{GID: b.gid(), QPN: ib.QP1, PKey: ib.DefaultPKey}, mad); err != nil {
		t.Fatalf("Send: %v", err)
	}
	select {
	case got := <-mb.Recv():
		if got.From.GID != a.gid() || got.From.QPN != ib.QP1 || got.From.PKey|0x8000 != ib.DefaultPKey || !sameMAD(got.Data[:], mad) {
			t.Errorf("MAD from %+v, want from %v QP1 with P_Key %v and the data sent", got.From, a.gid(), ib.DefaultPKey)
		}
	case <-timeAfter(a.cfg.timeout):
		t.Fatalf("no MAD in %v", a.cfg.timeout)
	}
	if _, ok := ma.(fmt.Stringer); !ok {
		t.Error("the MAD service does not name its transport (fmt.Stringer)")
	}
	mb.Close()
	select {
	case _, ok := <-mb.Recv():
		if ok {
			t.Error("a MAD came after Close")
		}
	case <-timeAfter(a.cfg.timeout):
		t.Errorf("Recv is not closed %v after Close", a.cfg.timeout)
	}
}

// cmMAD is a MAD a MAD layer passes to the CM class's agent: the common
// header of a CM Send (base version 1, class 0x07 version 2, method
// Send), then a payload the suite recognises. A kernel's MAD layer drops
// what does not parse as a MAD.
func cmMAD() []byte {
	m := make([]byte, 256)
	m[0], m[1], m[2], m[3] = 1, 0x07, 2, 0x03
	copy(m[8:16], []byte{0, 0, 0, 0, 0x1b, 0xc0, 0xf0, 0x4d}) // transaction ID
	m[16], m[17] = 0x00, 0x10                                 // attribute: ConnectRequest
	copy(m[24:], "ibconform QP1 rule")
	return m
}

// sameMAD compares a received MAD with the one sent, but for the upper
// half of the transaction ID, where a kernel's MAD layer puts the number
// of the agent that sent it.
func sameMAD(got, sent []byte) bool {
	return bytes.Equal(got[:8], sent[:8]) && bytes.Equal(got[12:], sent[12:])
}
