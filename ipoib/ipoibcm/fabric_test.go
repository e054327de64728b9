package ipoibcm

import (
	"testing"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/cm/cmtest"
	"github.com/ipoibd/ipoibd/ib"
)

// The deterministic harness of package cm's engine tests (package
// cmtest), for managers: a fake clock and an in-memory lossy fabric. Nodes
// are attached by GID; their Send callbacks enqueue MADs, and the test
// decides what is delivered, dropped, duplicated or reordered. Run
// delivers pending MADs and calls Expire at the Next() deadlines,
// advancing the fake clock. No goroutines, no sleeps, no real time.
//
// The fabric drives *mgrNode (a Manager polling its engine) and a bare
// *cm.Engine alike.
type (
	fabric = cmtest.Fabric[cm.AttrID]
	wire   = cmtest.Wire[cm.AttrID]
)

var (
	gidN        = cmtest.GIDN
	newFabric   = cmtest.NewFabric[cm.AttrID]
	inject      = cmtest.Inject[cm.AttrID]
	onlyWire    = cmtest.OnlyWire[cm.AttrID]
	wantCounter = cmtest.WantCounter
)

// decode decodes a logged MAD, failing the test if it does not decode.
func decode[T any](tb testing.TB, w *wire) *T {
	tb.Helper()
	return cmtest.Decode[T](tb, w, cm.DecodeMAD)
}

// enginePeer is a bare Engine on the fabric whose consumer leaves REQs
// unanswered, keeping the last one for the test to answer by hand.
type enginePeer struct {
	e   *cm.Engine
	req *cm.Comm
}

func newEnginePeer(f *fabric, i int) *enginePeer {
	p := &enginePeer{}
	p.e = cm.NewEngine(cm.EngineConfig{
		GID: gidN(i), GUID: 0x0002c90300000000 | uint64(i), PKey: ib.DefaultPKey,
		ResponseTimeout: 16, MaxRetries: 3, Send: f.Sender(gidN(i)),
		Event: func(ev cm.Event) {
			if ev.Type == cm.EvRequest {
				p.req = ev.Comm
			}
		},
	})
	f.Add(gidN(i), p.e)
	return p
}
