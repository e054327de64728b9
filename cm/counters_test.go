package cm

import (
	"testing"

	"github.com/ipoibd/ipoibd/cm/cmtest"
)

// TestEveryCounterShown gives every field of EngineStats (each element of
// the by-kind and by-reason arrays) a value of its own and looks for each
// value in the engine's Counters, under a name of its own: a field
// without a counter tag would be counted and never shown. (ipoibcm checks
// the same of its manager's, which shows the engine's after its own.)
func TestEveryCounterShown(t *testing.T) {
	e := NewEngine(EngineConfig{})
	cmtest.EveryCounterShown(t, e.Counters, &e.Stats)
}
