package cmtest

import (
	"slices"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// Message is a CM message as package cm's Message writes it (every
// cm.Message is one, with A = cm.AttrID).
type Message[A Attr] interface {
	AttrID() A
	MarshalMAD(b []byte, tid uint64) error
}

// Inject hands msg to n as if the node at from had sent it, and returns
// what n sent in answer.
func Inject[A Attr](tb testing.TB, f *Fabric[A], n Node, from ib.GID, msg Message[A], tid uint64) []*Wire[A] {
	tb.Helper()
	var m ib.MAD
	if err := msg.MarshalMAD(m.Data[:], tid); err != nil {
		tb.Fatalf("%v: %v", msg.AttrID(), err)
	}
	m.From = ib.MADAddr{GID: from, QPN: ib.QP1, PKey: ib.DefaultPKey}
	nlog := len(f.Log)
	n.HandleMAD(f.Now, &m)
	return slices.Clone(f.Log[nlog:])
}

// OnlyWire returns the single MAD of kind attr in ws, failing otherwise.
func OnlyWire[A Attr](tb testing.TB, ws []*Wire[A], attr A) *Wire[A] {
	tb.Helper()
	var got []*Wire[A]
	for _, w := range ws {
		if w.Attr() == attr {
			got = append(got, w)
		}
	}
	if len(got) != 1 {
		tb.Fatalf("%d %v in %v, want one", len(got), attr, ws)
	}
	return got[0]
}

// Decode decodes a logged MAD with decode (cm.DecodeMAD) into a *T,
// failing the test if it does not decode or is another message:
//
//	rep := cmtest.Decode[cm.REP](t, w, cm.DecodeMAD)
func Decode[T any, A Attr, H, M any](tb testing.TB, w *Wire[A], decode func([]byte) (H, M, error)) *T {
	tb.Helper()
	_, m, err := decode(w.Data[:])
	if err != nil {
		tb.Fatalf("%v does not decode: %v", w, err)
	}
	v, ok := any(m).(*T)
	if !ok {
		tb.Fatalf("%v decodes to %T", w, m)
	}
	return v
}
