package cm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// This file is the CM protocol engine of IBA chapter 12 for one port: the
// active and passive connection state machines, retransmission, duplicate
// handling, timewait and the stale-connection rule. It is a plain state
// machine: its owner feeds it received MADs and the time, and it answers
// through the Send and Event callbacks. It never starts a goroutine or
// reads a clock, so tests drive it deterministically.

// State is where one connection is in the CM state machine.
type State uint8

// Connection states (IBA 12.9.6, without the RD and alternate-path ones).
const (
	StateIdle State = iota
	StateREQSent
	StateREQRcvd
	StateREPSent
	StateREPRcvd
	StateEstablished
	StateDREQSent
	StateTimewait
)

var stateNames = []string{"idle", "req-sent", "req-rcvd", "rep-sent", "rep-rcvd", "established", "dreq-sent", "timewait"}

func (s State) String() string { return enumName(stateNames, uint64(s), "State") }

// EventType says what happened to a connection.
type EventType uint8

// Events the engine reports to its consumer.
const (
	// EvRequest: a REQ for a listened service ID arrived; answer with Accept
	// or Reject (now or later; a slow answer draws an MRA).
	EvRequest EventType = iota + 1
	// EvReply: our REQ was answered with a REP; bring the QP to RTS and
	// call Ready, or refuse with RejectReply.
	EvReply
	// EvEstablished: the RTU arrived (passive side).
	EvEstablished
	// EvRejected: the peer rejected our REQ or REP.
	EvRejected
	// EvTimeout: a REQ, REP or DREQ went unanswered after every retry, or
	// the connection was found stale; the QP must stop.
	EvTimeout
	// EvDisconnected: the connection is over (DREQ received or our DREQ
	// answered); the QP must stop. Timewait follows.
	EvDisconnected
	// EvTimewaitDone: timewait is over; the local QP may be destroyed or
	// reused and the connection is forgotten.
	EvTimewaitDone
)

var eventNames = []string{"", "request", "reply", "established", "rejected", "timeout", "disconnected", "timewait-done"}

func (t EventType) String() string { return enumName(eventNames, uint64(t), "EventType") }

// Event is one report to the consumer. REQ, REP and REJ point at the message
// that caused it, when one did.
type Event struct {
	Type EventType
	Conn *Conn
	REQ  *REQ
	REP  *REP
	REJ  *REJ
}

// Conn is one connection as the CM sees it. The consumer reads its fields
// and keeps its own state in Context; the engine owns the rest.
type Conn struct {
	State        State
	Active       bool // we sent the REQ
	LocalCommID  uint32
	RemoteCommID uint32
	LocalQPN     ib.QPN
	RemoteQPN    ib.QPN
	RemoteGID    ib.GID
	RemoteGUID   uint64
	ServiceID    uint64
	Transport    TransportType
	// SendPSN and RecvPSN are the starting PSNs of our send and receive
	// queues (IBA: the REQ's PSN is the passive side's send PSN).
	SendPSN, RecvPSN uint32
	PathMTU          ib.MTU
	RetryCount       uint8
	RNRRetry         uint8
	ACKTimeout       uint8
	Context          any

	tid        uint64
	last       [MADLen]byte // the last request or reply we sent, for retries and duplicates
	lastValid  bool
	retries    int
	maxRetries int
	timeout    time.Duration
	deadline   time.Time // zero: no timer
}

// EngineConfig sets the engine's identity and limits.
type EngineConfig struct {
	GID  ib.GID
	GUID uint64
	PKey ib.PKey
	// ResponseTimeout is the CM response timeout code we ask peers to honour
	// and wait for ourselves (default 16: about 268 ms).
	ResponseTimeout uint8
	// MaxRetries is how often a REQ, REP or DREQ is sent again (default 8).
	MaxRetries uint8
	// Timewait keeps a finished connection's QP out of use (default: two
	// response timeouts).
	Timewait time.Duration
	// MaxConns bounds connections in any state, MaxHalfOpen those still
	// being set up (defaults 4096 and 256). Beyond them a REQ draws REJ
	// "no resources".
	MaxConns, MaxHalfOpen int
	// Send transmits one MAD on QP1.
	Send func(to ib.MADAddr, mad []byte) error
	// Event reports to the consumer; it may call back into the engine.
	Event func(Event)
}

// EngineStats counts what the engine did with what it received.
type EngineStats struct {
	Received, Sent, Retransmitted uint64
	Malformed, Unknown, Duplicate uint64
	Rejected                      uint64 // REQs we refused without asking the consumer
	Stale                         uint64 // stale connections found by the IBA rule
	SendErrors                    uint64
}

// Engine runs the CM for one port.
type Engine struct {
	cfg       EngineConfig
	listening map[uint64]bool
	byLocal   map[uint32]*Conn   // every connection we know, by our comm ID
	byRemote  map[remoteID]*Conn // by the peer's comm ID, to spot duplicate REQs
	byQP      map[remoteQP]*Conn // established ones, by the peer's QP: the stale rule
	nextID    uint32
	nextTID   uint64
	halfOpen  int
	buf       [MADLen]byte
	Stats     EngineStats
}

type remoteID struct {
	guid   uint64
	commID uint32
}

type remoteQP struct {
	guid uint64
	qpn  ib.QPN
}

// Errors returned to the consumer.
var (
	ErrTooMany  = errors.New("cm: too many connections")
	ErrBadState = errors.New("cm: not allowed in this connection state")
)

// NewEngine makes an engine; nothing is sent until the owner calls it.
func NewEngine(cfg EngineConfig) *Engine {
	if cfg.ResponseTimeout == 0 {
		cfg.ResponseTimeout = 16
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 8
	}
	if cfg.Timewait == 0 {
		cfg.Timewait = 2 * TimeoutDuration(cfg.ResponseTimeout)
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 4096
	}
	if cfg.MaxHalfOpen == 0 {
		cfg.MaxHalfOpen = 256
	}
	var seed [12]byte
	_, _ = rand.Read(seed[:])
	return &Engine{
		cfg:       cfg,
		listening: map[uint64]bool{},
		byLocal:   map[uint32]*Conn{},
		byRemote:  map[remoteID]*Conn{},
		byQP:      map[remoteQP]*Conn{},
		// Random starts, so a restarted node does not reuse the IDs its
		// peers may still remember.
		nextID:  binary.BigEndian.Uint32(seed[0:4]),
		nextTID: binary.BigEndian.Uint64(seed[4:12]),
	}
}

// Listen makes REQs for serviceID reach the consumer.
func (e *Engine) Listen(serviceID uint64) error {
	e.listening[serviceID] = true
	return nil
}

// Conns returns the number of connections in any state.
func (e *Engine) Conns() int { return len(e.byLocal) }

// ConnectParams describe an outgoing REQ.
type ConnectParams struct {
	RemoteGID   ib.GID
	ServiceID   uint64
	LocalQPN    ib.QPN
	Transport   TransportType // TransportRC or TransportUC
	RecvPSN     uint32        // our receive queue's start (the REQ's PSN is the peer's send PSN)
	PathMTU     ib.MTU
	RetryCount  uint8
	RNRRetry    uint8
	ACKTimeout  uint8
	PrivateData []byte
	Context     any
}

// Connect sends a REQ and returns the new connection in REQ-sent.
func (e *Engine) Connect(now time.Time, p ConnectParams) (*Conn, error) {
	if len(e.byLocal) >= e.cfg.MaxConns || e.halfOpen >= e.cfg.MaxHalfOpen {
		return nil, ErrTooMany
	}
	c := &Conn{
		State: StateREQSent, Active: true, LocalQPN: p.LocalQPN, RemoteGID: p.RemoteGID,
		ServiceID: p.ServiceID, Transport: p.Transport, RecvPSN: p.RecvPSN & 0xffffff,
		PathMTU: p.PathMTU, RetryCount: p.RetryCount, RNRRetry: p.RNRRetry, ACKTimeout: p.ACKTimeout,
		Context: p.Context,
	}
	req := REQ{
		ServiceID: p.ServiceID, LocalCAGUID: e.cfg.GUID, LocalQPN: p.LocalQPN,
		RemoteCMResponseTimeout: e.cfg.ResponseTimeout, LocalCMResponseTimeout: e.cfg.ResponseTimeout,
		TransportType: p.Transport, StartingPSN: c.RecvPSN, RetryCount: p.RetryCount,
		PKey: e.cfg.PKey, PathMTU: p.PathMTU, RNRRetryCount: p.RNRRetry,
		MaxCMRetries: e.cfg.MaxRetries & 0xf, SRQ: true,
		Primary: Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: e.cfg.GID, RemoteGID: p.RemoteGID,
			HopLimit: 1, LocalACKTimeout: p.ACKTimeout},
	}
	copy(req.PrivateData[:], p.PrivateData)
	c.LocalCommID = e.newCommID()
	req.LocalCommID = c.LocalCommID
	c.tid = e.newTID()
	if err := req.MarshalMAD(c.last[:], c.tid); err != nil {
		return nil, fmt.Errorf("cm: REQ: %w", err)
	}
	c.lastValid = true
	e.byLocal[c.LocalCommID] = c
	e.halfOpen++
	e.arm(now, c, TimeoutDuration(e.cfg.ResponseTimeout), int(e.cfg.MaxRetries))
	e.sendLast(c)
	return c, nil
}

// AcceptParams describe the REP answering a REQ.
type AcceptParams struct {
	LocalQPN    ib.QPN
	RecvPSN     uint32 // our receive queue's start, the peer sends with it (0: keep Conn.RecvPSN)
	RNRRetry    uint8  // the RNR retry count the requester's QP should use
	PrivateData []byte
}

// Accept answers a REQ-received connection with a REP. The local QP must
// already accept data: the peer may send before its RTU arrives.
func (e *Engine) Accept(now time.Time, c *Conn, p AcceptParams) error {
	if c.State != StateREQRcvd {
		return ErrBadState
	}
	c.LocalQPN = p.LocalQPN
	if p.RecvPSN != 0 {
		c.RecvPSN = p.RecvPSN & 0xffffff
	}
	rep := REP{
		LocalCommID: c.LocalCommID, RemoteCommID: c.RemoteCommID, LocalQPN: p.LocalQPN,
		StartingPSN: c.RecvPSN, RNRRetryCount: p.RNRRetry, SRQ: true, LocalCAGUID: e.cfg.GUID,
	}
	copy(rep.PrivateData[:], p.PrivateData)
	if err := rep.MarshalMAD(c.last[:], c.tid); err != nil {
		return fmt.Errorf("cm: REP: %w", err)
	}
	c.lastValid = true
	c.State = StateREPSent
	e.arm(now, c, TimeoutDuration(e.cfg.ResponseTimeout), int(e.cfg.MaxRetries))
	e.sendLast(c)
	return nil
}

// Reject refuses a REQ-received connection and forgets it.
func (e *Engine) Reject(c *Conn, reason RejectReason, private []byte) error {
	if c.State != StateREQRcvd {
		return ErrBadState
	}
	e.sendREJ(c.RemoteGID, c.tid, c.LocalCommID, c.RemoteCommID, MsgREQ, reason, private)
	e.forget(c)
	return nil
}

// Ready finishes the active side after EvReply: it sends the RTU. The QP
// must be in RTS.
func (e *Engine) Ready(c *Conn) error {
	if c.State != StateREPRcvd {
		return ErrBadState
	}
	rtu := RTU{LocalCommID: c.LocalCommID, RemoteCommID: c.RemoteCommID}
	if err := rtu.MarshalMAD(c.last[:], c.tid); err != nil {
		return fmt.Errorf("cm: RTU: %w", err)
	}
	c.lastValid = true // a duplicate REP gets this RTU again
	e.establish(c)
	c.deadline = time.Time{}
	e.sendLast(c)
	return nil
}

// RejectReply refuses a REP (after EvReply) and forgets the connection.
func (e *Engine) RejectReply(c *Conn, reason RejectReason, private []byte) error {
	if c.State != StateREPRcvd {
		return ErrBadState
	}
	e.sendREJ(c.RemoteGID, c.tid, c.LocalCommID, c.RemoteCommID, MsgREP, reason, private)
	e.forget(c)
	return nil
}

// Disconnect ends a connection: an established one with a DREQ (timewait
// follows the DREP), one still being set up with a REJ. The consumer gets
// EvDisconnected when the DREQ is answered or runs out of retries.
func (e *Engine) Disconnect(now time.Time, c *Conn) {
	switch c.State {
	case StateEstablished, StateREPSent:
		e.sendDREQ(now, c)
	case StateREQSent, StateREPRcvd:
		e.sendREJ(c.RemoteGID, c.tid, c.LocalCommID, c.RemoteCommID, MsgOther, RejTimeout, nil)
		e.forget(c)
	case StateREQRcvd:
		_ = e.Reject(c, RejConsumerReject, nil)
	}
}

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
			e.emit(Event{Type: EvTimewaitDone, Conn: c})
		case c.retries < c.maxRetries:
			c.retries++
			c.deadline = now.Add(c.timeout)
			e.Stats.Retransmitted++
			e.sendLast(c)
		case c.State == StateDREQSent:
			e.timewait(now, c)
			e.emit(Event{Type: EvDisconnected, Conn: c})
		default: // REQ or REP unanswered
			if c.State == StateREPSent || c.State == StateREQSent {
				e.sendREJ(c.RemoteGID, c.tid, c.LocalCommID, c.RemoteCommID, MsgOther, RejTimeout, nil)
			}
			e.forget(c)
			e.emit(Event{Type: EvTimeout, Conn: c})
		}
	}
}

// HandleMAD processes one MAD received on QP1.
func (e *Engine) HandleMAD(now time.Time, m *ib.MAD) {
	e.Stats.Received++
	h, msg, err := DecodeMAD(m.Data[:])
	if err != nil {
		e.Stats.Malformed++
		return
	}
	switch msg := msg.(type) {
	case *REQ:
		e.handleREQ(now, m.From, h.TransactionID, msg)
	case *REP:
		e.handleREP(now, m.From, msg)
	case *RTU:
		e.handleRTU(msg)
	case *REJ:
		e.handleREJ(now, msg)
	case *MRA:
		e.handleMRA(now, msg)
	case *DREQ:
		e.handleDREQ(now, m.From, h.TransactionID, msg)
	case *DREP:
		e.handleDREP(now, msg)
	default:
		e.Stats.Unknown++ // SIDR, LAP, APR: not used by IPoIB
	}
}

func (e *Engine) handleREQ(now time.Time, from ib.MADAddr, tid uint64, req *REQ) {
	if c := e.byRemote[remoteID{req.LocalCAGUID, req.LocalCommID}]; c != nil {
		// A retransmission: answer as before, or tell a slow consumer's
		// peer to wait.
		e.Stats.Duplicate++
		switch c.State {
		case StateREQRcvd:
			e.sendMRA(c, MsgREQ)
		case StateREPSent, StateEstablished:
			e.sendLast(c)
		}
		return
	}
	if old := e.byQP[remoteQP{req.LocalCAGUID, req.LocalQPN}]; old != nil {
		e.Stats.Rejected++
		e.stale(now, old)
		e.sendREJ(from.GID, tid, 0, req.LocalCommID, MsgREQ, RejStaleConnection, nil)
		return
	}
	if !e.listening[req.ServiceID] {
		e.Stats.Rejected++
		e.sendREJ(from.GID, tid, 0, req.LocalCommID, MsgREQ, RejInvalidServiceID, nil)
		return
	}
	if req.TransportType != TransportRC && req.TransportType != TransportUC {
		e.Stats.Rejected++
		e.sendREJ(from.GID, tid, 0, req.LocalCommID, MsgREQ, RejInvalidTransportType, nil)
		return
	}
	if len(e.byLocal) >= e.cfg.MaxConns || e.halfOpen >= e.cfg.MaxHalfOpen {
		e.Stats.Rejected++
		e.sendREJ(from.GID, tid, 0, req.LocalCommID, MsgREQ, RejNoResources, nil)
		return
	}
	c := &Conn{
		State: StateREQRcvd, RemoteCommID: req.LocalCommID, RemoteQPN: req.LocalQPN,
		RemoteGID: from.GID, RemoteGUID: req.LocalCAGUID, ServiceID: req.ServiceID,
		Transport: req.TransportType, SendPSN: req.StartingPSN, RecvPSN: randomPSN(), PathMTU: req.PathMTU,
		RetryCount: req.RetryCount, RNRRetry: req.RNRRetryCount, ACKTimeout: req.Primary.LocalACKTimeout,
		tid: tid,
	}
	c.LocalCommID = e.newCommID()
	e.byLocal[c.LocalCommID] = c
	e.byRemote[remoteID{c.RemoteGUID, c.RemoteCommID}] = c
	e.halfOpen++
	e.emit(Event{Type: EvRequest, Conn: c, REQ: req})
}

func (e *Engine) handleREP(now time.Time, from ib.MADAddr, rep *REP) {
	c := e.byLocal[rep.RemoteCommID]
	if c == nil || !c.Active {
		e.Stats.Unknown++
		e.sendREJ(from.GID, e.newTID(), 0, rep.LocalCommID, MsgREP, RejInvalidCommID, nil)
		return
	}
	if c.State != StateREQSent {
		e.Stats.Duplicate++
		if c.State == StateEstablished && c.RemoteCommID == rep.LocalCommID {
			e.sendLast(c) // our RTU was lost
		}
		return
	}
	if old := e.byQP[remoteQP{rep.LocalCAGUID, rep.LocalQPN}]; old != nil {
		e.stale(now, old)
		e.sendREJ(c.RemoteGID, c.tid, c.LocalCommID, rep.LocalCommID, MsgREP, RejStaleConnection, nil)
		e.forget(c)
		e.emit(Event{Type: EvTimeout, Conn: c})
		return
	}
	c.State = StateREPRcvd
	c.RemoteCommID, c.RemoteQPN, c.RemoteGUID = rep.LocalCommID, rep.LocalQPN, rep.LocalCAGUID
	c.SendPSN = rep.StartingPSN
	c.RNRRetry = rep.RNRRetryCount
	c.deadline = time.Time{}
	e.byRemote[remoteID{c.RemoteGUID, c.RemoteCommID}] = c
	e.emit(Event{Type: EvReply, Conn: c, REP: rep})
}

func (e *Engine) handleRTU(rtu *RTU) {
	c := e.byLocal[rtu.RemoteCommID]
	if c == nil || c.State != StateREPSent || c.RemoteCommID != rtu.LocalCommID {
		e.Stats.Duplicate++ // a repeated RTU, or one for a connection gone
		return
	}
	e.establish(c)
	c.deadline = time.Time{}
	e.emit(Event{Type: EvEstablished, Conn: c})
}

func (e *Engine) handleREJ(now time.Time, rej *REJ) {
	c := e.byLocal[rej.RemoteCommID]
	if c == nil {
		e.Stats.Unknown++
		return
	}
	switch c.State {
	case StateREQSent, StateREPSent, StateREPRcvd:
		e.forget(c)
		e.emit(Event{Type: EvRejected, Conn: c, REJ: rej})
	case StateEstablished, StateDREQSent:
		// IBA 12.9.7: a REJ naming an established connection (the peer gave
		// up waiting for our RTU, or found the connection stale) ends it:
		// timewait, and the consumer stops the QP.
		if rej.LocalCommID != c.RemoteCommID {
			e.Stats.Unknown++
			return
		}
		e.timewait(now, c)
		e.emit(Event{Type: EvDisconnected, Conn: c, REJ: rej})
	default:
		e.Stats.Duplicate++
	}
}

func (e *Engine) handleMRA(now time.Time, mra *MRA) {
	c := e.byLocal[mra.RemoteCommID]
	if c == nil || (c.State != StateREQSent && c.State != StateREPSent) {
		e.Stats.Unknown++
		return
	}
	// The peer is alive but slow: wait the time it asks for, plus our own
	// response timeout, before sending again.
	c.deadline = now.Add(TimeoutDuration(mra.ServiceTimeout) + c.timeout)
}

func (e *Engine) handleDREQ(now time.Time, from ib.MADAddr, tid uint64, dreq *DREQ) {
	c := e.byLocal[dreq.RemoteCommID]
	if c == nil || c.LocalQPN != dreq.RemoteQPN || c.RemoteCommID != dreq.LocalCommID {
		// Unknown or already forgotten: answer anyway so the peer stops.
		e.Stats.Unknown++
		e.sendDREP(from.GID, tid, dreq.RemoteCommID, dreq.LocalCommID)
		return
	}
	switch c.State {
	case StateEstablished, StateREPSent, StateDREQSent:
		e.sendDREP(c.RemoteGID, tid, c.LocalCommID, c.RemoteCommID)
		e.timewait(now, c)
		e.emit(Event{Type: EvDisconnected, Conn: c})
	case StateTimewait:
		e.Stats.Duplicate++
		e.sendDREP(c.RemoteGID, tid, c.LocalCommID, c.RemoteCommID)
	}
}

func (e *Engine) handleDREP(now time.Time, drep *DREP) {
	c := e.byLocal[drep.RemoteCommID]
	if c == nil || c.State != StateDREQSent {
		e.Stats.Duplicate++
		return
	}
	e.timewait(now, c)
	e.emit(Event{Type: EvDisconnected, Conn: c})
}

// stale applies IBA 12.9.8.3.1 to an established connection whose remote
// QP shows up in a new REQ or REP: the peer must have lost it, so we
// disconnect it (DREQ until answered) and report it gone.
func (e *Engine) stale(now time.Time, old *Conn) {
	e.Stats.Stale++
	e.sendDREQ(now, old)
	e.emit(Event{Type: EvTimeout, Conn: old})
}

func (e *Engine) establish(c *Conn) {
	c.State = StateEstablished
	e.halfOpen--
	e.byQP[remoteQP{c.RemoteGUID, c.RemoteQPN}] = c
}

func (e *Engine) sendDREQ(now time.Time, c *Conn) {
	if c.State == StateREPSent {
		e.halfOpen--
	}
	delete(e.byQP, remoteQP{c.RemoteGUID, c.RemoteQPN})
	dreq := DREQ{LocalCommID: c.LocalCommID, RemoteCommID: c.RemoteCommID, RemoteQPN: c.RemoteQPN}
	c.tid = e.newTID()
	if err := dreq.MarshalMAD(c.last[:], c.tid); err != nil {
		c.lastValid = false
	}
	c.State = StateDREQSent
	e.arm(now, c, TimeoutDuration(e.cfg.ResponseTimeout), int(e.cfg.MaxRetries))
	e.sendLast(c)
}

func (e *Engine) timewait(now time.Time, c *Conn) {
	if c.State == StateREPSent {
		e.halfOpen--
	}
	delete(e.byQP, remoteQP{c.RemoteGUID, c.RemoteQPN})
	c.State = StateTimewait
	c.lastValid = false
	c.deadline = now.Add(e.cfg.Timewait)
}

// forget drops a connection that never got to timewait (rejected, timed
// out while being set up).
func (e *Engine) forget(c *Conn) {
	switch c.State {
	case StateREQSent, StateREQRcvd, StateREPSent, StateREPRcvd:
		e.halfOpen--
	}
	delete(e.byLocal, c.LocalCommID)
	if r := (remoteID{c.RemoteGUID, c.RemoteCommID}); e.byRemote[r] == c {
		delete(e.byRemote, r)
	}
	if q := (remoteQP{c.RemoteGUID, c.RemoteQPN}); e.byQP[q] == c {
		delete(e.byQP, q)
	}
	c.State = StateIdle
	c.deadline = time.Time{}
}

func (e *Engine) arm(now time.Time, c *Conn, timeout time.Duration, retries int) {
	c.timeout, c.maxRetries, c.retries = timeout, retries, 0
	c.deadline = now.Add(timeout)
}

func (e *Engine) sendLast(c *Conn) {
	if c.lastValid {
		e.send(c.RemoteGID, c.last[:])
	}
}

func (e *Engine) sendREJ(to ib.GID, tid uint64, local, remote uint32, rejected MsgType, reason RejectReason, private []byte) {
	rej := REJ{LocalCommID: local, RemoteCommID: remote, MessageRejected: rejected, Reason: reason}
	copy(rej.PrivateData[:], private)
	if rej.MarshalMAD(e.buf[:], tid) == nil {
		e.send(to, e.buf[:])
	}
}

func (e *Engine) sendMRA(c *Conn, what MsgType) {
	mra := MRA{LocalCommID: c.LocalCommID, RemoteCommID: c.RemoteCommID, MessageMRAed: what, ServiceTimeout: e.cfg.ResponseTimeout}
	if mra.MarshalMAD(e.buf[:], c.tid) == nil {
		e.send(c.RemoteGID, e.buf[:])
	}
}

func (e *Engine) sendDREP(to ib.GID, tid uint64, local, remote uint32) {
	drep := DREP{LocalCommID: local, RemoteCommID: remote}
	if drep.MarshalMAD(e.buf[:], tid) == nil {
		e.send(to, e.buf[:])
	}
}

func (e *Engine) send(to ib.GID, mad []byte) {
	e.Stats.Sent++
	if err := e.cfg.Send(ib.MADAddr{GID: to, QPN: ib.QP1, PKey: e.cfg.PKey}, mad); err != nil {
		e.Stats.SendErrors++
	}
}

func (e *Engine) emit(ev Event) {
	if e.cfg.Event != nil {
		e.cfg.Event(ev)
	}
}

// newCommID returns a communication ID that is not 0 and not in use.
func (e *Engine) newCommID() uint32 {
	for {
		e.nextID++
		if e.nextID != 0 && e.byLocal[e.nextID] == nil {
			return e.nextID
		}
	}
}

func (e *Engine) newTID() uint64 {
	e.nextTID++
	return e.nextTID
}
