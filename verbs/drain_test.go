package verbs

import (
	"testing"
	"time"
)

func TestAwaitsLastWQE(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		onSRQ, leftReset, devClosed bool
		want                        bool
	}{
		{"connected QP on the SRQ", true, true, false, true},
		{"QP on the SRQ never left RESET", true, false, false, false},
		{"QP with its own receive queue", false, true, false, false},
		{"the device is closing", true, true, true, false},
	} {
		if got := awaitsLastWQE(tc.onSRQ, tc.leftReset, tc.devClosed); got != tc.want {
			t.Errorf("%s: awaitsLastWQE = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestWaitLastWQE(t *testing.T) {
	for _, tc := range []struct {
		name  string
		event func(ch chan struct{}) // how the event arrives, if it does
		want  bool
	}{
		{"event before the wait", func(ch chan struct{}) { close(ch) }, true},
		{"event during the wait", func(ch chan struct{}) { go close(ch) }, true},
		{"no event", func(chan struct{}) {}, false},
	} {
		ch := make(chan struct{})
		tc.event(ch)
		timeout := 50 * time.Millisecond
		if tc.want {
			timeout = 1000 * lastWQETimeout // an event must end the wait, not the timer
		}
		if got := waitLastWQE(ch, timeout); got != tc.want {
			t.Errorf("%s: waitLastWQE = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// inflight.wait returns only once every add has its done, whether they
// come before or while it waits.
func TestInflight(t *testing.T) {
	var f inflight
	f.wait() // nothing in flight: at once
	f.add()
	f.add()
	release := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		<-release
		f.done()
		f.add() // a new one while the waiter waits
		f.done()
		f.done()
		close(finished)
	}()
	waited := make(chan struct{})
	go func() { f.wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("wait returned with two in flight")
	default:
	}
	close(release)
	<-finished
	<-waited
	if n := f.pending(); n != 0 {
		t.Errorf("pending = %d after every done", n)
	}
}
