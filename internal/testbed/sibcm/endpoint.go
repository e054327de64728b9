package main

import (
	"fmt"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
)

// endpoint is our RC queue pair with ucmatose's message pattern: count
// receives of size octets posted before the connection exists, count sends
// once it is established. Every completion must succeed and every message
// received must be exactly size octets.
type endpoint struct {
	dev         ib.Device
	count, size int
	slab        *ib.Slab
	mr          ib.MR
	scq, rcq    ib.CQ
	qp          ib.QP

	sending              bool
	sendsDone, recvsDone int
	err                  error
	wc                   [16]ib.Completion
}

// Work request IDs: receives are 0..count-1, sends count..2count-1, so a
// completion names its buffer.
func newEndpoint(dev ib.Device, count, size int) (*endpoint, error) {
	e := &endpoint{dev: dev, count: count, size: size}
	var err error
	if e.slab, err = ib.NewSlab(2 * max(count, 1) * size); err != nil {
		return nil, err
	}
	if e.mr, err = dev.RegisterMemory(e.slab); err != nil {
		e.close()
		return nil, err
	}
	if e.scq, err = dev.CreateCQ(max(count, 1)); err == nil {
		e.rcq, err = dev.CreateCQ(max(count, 1))
	}
	if err == nil {
		e.qp, err = dev.CreateQP(ib.QPAttr{Type: ib.RC, SendCQ: e.scq, RecvCQ: e.rcq, MaxSend: max(count, 1), MaxRecv: max(count, 1)})
	}
	if err != nil {
		e.close()
		return nil, err
	}
	// A pattern the peer could check: message i is filled with i+1.
	mem := e.slab.Bytes()
	for i := range count {
		b := mem[(count+i)*size : (count+i+1)*size]
		for j := range b {
			b[j] = byte(i + 1)
		}
	}
	return e, nil
}

// init moves the QP to Init and posts every receive.
func (e *endpoint) init() error {
	if err := e.qp.Modify(ib.QPModify{State: ib.StateInit, PKey: ib.DefaultPKey}); err != nil {
		return err
	}
	wrs := make([]ib.RecvWR, e.count)
	for i := range wrs {
		wrs[i] = ib.RecvWR{ID: uint64(i), SGE: ib.SGE{MR: e.mr, Offset: i * e.size, Length: e.size}}
	}
	if n, err := e.qp.PostRecv(wrs); err != nil || n != len(wrs) {
		return fmt.Errorf("post %d receives: %d posted, %v", len(wrs), n, err)
	}
	return nil
}

// connect brings the QP to RTS with what the CM agreed.
func (e *endpoint) connect(c *cm.Comm, mtu ib.MTU) error {
	steps := []ib.QPModify{
		{State: ib.StateRTR, DestGID: c.RemoteGID, DestQPN: c.RemoteQPN, PathMTU: min(c.PathMTU, mtu), RecvPSN: c.RecvPSN, MinRNRTmr: 1},
		{State: ib.StateRTS, SendPSN: c.SendPSN, Timeout: ackTimeout, RetryCount: 7, RNRRetry: c.RNRRetry},
	}
	for _, m := range steps {
		if err := e.qp.Modify(m); err != nil {
			return fmt.Errorf("QP %v to %v: %w", e.qp.Num(), m.State, err)
		}
	}
	return nil
}

func (e *endpoint) sendAll() error {
	e.sending = true
	wrs := make([]ib.SendWR, e.count)
	for i := range wrs {
		wrs[i] = ib.SendWR{ID: uint64(e.count + i), SGE: ib.SGE{MR: e.mr, Offset: (e.count + i) * e.size, Length: e.size}}
	}
	n, err := e.qp.PostSend(wrs)
	if err != nil || n != len(wrs) {
		return fmt.Errorf("%d of %d posted: %v", n, len(wrs), err)
	}
	return nil
}

// poll drains both CQs; the first bad completion is kept in err.
func (e *endpoint) poll() {
	for _, q := range []ib.CQ{e.scq, e.rcq} {
		for {
			n := q.Poll(e.wc[:])
			if n == 0 {
				break
			}
			for i := range e.wc[:n] {
				e.complete(&e.wc[i])
			}
		}
	}
}

func (e *endpoint) complete(wc *ib.Completion) {
	send := wc.ID >= uint64(e.count)
	switch {
	case wc.Status != ib.WCSuccess:
		if e.err == nil {
			e.err = fmt.Errorf("completion of %s %d: %v", map[bool]string{true: "send", false: "receive"}[send], wc.ID%uint64(max(e.count, 1)), wc.Status)
		}
	case send:
		e.sendsDone++
	case wc.ByteLen != uint32(e.size):
		if e.err == nil {
			e.err = fmt.Errorf("received a message of %d octets, want %d", wc.ByteLen, e.size)
		}
	default:
		e.recvsDone++
	}
}

func (e *endpoint) close() {
	if e.qp != nil {
		_ = e.qp.Close()
	}
	for _, q := range []ib.CQ{e.scq, e.rcq} {
		if q != nil {
			_ = q.Close()
		}
	}
	if e.mr != nil {
		_ = e.mr.Close()
	}
	if e.slab != nil {
		_ = e.slab.Close()
	}
}
