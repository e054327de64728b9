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
	mad := make([]byte, 256)
	copy(mad, "CM REQ")
	if err := ma.Send(ib.MADAddr{GID: b.gid(), QPN: ib.QP1, PKey: ib.DefaultPKey}, mad); err != nil {
		t.Fatalf("Send: %v", err)
	}
	select {
	case got := <-mb.Recv():
		if got.From.GID != a.gid() || got.From.QPN != ib.QP1 || got.From.PKey|0x8000 != ib.DefaultPKey || !bytes.Equal(got.Data[:], mad) {
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
