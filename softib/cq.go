package softib

import (
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibqueue"
)

// cq is a completion queue (package ibqueue's ring), filled by the device
// (receive goroutine, posting goroutines, timers) and drained by its
// consumer. A type of its own, so that a QP refuses another provider's.
type cq struct{ *ibqueue.CQ }

var _ ib.CQHandler = (*cq)(nil)

func newCQ(dev *Device, size int) *cq {
	return &cq{ibqueue.NewCQ(size, &dev.ctr.drops[dropCQOverrun])}
}

// srq is a shared receive queue: package ibqueue's receive ring, taking
// the buffer posted last first (see ibqueue.NewRecvQueue).
type srq struct{ *ibqueue.RecvQueue }
