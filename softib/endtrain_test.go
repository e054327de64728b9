package softib

import "testing"

// endTrain runs the CQ handlers of the batch so far only when a receive
// queue ran low (they post buffers again before the next train lands),
// once, and leaves the batch's signals to endBatch.
func TestEndTrainRunsHandlersWhenLow(t *testing.T) {
	for _, tc := range []struct {
		low  bool
		runs int
	}{{false, 0}, {true, 1}} {
		d := &Device{}
		c := newCQ(d, 4)
		runs := 0
		c.SetHandler(func() { runs++ })
		d.touched = []*cq{c}
		d.recvLow.Store(tc.low)
		d.endTrain()
		d.endTrain()
		if runs != tc.runs {
			t.Errorf("low %v: the handler ran %d times over two trains, want %d", tc.low, runs, tc.runs)
		}
		if d.recvLow.Load() {
			t.Errorf("low %v: still low after endTrain", tc.low)
		}
		if len(d.touched) != 1 {
			t.Errorf("low %v: endTrain changed the batch's CQs (%d)", tc.low, len(d.touched))
		}
	}
}
