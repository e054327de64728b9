package ibtest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibqueue"
)

// Device is one port on a Fabric. It implements ib.Device,
// ib.CQHandlerMaker and ib.QPCounterNamer.
type Device struct {
	fab  *Fabric
	name string
	port ib.PortAttr
	// maxWR caps the send queue depth granted (Config.MaxQPWR; 0: none).
	maxWR int

	mu      sync.Mutex
	qps     map[ib.QPN]*qp
	groups  map[ib.GID][]*qp // multicast group -> attached UD QPs
	mads    ibqueue.MADs     // QP1's receive side
	stalled []*qp            // RC QPs holding messages that found no receive buffer

	// The inbox is filled by senders and drained by run.
	inMu   sync.Mutex
	inbox  []*packet
	kicked bool // receives were posted: retry the stalled messages
	wake   chan struct{}
	closed atomic.Bool
	done   chan struct{}

	touched []*cq           // CQs run filled in this batch (run only)
	settled []chan struct{} // Settle calls answered at the end of this batch (run only)
	ctr     [numTrafficEnd]atomic.Uint64
}

// A Device has two of the optional capabilities (ib.Caps): its CQs take
// a handler, and it names its QPs' counters. It sees no subnet events and
// no port state.
var (
	_ ib.Device         = (*Device)(nil)
	_ ib.CQHandlerMaker = (*Device)(nil)
	_ ib.QPCounterNamer = (*Device)(nil)
	_ ib.CQHandler      = (*cq)(nil)
)

// CQHandlers reports that every CQ the device makes implements
// ib.CQHandler: the delivery goroutine runs its consumer.
func (d *Device) CQHandlers() bool { return true }

// Counters: the traffic first, then a drop counter per cause, the causes
// and names package ibqueue gives softib too, so that tests read the same
// names on both.
type devCounter = ibqueue.Drop

// The traffic counters, after the drops.
const (
	rxMessages devCounter = ibqueue.NumDrops + iota
	rxBytes
	txMessages
	txBytes
	numTrafficEnd
)

var trafficNames = [...]string{
	rxMessages - ibqueue.NumDrops: "rx_packets",
	rxBytes - ibqueue.NumDrops:    "rx_bytes",
	txMessages - ibqueue.NumDrops: "tx_packets",
	txBytes - ibqueue.NumDrops:    "tx_bytes",
}

func (d *Device) count(c devCounter) { d.ctr[c].Add(1) }

// Counters returns the device-wide counters.
func (d *Device) Counters() []ib.Counter {
	out := make([]ib.Counter, 0, numTrafficEnd)
	for c := ibqueue.NumDrops; c < numTrafficEnd; c++ {
		out = append(out, ib.Counter{Name: trafficNames[c-ibqueue.NumDrops], Value: d.ctr[c].Load()})
	}
	for c := range ibqueue.NumDrops {
		out = append(out, ib.Counter{Name: c.Name(), Value: d.ctr[c].Load()})
	}
	return out
}

// Counter returns the value of the device counter called name, or 0.
func (d *Device) Counter(name string) uint64 {
	for _, c := range d.Counters() {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// Port returns the port attributes.
func (d *Device) Port() ib.PortAttr { return d.port }

// Fabric returns the fabric the device is on.
func (d *Device) Fabric() *Fabric { return d.fab }

// Close leaves the fabric, stops the delivery goroutine and flushes every
// QP; RC peers sending to it from now on fail with WCRetryExceeded.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.fab.remove(d)
	d.signal()
	<-d.done
	d.mu.Lock()
	qps := make([]*qp, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	d.mu.Unlock()
	for _, q := range qps {
		q.destroy()
	}
	if m := d.mads.Current(); m != nil {
		m.Close()
	}
	// What arrived meanwhile is lost; RC senders learn it.
	d.inMu.Lock()
	left := d.inbox
	d.inbox = nil
	d.inMu.Unlock()
	for _, p := range left {
		if p.kind == kindRC {
			p.nack(ib.WCRetryExceeded)
		}
	}
	return nil
}

// enqueue hands p to the delivery goroutine.
func (d *Device) enqueue(p *packet) {
	if d.closed.Load() {
		if p.kind == kindRC {
			p.nack(ib.WCRetryExceeded)
		}
		return
	}
	d.inMu.Lock()
	d.inbox = append(d.inbox, p)
	d.inMu.Unlock()
	d.signal()
}

// kick asks the delivery goroutine to retry stalled RC messages.
func (d *Device) kick() {
	d.mu.Lock()
	none := len(d.stalled) == 0
	d.mu.Unlock()
	if none {
		return // a message that stalls later is retried at the end of its batch
	}
	d.inMu.Lock()
	d.kicked = true
	d.inMu.Unlock()
	d.signal()
}

func (d *Device) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// run is the delivery goroutine: it lands what arrived, a batch at a time,
// then runs the handlers of the CQs it filled and wakes the others.
func (d *Device) run() {
	defer close(d.done)
	var batch []*packet
	for range d.wake {
		if d.closed.Load() {
			return
		}
		d.inMu.Lock()
		batch, d.inbox = d.inbox, batch[:0]
		kicked := d.kicked
		d.kicked = false
		d.inMu.Unlock()
		for k, p := range batch {
			d.land(p)
			batch[k] = nil
		}
		if kicked || len(batch) > 0 {
			d.retryStalled()
		}
		d.endBatch()
	}
}

// endBatch runs the handlers of the CQs filled in this batch, then wakes
// the consumers of the others, as softib's receive goroutine does.
func (d *Device) endBatch() {
	for _, c := range d.touched {
		c.RunHandler()
	}
	for k, c := range d.touched {
		c.SignalUnlessHandled()
		d.touched[k] = nil
	}
	d.touched = d.touched[:0]
	for k, c := range d.settled {
		close(c)
		d.settled[k] = nil
	}
	d.settled = d.settled[:0]
}

// Settle waits until the delivery goroutine has landed what was sent to
// the device before the call and run the CQ handlers of that batch, so a
// test can assert that something did not arrive without sleeping. It
// returns at once on a closed device.
func (d *Device) Settle() {
	done := make(chan struct{})
	d.enqueue(&packet{kind: kindSettle, settled: done})
	select {
	case <-done:
	case <-d.done:
	}
}

func (d *Device) touch(c *cq) {
	for _, t := range d.touched {
		if t == c {
			return
		}
	}
	d.touched = append(d.touched, c)
}

// land delivers one packet on the delivery goroutine.
func (d *Device) land(p *packet) {
	switch p.kind {
	case kindAck:
		p.from.acked(p.seq, p.status)
		return
	case kindSettle:
		d.settled = append(d.settled, p.settled)
		return
	}
	d.count(rxMessages)
	d.ctr[rxBytes].Add(uint64(len(p.data)))
	if !d.portAccepts(p.pkey) {
		d.count(ibqueue.DropPKey)
		if p.kind == kindRC {
			p.nack(ib.WCRetryExceeded)
		}
		return
	}
	if p.kind == kindMAD {
		d.recvMAD(p)
		return
	}
	if p.dgid.IsMulticast() {
		d.mu.Lock()
		members := d.groups[p.dgid]
		d.mu.Unlock()
		if len(members) == 0 {
			d.count(ibqueue.DropNotMember)
			return
		}
		for _, q := range members {
			q.recvUD(p)
		}
		return
	}
	d.mu.Lock()
	q := d.qps[p.dstQPN]
	d.mu.Unlock()
	switch {
	case q == nil:
		d.count(ibqueue.DropUnknownQP)
		if p.kind == kindRC {
			p.nack(ib.WCRetryExceeded)
		}
	case p.kind == kindUD && q.typ == ib.UD:
		q.recvUD(p)
	case p.kind == kindRC && q.typ == ib.RC, p.kind == kindUC && q.typ == ib.UC:
		q.recvConnected(p)
	default:
		d.count(ibqueue.DropUnknownQP) // the transport does not match the QP
		if p.kind == kindRC {
			p.nack(ib.WCRetryExceeded)
		}
	}
}

// retryStalled lands the RC messages that waited for a receive buffer.
func (d *Device) retryStalled() {
	d.mu.Lock()
	qs := d.stalled
	d.stalled = nil
	d.mu.Unlock()
	for _, q := range qs {
		q.retryStalled()
	}
}

func (d *Device) stall(q *qp) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.stalled {
		if s == q {
			return
		}
	}
	d.stalled = append(d.stalled, q)
}

// portAccepts is the port's P_Key check: some entry of its table accepts
// the packet's P_Key. Each QP checks its own P_Key as well.
func (d *Device) portAccepts(p ib.PKey) bool {
	for _, mine := range d.port.PKeys {
		if mine.Accepts(p) {
			return true
		}
	}
	return false
}

// inTable reports whether p's partition is in the port's table.
func (d *Device) inTable(p ib.PKey) bool {
	for _, mine := range d.port.PKeys {
		if mine.Partition() == p.Partition() {
			return true
		}
	}
	return false
}

// RegisterMemory registers a slab; the fake reads and writes it directly.
func (d *Device) RegisterMemory(s *ib.Slab) (ib.MR, error) {
	if s == nil || len(s.Bytes()) == 0 {
		return nil, errors.New("ibtest: register an empty slab")
	}
	return ibqueue.NewMR(s), nil
}

// CreateCQ makes a completion queue.
func (d *Device) CreateCQ(size int) (ib.CQ, error) {
	if d.closed.Load() {
		return nil, ib.ErrClosed
	}
	return newCQ(d, size), nil
}

// CreateSRQ makes a shared receive queue.
func (d *Device) CreateSRQ(attr ib.SRQAttr) (ib.SRQ, error) {
	if attr.MaxWR < 1 {
		return nil, fmt.Errorf("ibtest: SRQ depth %d", attr.MaxWR)
	}
	return &srq{RecvQueue: ibqueue.NewRecvQueue(attr.MaxWR, attr.Limit, false), dev: d}, nil
}

// CreateQP makes a queue pair in the Reset state.
func (d *Device) CreateQP(attr ib.QPAttr) (ib.QP, error) {
	if attr.Type != ib.RC && attr.Type != ib.UC && attr.Type != ib.UD {
		return nil, fmt.Errorf("ibtest: QP type %v", attr.Type)
	}
	sc, ok1 := attr.SendCQ.(*cq)
	rc, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, errors.New("ibtest: a QP needs a send and a receive CQ of this provider")
	}
	var s *srq
	if attr.SRQ != nil {
		if s, ok1 = attr.SRQ.(*srq); !ok1 {
			return nil, errors.New("ibtest: SRQ belongs to another provider")
		}
	}
	if d.closed.Load() {
		return nil, ib.ErrClosed
	}
	q := &qp{dev: d, num: d.fab.newQPN(), typ: attr.Type, sendCQ: sc, recvCQ: rc, srq: s,
		depth: max(attr.MaxSend, 1), state: ib.StateReset}
	if d.maxWR > 0 {
		q.depth = min(q.depth, d.maxWR)
	}
	if s == nil {
		q.recv = ibqueue.NewRecvQueue(attr.MaxRecv, 0, false)
	} else {
		q.recv = s.RecvQueue
	}
	d.mu.Lock()
	d.qps[q.num] = q
	d.mu.Unlock()
	return q, nil
}

func (d *Device) removeQP(q *qp) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.qps[q.num] == q {
		delete(d.qps, q.num)
	}
	for g, members := range d.groups {
		d.groups[g] = deleteQP(members, q)
		if len(d.groups[g]) == 0 {
			delete(d.groups, g)
		}
	}
}

// deleteQP returns members without q, in a new slice: run may be reading
// the old one.
func deleteQP(members []*qp, q *qp) []*qp {
	var kept []*qp
	for _, m := range members {
		if m != q {
			kept = append(kept, m)
		}
	}
	return kept
}

// CreateAH makes an address handle.
func (d *Device) CreateAH(attr ib.AHAttr) (ib.AH, error) {
	if attr.DestGID == (ib.GID{}) {
		return nil, errors.New("ibtest: address handle for the zero GID")
	}
	return &ah{attr: attr, dev: d}, nil
}

type ah struct {
	attr ib.AHAttr
	dev  *Device
}

func (a *ah) Attr() ib.AHAttr { return a.attr }
func (a *ah) Close() error    { return nil }

// AttachMulticast makes a UD QP of this device a member of the group; the
// fake has no LIDs, so mlid is not used.
func (d *Device) AttachMulticast(iq ib.QP, mgid ib.GID, mlid uint16) error {
	if !mgid.IsMulticast() {
		return fmt.Errorf("ibtest: %v is not a multicast GID", mgid)
	}
	q, ok := iq.(*qp)
	if !ok || q.dev != d || q.typ != ib.UD {
		return errors.New("ibtest: multicast needs a UD QP of this device")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.groups[mgid] = append(append([]*qp(nil), d.groups[mgid]...), q)
	return nil
}

// DetachMulticast removes a UD QP from the group.
func (d *Device) DetachMulticast(iq ib.QP, mgid ib.GID) error {
	q, ok := iq.(*qp)
	if !ok || q.dev != d {
		return errors.New("ibtest: not a QP of this device")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old := d.groups[mgid]
	k := -1
	for i, m := range old {
		if m == q {
			k = i
			break
		}
	}
	if k < 0 {
		return fmt.Errorf("ibtest: QP %v is not attached to %v", q.num, mgid)
	}
	kept := append(append([]*qp(nil), old[:k]...), old[k+1:]...)
	if len(kept) == 0 {
		delete(d.groups, mgid)
	} else {
		d.groups[mgid] = kept
	}
	return nil
}

// QPCounterNames names the counters every QP reports.
func (d *Device) QPCounterNames() []string { return qpCounterNames[:] }
