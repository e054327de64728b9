package cm

import (
	"sync"
	"time"
)

// The engine's timers: when Expire is due, what it does when a timer
// fires (send again, give up, end timewait), and the last MAD of each
// connection kept to be sent again.

// Next returns when Expire must next be called (zero: no timer running).
func (e *Engine) Next() time.Time {
	var next time.Time
	for _, c := range e.byLocal {
		if !c.deadline.IsZero() && (next.IsZero() || c.deadline.Before(next)) {
			next = c.deadline
		}
	}
	return next
}

// Expire runs the timers due at now: retransmissions, give-ups and the end
// of timewait.
func (e *Engine) Expire(now time.Time) {
	for _, c := range e.byLocal {
		if c.deadline.IsZero() || now.Before(c.deadline) {
			continue
		}
		switch {
		case c.State == StateTimewait:
			e.forget(c)
			e.emit(Event{Type: EvTimewaitDone, Comm: c})
		case c.retries < c.maxRetries:
			c.retries++
			c.deadline = now.Add(c.timeout)
			e.Stats.Retransmitted++
			e.sendLast(c)
		case c.State == StateDREQSent:
			e.timewait(now, c)
			e.emit(Event{Type: EvDisconnected, Comm: c})
		default: // REQ or REP unanswered
			if c.State == StateREPSent || c.State == StateREQSent {
				e.sendREJ(c.to, c.tid, c.LocalCommID, c.RemoteCommID, MsgOther, RejTimeout, nil, nil)
			}
			e.forget(c)
			e.emit(Event{Type: EvTimeout, Comm: c})
		}
	}
}

func (e *Engine) arm(now time.Time, c *Comm, timeout time.Duration, retries int) {
	c.timeout, c.maxRetries, c.retries = timeout, retries, 0
	c.deadline = now.Add(timeout)
}

func (e *Engine) sendLast(c *Comm) {
	if c.last != nil {
		e.send(c.to, c.last[:])
	}
}

// lastMADs recycles the buffers of Comm.last: at most the connections in
// setup or disconnecting hold one.
var lastMADs = sync.Pool{New: func() any { return new([MADLen]byte) }}

// keepLast returns c's buffer for the MAD it is about to send, taking
// one if it holds none.
func keepLast(c *Comm) []byte {
	if c.last == nil {
		c.last = lastMADs.Get().(*[MADLen]byte)
	}
	return c.last[:]
}

// dropLast gives c's buffer back. MADService.Send copies what it sends,
// so nothing else refers to it.
func dropLast(c *Comm) {
	if c.last != nil {
		lastMADs.Put(c.last)
		c.last = nil
	}
}
