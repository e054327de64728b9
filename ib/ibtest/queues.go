package ibtest

import (
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibqueue"
)

// cq is a completion queue (package ibqueue's ring, as softib's), filled
// by the device and drained by its consumer. A type of its own, so that a
// QP refuses another provider's.
type cq struct{ *ibqueue.CQ }

func newCQ(d *Device, size int) *cq { return &cq{ibqueue.NewCQ(size, &d.ctr[ibqueue.DropCQOverrun])} }

// srq is a shared receive queue: package ibqueue's receive ring, in
// posting order. Posting to it retries the RC messages that stalled for
// want of a buffer.
type srq struct {
	*ibqueue.RecvQueue
	dev *Device
}

func (s *srq) PostRecv(wrs []ib.RecvWR) (int, error) {
	n, err := s.RecvQueue.PostRecv(wrs)
	if n > 0 {
		s.dev.kick()
	}
	return n, err
}
