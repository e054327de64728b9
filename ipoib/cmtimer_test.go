package ipoib

import (
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
)

// deadlineService is a cm.Service with a settable next deadline that
// counts how often it is asked.
type deadlineService struct {
	next  time.Time
	asked int
}

func (s *deadlineService) Listen(uint64) error { return nil }
func (s *deadlineService) Connect(time.Time, cm.ConnectParams) (*cm.Comm, error) {
	return nil, cm.ErrTooMany
}
func (s *deadlineService) Accept(time.Time, *cm.Comm, cm.AcceptParams) error   { return nil }
func (s *deadlineService) Reject(*cm.Comm, cm.RejectReason, []byte) error      { return nil }
func (s *deadlineService) Ready(*cm.Comm) error                                { return nil }
func (s *deadlineService) RejectReply(*cm.Comm, cm.RejectReason, []byte) error { return nil }
func (s *deadlineService) Disconnect(time.Time, *cm.Comm)                      {}
func (s *deadlineService) Next() time.Time                                     { s.asked++; return s.next }
func (s *deadlineService) Expire(time.Time)                                    {}
func (s *deadlineService) Wake() <-chan struct{}                               { return nil }
func (s *deadlineService) Poll(time.Time)                                      {}
func (s *deadlineService) Counters() []ib.Counter                              { return nil }
func (s *deadlineService) Close() error                                        { return nil }

// The control loop's timer follows the service's Next, and asks for it at
// most once per cmRearm however many events arrive; a deadline that comes
// nearer in between is found at the end of that period.
func TestArmCM(t *testing.T) {
	svc := &deadlineService{}
	mgr, err := ipoibcm.NewManager(ipoibcm.ManagerConfig{Service: func(func(cm.Event)) (cm.Service, error) { return svc, nil }})
	if err != nil {
		t.Fatal(err)
	}
	c := &control{i: &Interface{mgr: mgr}}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var at time.Time

	far := time.Now().Add(time.Hour)
	svc.next = far
	c.armCM(timer, &at)
	if svc.asked != 1 || !at.Equal(far) {
		t.Fatalf("first arm: asked %d, timer at %v; want 1 and %v", svc.asked, at, far)
	}
	// A burst of events: no further pass over the connections.
	svc.next = time.Now() // a deadline due now appears
	for range 1000 {
		c.armCM(timer, &at)
	}
	if svc.asked != 1 {
		t.Errorf("a burst asked the service %d times, want once per %v", svc.asked, cmRearm)
	}
	if want := c.cmAsked.Add(cmRearm); !at.Equal(want) {
		t.Errorf("timer at %v, want the end of the period %v", at, want)
	}
	<-timer.C // the period ends: the loop expires and arms again
	at = time.Time{}
	c.armCM(timer, &at)
	if svc.asked != 2 || !at.Equal(svc.next) {
		t.Errorf("after the period: asked %d, timer at %v; want 2 and %v", svc.asked, at, svc.next)
	}
	// No deadline: the timer stops.
	svc.next = time.Time{}
	c.cmAsked = time.Time{}
	c.armCM(timer, &at)
	if !at.IsZero() || timer.Stop() {
		t.Errorf("no deadline: timer at %v (running), want stopped", at)
	}
}
