package ipoibcm

import (
	"testing"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/cm/cmtest"
	"github.com/ipoibd/ipoibd/ib"
)

// TestEveryCounterShown gives every field of ManagerStats and EngineStats
// (each element of the by-kind and by-reason arrays) a value of its own
// and looks for each value in the manager's Counters, under a name of its
// own: a field without a counter tag would be counted and never shown.
func TestEveryCounterShown(t *testing.T) {
	var e *cm.Engine
	m, err := NewManager(ManagerConfig{
		Local: ib.LinkAddr{QPN: 0x48},
		Service: func(ev func(cm.Event)) (cm.Service, error) {
			e = cm.NewEngine(cm.EngineConfig{Event: ev})
			return e, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cmtest.EveryCounterShown(t, m.Counters, &m.Stats, &e.Stats)
}
