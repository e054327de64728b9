package cm

import (
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// Service is how the Manager establishes connections. It has two
// implementations: the Engine of this package, speaking CM MADs on QP1
// (softib), and the kernel's CM reached through librdmacm (the verbs
// provider). Both keep each connection as a *Conn whose exported fields
// they fill (State, remote QPN and GID, path MTU, starting PSNs) and report
// through the events function they were made with; the Manager runs above
// either without knowing which.
type Service interface {
	// Listen makes REQs for serviceID reach the Manager as EvRequest.
	Listen(serviceID uint64) error
	// Connect starts an outgoing connection in StateREQSent.
	Connect(now time.Time, p ConnectParams) (*Conn, error)
	// Accept answers an EvRequest. The QP is already in RTS.
	Accept(now time.Time, c *Conn, p AcceptParams) error
	// Reject refuses an EvRequest.
	Reject(c *Conn, reason RejectReason, private []byte) error
	// Ready finishes an outgoing connection after EvReply (the RTU).
	Ready(c *Conn) error
	// RejectReply refuses an EvReply.
	RejectReply(c *Conn, reason RejectReason, private []byte) error
	// Disconnect ends a connection in any state.
	Disconnect(now time.Time, c *Conn)
	// Next is when Expire must run next (zero: no timer).
	Next() time.Time
	// Expire runs the timers that are due.
	Expire(now time.Time)
	// Counters are the service's own counters (MADs, retransmissions).
	Counters() []ib.Counter
}

// A PolledService learns of events outside the Manager's goroutine (the
// kernel's CM tells librdmacm through a file descriptor): whoever runs the
// Manager waits on Wake and then calls Poll, which reports the pending
// events on that goroutine. The Engine needs none of this: its owner feeds
// it MADs.
type PolledService interface {
	Service
	// Wake is signalled (capacity one) when events are pending.
	Wake() <-chan struct{}
	// Poll handles every pending event.
	Poll(now time.Time)
	// Close stops the service; the Manager is closed first.
	Close() error
}

var _ Service = (*Engine)(nil)

// String says what the daemon shows as its connection service.
func (e *Engine) String() string { return "ipoibd's CM engine, MADs on QP1" }

// Counters returns the engine's counters under the names the daemon shows
// (with a "cm_" prefix), derived from EngineStats.
func (e *Engine) Counters() []ib.Counter { return statCounters(&e.Stats) }
