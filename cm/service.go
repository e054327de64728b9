package cm

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/madqueue"
)

// Service is a connection service: what sets connections up and tears
// them down for a consumer (ipoibd's is the IPoIB connection manager,
// package ipoibcm). There are two: ours, the EngineService (the Engine
// speaking CM MADs on QP1: softib's, or ib_umad's on rdma-core ports), and
// the kernel's CM reached through librdmacm (package rdmacm). Each keeps
// a connection as a *Comm whose exported fields it fills (State, remote
// QPN and GID, path MTU, starting PSNs) and reports through the events
// function it was made with; the consumer runs above either without
// knowing which, and its owner drives both the same way: wait on Wake and
// call Poll, call Expire at Next.
type Service interface {
	// Listen makes REQs for serviceID reach the consumer as EvRequest.
	Listen(serviceID uint64) error
	// Connect starts an outgoing connection in StateREQSent.
	Connect(now time.Time, p ConnectParams) (*Comm, error)
	// Accept answers an EvRequest. The QP is already in RTS.
	Accept(now time.Time, c *Comm, p AcceptParams) error
	// Reject refuses an EvRequest.
	Reject(c *Comm, reason RejectReason, private []byte) error
	// Ready finishes an outgoing connection after EvReply (the RTU).
	Ready(c *Comm) error
	// RejectReply refuses an EvReply.
	RejectReply(c *Comm, reason RejectReason, private []byte) error
	// Disconnect ends a connection in any state.
	Disconnect(now time.Time, c *Comm)
	// Next is when Expire must run next (zero: no timer).
	Next() time.Time
	// Expire runs the timers that are due.
	Expire(now time.Time)
	// Wake is signalled (capacity one) when input is pending (MADs, the
	// kernel CM's events); nil if the service has no input of its own.
	Wake() <-chan struct{}
	// Poll handles every pending input, reporting events on the caller's
	// goroutine.
	Poll(now time.Time)
	// Counters are the service's own counters (MADs, retransmissions).
	Counters() []ib.Counter
	// Close stops the service; its consumer is closed first.
	Close() error
}

var _ Service = (*Engine)(nil)

// String says what the daemon shows as its connection service.
func (e *Engine) String() string { return "ipoibd's CM engine, MADs on QP1" }

// An Engine alone has no input of its own: its owner feeds it HandleMAD
// (tests; EngineService for a real transport).
func (e *Engine) Wake() <-chan struct{} { return nil }

// Poll does nothing: see Wake.
func (e *Engine) Poll(now time.Time) {}

// Close does nothing: the Engine holds no resources.
func (e *Engine) Close() error { return nil }

// EngineService is ipoibd's own connection service: the Engine on a MAD
// transport (ib.MADService: a port's QP1, or a QP1Share of it). Received
// MADs wait in a bounded queue until the owner's Poll, so that the Engine
// still runs on one goroutine. The queue is shared fairly by source
// (madqueue), as the provider's queue before it: when the owner falls
// behind a flood, the flooder's MADs are the ones refused.
type EngineService struct {
	*Engine
	mads ib.MADService
	wake chan struct{}
	done chan struct{}

	mu      sync.Mutex
	queue   []ib.MAD
	spare   []ib.MAD
	shares  *madqueue.Shares
	dropped uint64 // queue full (the sender retransmits)
	refused uint64 // over its source's share
	closed  bool
}

// maxQueuedMADs bounds the MADs waiting for Poll.
const maxQueuedMADs = 1024

// NewEngineService makes the Engine of cfg sending and receiving on mads;
// cfg.Send is set to mads.Send. Close closes mads.
func NewEngineService(cfg EngineConfig, mads ib.MADService) *EngineService {
	cfg.Send = mads.Send
	m := &EngineService{Engine: NewEngine(cfg), mads: mads, wake: make(chan struct{}, 1), done: make(chan struct{}),
		shares: madqueue.New(maxQueuedMADs)}
	go m.receive()
	return m
}

func (m *EngineService) receive() {
	defer close(m.done)
	for mad := range m.mads.Recv() {
		m.mu.Lock()
		switch {
		case !m.shares.Admit(mad.From, len(m.queue)):
			m.refused++
		case len(m.queue) < maxQueuedMADs:
			m.queue = append(m.queue, mad)
		default:
			m.dropped++
		}
		m.mu.Unlock()
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// Wake is signalled when MADs are queued.
func (m *EngineService) Wake() <-chan struct{} { return m.wake }

// Poll hands every queued MAD to the Engine.
func (m *EngineService) Poll(now time.Time) {
	m.mu.Lock()
	q := m.queue
	m.queue, m.spare = m.spare[:0], nil
	m.mu.Unlock()
	for i := range q {
		m.HandleMAD(now, &q[i])
	}
	clear(q)
	m.mu.Lock()
	m.spare = q[:0]
	m.mu.Unlock()
}

// Close closes the MAD transport and waits for the receiver to end.
func (m *EngineService) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	err := m.mads.Close()
	<-m.done
	return err
}

// String names the engine and its transport.
func (m *EngineService) String() string {
	if s, ok := m.mads.(fmt.Stringer); ok {
		return "ipoibd's CM engine, MADs on QP1 through " + s.String()
	}
	return m.Engine.String()
}

// Counters are the Engine's, the queue's drops and the transport's own
// (if it counts).
func (m *EngineService) Counters() []ib.Counter {
	m.mu.Lock()
	dropped, refused := m.dropped, m.refused
	m.mu.Unlock()
	out := append(m.Engine.Counters(), ib.Counter{Name: "mad_drop_queue_full", Value: dropped},
		ib.Counter{Name: "mad_drop_source_share", Value: refused})
	if c, ok := m.mads.(interface{ Counters() []ib.Counter }); ok {
		out = append(out, c.Counters()...)
	}
	return out
}

// Counters returns the engine's counters under the names the daemon shows
// (with a "cm_" prefix), derived from EngineStats.
func (e *Engine) Counters() []ib.Counter { return StatCounters(&e.Stats) }

// ServiceParams is what an IPoIB interface's connection service is made
// for: the port, the partition, the interface's UD QPN (its RFC 4755
// service ID) and where the service's events go.
type ServiceParams struct {
	Port     ib.PortAttr
	PKey     ib.PKey
	UDQPN    ib.QPN
	MaxConns int
	Events   func(Event)
	// Log gets the engine's rate-limited lines (nil: none).
	Log *slog.Logger
}

func (p ServiceParams) engine() EngineConfig {
	return EngineConfig{GID: p.Port.GID, GUID: p.Port.GUID, PKey: p.PKey, LMC: p.Port.LMC, MaxConns: p.MaxConns, Event: p.Events, Log: p.Log}
}

// ServiceMaker makes the connection service of one interface. The maker
// is chosen once per daemon (--cm own: EngineOnSharedQP1; --cm kernel:
// package rdmacm's) and called for every interface.
type ServiceMaker func(ServiceParams) (Service, error)

// EngineOnSharedQP1 makes each interface an EngineService on its own share
// of the port's QP1, opened for the RFC 4755 service ID of its UD QPN.
func EngineOnSharedQP1(qp1 *SharedQP1) ServiceMaker {
	return func(p ServiceParams) (Service, error) {
		share, err := qp1.Open(IPoIBServiceID(p.UDQPN))
		if err != nil {
			return nil, err
		}
		cfg := p.engine()
		cfg.CommIDTag = share.Tag()
		return NewEngineService(cfg, share), nil
	}
}

// EngineOnQP1 makes an EngineService on the device's QP1 alone, for a port
// that serves one interface and nothing else.
func EngineOnQP1(dev ib.Device) ServiceMaker {
	return func(p ServiceParams) (Service, error) {
		mads, err := dev.MADs()
		if err != nil {
			return nil, err
		}
		return NewEngineService(p.engine(), mads), nil
	}
}
