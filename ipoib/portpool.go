package ipoib

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
)

// Port is what every interface on one adapter port shares: ib0, its P_Key
// children and pods' children alike. It owns one registered slab, the
// receive pool: the SRQ's slots, into which every connected QP of every
// interface on the port receives, whatever its partition (the P_Key is
// checked per QP, by the adapter), and the rings of the first interface
// opened on it. It owns the SRQ and the receive CQ that every interface's
// QPs complete on, and takes those completions off the CQ itself: each
// goes to the interface that owns its QP, found by QPN in a table read
// without a lock (qpTable). An interface adds only its own QPs, its send
// CQ, its neighbor and connection state, its rings (small but for the
// first one's: childLayout) and its netdev.
//
// The daemon opens one Port over its ib.Device and hands it to each
// interface (Config.Port); an interface opened without one opens its own.
// A Port is closed after every interface on it.
type Port struct {
	dev    ib.Device
	slab   *ib.Slab // [SRQ receive | the first interface's rings]
	mr     ib.MR
	srq    ib.SRQ
	recvCQ ib.CQ
	owners qpTable

	mu       sync.Mutex
	primary  bool // the slab's rings are an interface's
	children int  // interfaces with rings of their own
	// registered counts the octets registered with the device: the slab
	// and the children's rings.
	registered atomic.Int64

	rxMu      sync.Mutex // drain: the port's rx goroutine or the provider's
	rx        portRx
	done      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// maxChildren bounds the interfaces on a port beyond the first, as the
// receive CQ must hold a completion for every receive posted: the SRQ's,
// the first interface's UD ring, and each child's. 232 keep it within
// the 32767 entries of rxe's CQs (verbs grants at most a device's
// max_cqe); kubelet's default limit is 110 pods a node.
const maxChildren = 232

// recvCQDepth holds every receive the port's interfaces may have posted.
const recvCQDepth = numSRQRx + numUDRx + maxChildren*childUDRx

// srqWRID marks the work request IDs of the SRQ's slots: the rest on the
// receive CQ are UD ring slots of the interface that owns the QP.
const srqWRID = 1 << 40

// srqSize is the octets of the SRQ's slots, at the head of the slab.
const srqSize = numSRQRx * slotSize

// OpenPort opens the shared resources of dev's port: the slab, registered
// once, the SRQ with its slots posted and the receive CQ, and starts
// taking completions off the CQ. Close it after the interfaces on it.
func OpenPort(dev ib.Device) (_ *Port, err error) {
	if dev == nil {
		return nil, errors.New("ipoib: no device")
	}
	p := &Port{dev: dev, done: make(chan struct{})}
	defer func() {
		if err != nil {
			p.release()
		}
	}()
	if p.slab, err = ib.NewSlab(srqSize + primaryLayout.size()); err != nil {
		return nil, err
	}
	if p.mr, err = dev.RegisterMemory(p.slab); err != nil {
		return nil, err
	}
	p.registered.Add(int64(len(p.slab.Bytes())))
	if p.recvCQ, err = dev.CreateCQ(recvCQDepth); err != nil {
		return nil, err
	}
	if p.srq, err = dev.CreateSRQ(ib.SRQAttr{MaxWR: numSRQRx, Limit: numSRQRx / 4}); err != nil {
		return nil, err
	}
	wrs := make([]ib.RecvWR, 0, numSRQRx)
	for k := range uint32(numSRQRx) {
		wrs = append(wrs, ib.RecvWR{ID: srqWRID | uint64(k), SGE: p.srqSGE(k)})
	}
	if _, err = p.srq.PostRecv(wrs); err != nil {
		return nil, err
	}
	p.start()
	return p, nil
}

// start takes receive completions off the CQ: on the provider's receive
// goroutine where it runs a handler (ib.CQHandler: no thread wake-up
// between the fabric and the TUN), and on the port's own for the rest.
func (p *Port) start() {
	ib.CapsOf(p.dev).SetCQHandler(p.recvCQ, p.drain)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case <-p.recvCQ.Ready():
				p.drain()
			case <-p.done:
				return
			}
		}
	}()
}

// Device returns the port's device.
func (p *Port) Device() ib.Device { return p.dev }

// Registered returns the octets of memory registered with the device
// (pinned, on verbs): the shared slab and the children's rings.
func (p *Port) Registered() int64 { return p.registered.Load() }

// Close stops taking completions and releases the SRQ, the CQ and the
// slab. Every interface on the port must be closed first; the device
// stays open.
func (p *Port) Close() error {
	p.closeOnce.Do(func() {
		close(p.done)
		p.wg.Wait()
		p.release()
	})
	return nil
}

func (p *Port) release() {
	if p.srq != nil {
		_ = p.srq.Close()
	}
	if p.recvCQ != nil {
		_ = p.recvCQ.Close()
	}
	if p.mr != nil {
		_ = p.mr.Close()
	}
	if p.slab != nil {
		_ = p.slab.Close()
	}
}

// srqSGE names SRQ slot k.
func (p *Port) srqSGE(k uint32) ib.SGE {
	return ib.SGE{MR: p.mr, Offset: int(k) * slotSize, Length: slotSize}
}

// srqBytes returns SRQ slot k.
func (p *Port) srqBytes(k uint32) []byte {
	off := int(k) * slotSize
	return p.slab.Bytes()[off : off+slotSize]
}

// openRing returns the rings of an interface opening on the port: the
// slab's, at primaryLayout, when no interface has them, else a child's
// (childLayout), in a slab of its own registered now and faulted in only
// as it is used.
func (p *Port) openRing() (ring, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.primary {
		p.primary = true
		return ring{lay: primaryLayout, mr: p.mr, base: srqSize}, nil
	}
	if p.children >= maxChildren {
		return ring{}, fmt.Errorf("ipoib: the port serves %d interfaces already, its most", maxChildren+1)
	}
	slab, err := ib.NewSlabOnDemand(childLayout.size())
	if err != nil {
		return ring{}, err
	}
	mr, err := p.dev.RegisterMemory(slab)
	if err != nil {
		_ = slab.Close()
		return ring{}, err
	}
	p.children++
	p.registered.Add(int64(childLayout.size()))
	return ring{lay: childLayout, mr: mr, own: slab}, nil
}

// closeRing gives r back, once nothing can complete in it any more.
func (p *Port) closeRing(r ring) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.own == nil {
		p.primary = false
		return
	}
	_ = r.mr.Close()
	_ = r.own.Close()
	p.children--
	p.registered.Add(-int64(r.lay.size()))
}

// qpTable maps a QPN to the interface whose QP it is. A reader loads
// one shard (by the QPN's low octet) and looks the QPN up in its map: no
// lock, no allocation. A writer, under mu, replaces the shard with a
// changed copy, which holds about 1/256 of the QPs. Maps keep the cost a
// few words per QP whatever the QPNs: softib hands out unpredictable
// ones, which a table indexed by QPN would spread over most of its pages.
type qpTable struct {
	mu     sync.Mutex
	shards [256]atomic.Pointer[map[ib.QPN]*Interface]
}

func (t *qpTable) get(n ib.QPN) *Interface {
	if m := t.shards[n&0xff].Load(); m != nil {
		return (*m)[n]
	}
	return nil
}

func (t *qpTable) set(n ib.QPN, i *Interface) {
	t.mu.Lock()
	defer t.mu.Unlock()
	shard := &t.shards[n&0xff]
	m := map[ib.QPN]*Interface{}
	if old := shard.Load(); old != nil {
		m = maps.Clone(*old)
	}
	m[n] = i
	shard.Store(&m)
}

// clear removes n if i still owns it: a QPN the provider gave another
// interface's QP since stays that one's.
func (t *qpTable) clear(n ib.QPN, i *Interface) {
	t.mu.Lock()
	defer t.mu.Unlock()
	shard := &t.shards[n&0xff]
	old := shard.Load()
	if old == nil || (*old)[n] != i {
		return
	}
	m := maps.Clone(*old)
	delete(m, n)
	shard.Store(&m)
}

// portQP is a connected QP of an interface on the port: closing it takes
// its QPN out of the port's table.
type portQP struct {
	ib.QP
	port *Port
	i    *Interface
}

func (q *portQP) Close() error {
	err := q.QP.Close()
	q.port.owners.clear(q.Num(), q.i)
	return err
}
