package cm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
	Comm *Comm
	REQ  *REQ
	REP  *REP
	REJ  *REJ
}

// Comm is one communication, as IBA calls a connection as the CM sees it:
// the state both sides' comm IDs identify, below the IPoIB Connection that
// owns the QP. The consumer reads its fields and keeps its own state in
// Context; the engine owns the rest.
type Comm struct {
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
	// Address is the InfiniBand addressing of the QP's RTR: on the active
	// side the SA's path (ConnectParams.Address), on the passive side the
	// REQ's primary path (passiveAddress). Zero (GID only) on RoCE and
	// softib.
	Address ib.Path
	Context any

	// to is where this exchange's MADs go once it exists, as the kernel's
	// cm_id_priv->av: the same path as Address, to QP1, in the REQ's
	// partition. Answers to a MAD that matches no exchange go to that
	// MAD's source instead (responseTo).
	to ib.MADAddr
	// source is the peer's source as the fabric shows it (source.go),
	// which its setup slot counts against; srcLID the LID its MADs come
	// from on InfiniBand (0 until known), which later MADs must match.
	source sourceKey
	srcLID uint16

	tid uint64
	// last is the last request or reply we sent while it may be sent
	// again (retries, duplicates): a REQ, REP or DREQ. nil once the
	// connection is established or over, so that an established one does
	// not carry a MAD's 256 octets; its RTU is small to build again.
	last       *[MADLen]byte
	retries    int
	maxRetries int
	timeout    time.Duration
	deadline   time.Time // zero: no timer
	// repTimeout and repRetries time our REP on the passive side: the
	// REQ's Local CM Response Timeout and Max CM Retries, never more than
	// our own (a REQ must not make us hold a half-open slot for hours).
	repTimeout uint8
	repRetries uint8
}

// Defaults of EngineConfig.
const (
	// DefaultResponseTimeout and DefaultMaxRetries are what the kernel's
	// ipoib puts in its REQs (ipoib_cm_send_req: 20, about 4.3 s, and 15).
	// The kernel never sends an MRA for ipoib, so a shorter timer of ours
	// would declare a busy kernel peer dead.
	DefaultResponseTimeout = 20
	DefaultMaxRetries      = 15
	// DefaultTimewait is how long a finished connection's QP stays out of
	// use: about 537 ms, twice a packet lifetime of 16 as rdma_cm's RoCE
	// paths have it (the kernel's timewait follows the path, not the CM
	// response timeout).
	DefaultTimewait = 2 * (timerUnit << 16)
	// DefaultHopLimit is the hop limit of our REQs' primary path: a RoCEv2
	// or softib path is routed over IP, as rdma_cm's RoCE routes have it.
	DefaultHopLimit = 64
	// DefaultMaxHalfOpenPerSource bounds the connections one source (a
	// GID on RoCE framing, a LID on InfiniBand: source.go) may have in
	// setup at once: a peer needs one or two, a flood from one place must
	// not take every half-open slot.
	DefaultMaxHalfOpenPerSource = 16
)

// EngineConfig sets the engine's identity and limits.
type EngineConfig struct {
	GID  ib.GID
	GUID uint64
	PKey ib.PKey
	// ResponseTimeout is the CM response timeout code we ask peers to honour
	// and wait for ourselves (default DefaultResponseTimeout).
	ResponseTimeout uint8
	// MaxRetries is how often a REQ, REP or DREQ is sent again (default
	// DefaultMaxRetries).
	MaxRetries uint8
	// Timewait keeps a finished connection's QP out of use (default
	// DefaultTimewait).
	Timewait time.Duration
	// HopLimit of our REQs' primary path (default DefaultHopLimit). As in
	// the kernel's cm_format_req, Subnet Local is set when it is at most 1.
	HopLimit uint8
	// MaxConns bounds connections past setup (established, disconnecting,
	// in timewait), MaxHalfOpen those in setup, MaxHalfOpenPerSource those
	// in setup from one source as the fabric shows it (defaults 4096, 256 and
	// DefaultMaxHalfOpenPerSource). Beyond them a REQ draws REJ "no
	// resources". Connections in setup never count against MaxConns, so
	// REQs that are never completed cannot lock real peers out; at most
	// MaxConns + MaxHalfOpen connections exist.
	MaxConns, MaxHalfOpen, MaxHalfOpenPerSource int
	// LMC is the port's LID mask count (InfiniBand): the low LMC bits of
	// a REQ's remote LID choose which of our LIDs the passive side's
	// packets come from (its source path bits).
	LMC uint8
	// CommIDTag, when not 0, is the top octet of every communication ID
	// the engine chooses: a SharedQP1 shares the port's QP1 between
	// engines and routes replies by it.
	CommIDTag uint8
	// Send transmits one MAD on QP1.
	Send func(to ib.MADAddr, mad []byte) error
	// Event reports to the consumer; it may call back into the engine.
	Event func(Event)
	// Log, when set, gets a rate-limited line naming a source whose REQs
	// are refused because it holds its share of the setup slots.
	Log *slog.Logger
}

// EngineStats counts what the engine did with what it received. Each
// tagged field is a counter under its tag's name; Counters derives the
// list from the struct.
type EngineStats struct {
	Received      uint64 `counter:"mads_in"`
	Sent          uint64 `counter:"mads_out"`
	Retransmitted uint64 `counter:"retransmits"`
	Malformed     uint64 `counter:"malformed"`
	Duplicate     uint64 `counter:"duplicates"`
	// Rejected counts REQs refused without asking the consumer.
	Rejected uint64 `counter:"reqs_refused"`
	// Stale counts connections ended by the IBA stale-connection rule.
	Stale uint64 `counter:"stale"`
	// StaleForeign counts REQs and REPs naming the remote QP of a
	// connection whose peer is at another address: the rule is not applied.
	StaleForeign uint64 `counter:"stale_foreign"`
	// SourceMismatch counts REQs whose claimed port GID or CA GUID is not
	// the MAD's source; they are rejected.
	SourceMismatch uint64 `counter:"req_source_mismatch"`
	// BusySource counts REQs refused because their source already has
	// MaxHalfOpenPerSource connections in setup; Full those refused
	// because MaxConns or MaxHalfOpen is reached.
	BusySource uint64 `counter:"req_busy_source"`
	Full       uint64 `counter:"req_refused_full"`
	SendErrors uint64 `counter:"send_errors"`
	// Unknown counts MADs naming no connection we know (or one whose peer
	// is at another address), by kind; Unsupported the kinds IPoIB does
	// not use (SIDR, LAP, APR).
	Unknown     KindCounts `counter:"unknown_"`
	Unsupported KindCounts `counter:"unsupported_"`
	// RejSent counts the REJs we sent, by reason.
	RejSent ReasonCounts `counter:"rej_sent_"`
}

// Engine runs the CM for one port.
type Engine struct {
	cfg       EngineConfig
	listening map[uint64]bool
	byLocal   map[uint32]*Comm   // every connection we know, by our comm ID
	byRemote  map[remoteID]*Comm // by the peer's comm ID, to spot duplicate REQs
	byQP      map[remoteQP]*Comm // established ones, by the peer's QP: the stale rule
	nextTID   uint64
	halfOpen  int
	// halfOpenFrom counts the half-open connections of each source; it
	// never holds a zero count, so it is no larger than halfOpen.
	halfOpenFrom map[sourceKey]int
	flood        floodLog
	buf          [MADLen]byte
	Stats        EngineStats
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
		cfg.ResponseTimeout = DefaultResponseTimeout
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = DefaultMaxRetries
	}
	if cfg.Timewait == 0 {
		cfg.Timewait = DefaultTimewait
	}
	if cfg.HopLimit == 0 {
		cfg.HopLimit = DefaultHopLimit
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 4096
	}
	if cfg.MaxHalfOpen == 0 {
		cfg.MaxHalfOpen = 256
	}
	if cfg.MaxHalfOpenPerSource == 0 {
		cfg.MaxHalfOpenPerSource = DefaultMaxHalfOpenPerSource
	}
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	return &Engine{
		cfg:          cfg,
		listening:    map[uint64]bool{},
		byLocal:      map[uint32]*Comm{},
		byRemote:     map[remoteID]*Comm{},
		byQP:         map[remoteQP]*Comm{},
		halfOpenFrom: map[sourceKey]int{},
		// A random start, so a restarted node does not reuse the TIDs its
		// peers may still remember.
		nextTID: binary.BigEndian.Uint64(seed[:]),
	}
}

// SetLMC takes the port's LID mask count after the SM changed it (a LID
// change): REQs from now on are answered from the LID their path names
// under it. Exchanges under way keep their address.
func (e *Engine) SetLMC(lmc uint8) { e.cfg.LMC = lmc }

// Listen makes REQs for serviceID reach the consumer.
func (e *Engine) Listen(serviceID uint64) error {
	e.listening[serviceID] = true
	return nil
}

// Conns returns the number of connections in any state.
func (e *Engine) Conns() int { return len(e.byLocal) }

// HalfOpen returns how many of them are being set up (REQ or REP sent or
// received, no RTU yet).
func (e *Engine) HalfOpen() int { return e.halfOpen }

// ConnectParams describe an outgoing REQ.
type ConnectParams struct {
	RemoteGID  ib.GID
	ServiceID  uint64
	LocalQPN   ib.QPN
	Transport  TransportType // TransportRC or TransportUC
	RecvPSN    uint32        // our receive queue's start (the REQ's PSN is the peer's send PSN)
	PathMTU    ib.MTU
	RetryCount uint8
	RNRRetry   uint8
	ACKTimeout uint8
	// Primary, when set, is the REQ's primary path as the SA gave it (an
	// InfiniBand port); nil sends the routed path RoCE and softib use.
	Primary     *Path
	Address     ib.Path // the QP's IB addressing to the peer (see Comm.Address)
	PrivateData []byte
	Context     any
}

// Connect sends a REQ and returns the new connection in REQ-sent.
func (e *Engine) Connect(now time.Time, p ConnectParams) (*Comm, error) {
	if e.full() {
		return nil, ErrTooMany
	}
	c := &Comm{
		Active: true, LocalQPN: p.LocalQPN, RemoteGID: p.RemoteGID,
		ServiceID: p.ServiceID, Transport: p.Transport, RecvPSN: p.RecvPSN & 0xffffff,
		PathMTU: p.PathMTU, RetryCount: p.RetryCount, RNRRetry: p.RNRRetry, ACKTimeout: p.ACKTimeout,
		Address: p.Address, Context: p.Context,
	}
	// The REQ and everything after it go where the QP's packets go: the
	// SA's path on InfiniBand (cm_init_av_by_path), the GID elsewhere.
	c.to = ib.MADAddr{GID: p.RemoteGID, QPN: ib.QP1, PKey: e.cfg.PKey, Path: p.Address}
	c.source = sourceOf(c.to, p.RemoteGID)
	primary := e.primaryPath(p.RemoteGID, p.ACKTimeout)
	if p.Primary != nil {
		primary = *p.Primary
		primary.LocalGID, primary.RemoteGID = e.cfg.GID, p.RemoteGID
	}
	req := REQ{
		ServiceID: p.ServiceID, LocalCAGUID: e.cfg.GUID, LocalQPN: p.LocalQPN,
		RemoteCMResponseTimeout: e.cfg.ResponseTimeout, LocalCMResponseTimeout: e.cfg.ResponseTimeout,
		TransportType: p.Transport, StartingPSN: c.RecvPSN, RetryCount: p.RetryCount,
		PKey: e.cfg.PKey, PathMTU: p.PathMTU, RNRRetryCount: p.RNRRetry,
		MaxCMRetries: e.cfg.MaxRetries & 0xf, SRQ: true,
		Primary: primary,
	}
	copy(req.PrivateData[:], p.PrivateData)
	c.LocalCommID = e.newCommID()
	req.LocalCommID = c.LocalCommID
	c.tid = e.newTID()
	if err := req.MarshalMAD(keepLast(c), c.tid); err != nil {
		dropLast(c)
		return nil, fmt.Errorf("cm: REQ: %w", err)
	}
	e.byLocal[c.LocalCommID] = c
	e.setState(c, StateREQSent)
	e.arm(now, c, TimeoutDuration(e.cfg.ResponseTimeout), int(e.cfg.MaxRetries))
	e.sendLast(c)
	return c, nil
}

// AcceptParams describe the REP answering a REQ.
type AcceptParams struct {
	LocalQPN    ib.QPN
	RecvPSN     uint32 // our receive queue's start, the peer sends with it (0: keep Comm.RecvPSN)
	RNRRetry    uint8  // the RNR retry count the requester's QP should use
	PrivateData []byte
}

// Accept answers a REQ-received connection with a REP. The local QP must
// already accept data: the peer may send before its RTU arrives.
func (e *Engine) Accept(now time.Time, c *Comm, p AcceptParams) error {
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
	if err := rep.MarshalMAD(keepLast(c), c.tid); err != nil {
		dropLast(c)
		return fmt.Errorf("cm: REP: %w", err)
	}
	e.setState(c, StateREPSent)
	e.arm(now, c, TimeoutDuration(c.repTimeout), int(c.repRetries))
	e.sendLast(c)
	return nil
}

// Reject refuses a REQ-received connection and forgets it.
func (e *Engine) Reject(c *Comm, reason RejectReason, private []byte) error {
	if c.State != StateREQRcvd {
		return ErrBadState
	}
	e.sendREJ(c.to, c.tid, c.LocalCommID, c.RemoteCommID, MsgREQ, reason, nil, private)
	e.forget(c)
	return nil
}

// Ready finishes the active side after EvReply: it sends the RTU. The QP
// must be in RTS.
func (e *Engine) Ready(c *Comm) error {
	if c.State != StateREPRcvd {
		return ErrBadState
	}
	if err := e.sendRTU(c); err != nil {
		return err
	}
	e.establish(c)
	c.deadline = time.Time{}
	return nil
}

// sendRTU sends the RTU of the active side, the first time (Ready) and
// again for a duplicate REP: its RTU was lost.
func (e *Engine) sendRTU(c *Comm) error {
	rtu := RTU{LocalCommID: c.LocalCommID, RemoteCommID: c.RemoteCommID}
	if err := rtu.MarshalMAD(e.buf[:], c.tid); err != nil {
		return fmt.Errorf("cm: RTU: %w", err)
	}
	e.send(c.to, e.buf[:])
	return nil
}

// RejectReply refuses a REP (after EvReply) and forgets the connection.
func (e *Engine) RejectReply(c *Comm, reason RejectReason, private []byte) error {
	if c.State != StateREPRcvd {
		return ErrBadState
	}
	e.sendREJ(c.to, c.tid, c.LocalCommID, c.RemoteCommID, MsgREP, reason, nil, private)
	e.forget(c)
	return nil
}

// Disconnect ends a connection: an established one with a DREQ (timewait
// follows the DREP), one still being set up with a REJ. The consumer gets
// EvDisconnected when the DREQ is answered or runs out of retries.
func (e *Engine) Disconnect(now time.Time, c *Comm) {
	switch c.State {
	case StateEstablished, StateREPSent:
		e.sendDREQ(now, c)
	case StateREQSent, StateREPRcvd:
		e.sendREJ(c.to, c.tid, c.LocalCommID, c.RemoteCommID, MsgOther, RejTimeout, nil, nil)
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
		e.handleRTU(m.From, msg)
	case *REJ:
		e.handleREJ(now, m.From, msg)
	case *MRA:
		e.handleMRA(now, m.From, msg)
	case *DREQ:
		e.handleDREQ(now, m.From, h.TransactionID, msg)
	case *DREP:
		e.handleDREP(now, m.From, msg)
	default:
		e.Stats.Unsupported.Add(AttrID(h.AttributeID)) // SIDR, LAP, APR: not used by IPoIB
	}
}

func (e *Engine) handleREQ(now time.Time, from ib.MADAddr, tid uint64, req *REQ) {
	if !reqFromItsSource(from, req) {
		// The REQ claims a port or adapter that did not send it. Tell the
		// sender (REJ 12, our GID in the ARI as the kernel sends it) and
		// believe nothing of it.
		e.Stats.SourceMismatch++
		e.sendREJ(e.responseTo(from), tid, 0, req.LocalCommID, MsgREQ, RejInvalidGID, e.cfg.GID[:], nil)
		return
	}
	// The peer's GID: its MAD's source, or without one (a MAD without a
	// GRH) the REQ's word, which is all there is; its setup slot counts
	// against what the fabric shows (source.go).
	src := from.GID
	if src == (ib.GID{}) {
		src = req.Primary.LocalGID
	}
	source := sourceOf(from, src)
	if c := e.byRemote[remoteID{req.LocalCAGUID, req.LocalCommID}]; c != nil {
		if !fromPeer(from, c) {
			// Another peer's (CA GUID, comm ID): comm IDs are unique per
			// adapter, so the sender claims an adapter it is not.
			e.Stats.SourceMismatch++
			e.sendREJ(e.responseTo(from), tid, 0, req.LocalCommID, MsgREQ, RejInvalidGID, e.cfg.GID[:], nil)
			return
		}
		// A retransmission: answer as before, or tell a slow consumer's
		// peer to wait; in timewait the connection is over: REJ 10 naming
		// both comm IDs, "other" message, as the kernel's
		// cm_dup_req_handler formats it. Its MRA and REJ answer the
		// duplicate where it came from, as the kernel's do; a REP sent
		// again goes where the first one went.
		e.Stats.Duplicate++
		switch c.State {
		case StateREQRcvd:
			e.sendMRA(e.responseTo(from), c, MsgREQ)
		case StateREPSent:
			e.sendLast(c)
		case StateTimewait:
			e.sendREJ(e.responseTo(from), tid, c.LocalCommID, c.RemoteCommID, MsgOther, RejStaleConnection, nil, nil)
		}
		return
	}
	if old := e.byQP[remoteQP{req.LocalCAGUID, req.LocalQPN}]; old != nil {
		if fromPeer(from, old) {
			e.stale(now, old)
		} else {
			// Someone else names the remote QP of a live connection: the
			// connection stays, only its own peer can declare it stale.
			e.Stats.StaleForeign++
		}
		e.refuseREQ(from, tid, req, RejStaleConnection)
		return
	}
	if !e.listening[req.ServiceID] {
		e.refuseREQ(from, tid, req, RejInvalidServiceID)
		return
	}
	if req.TransportType != TransportRC && req.TransportType != TransportUC {
		e.refuseREQ(from, tid, req, RejInvalidTransportType)
		return
	}
	if e.full() {
		e.Stats.Full++
		e.refuseREQ(from, tid, req, RejNoResources)
		return
	}
	if e.halfOpenFrom[source] >= e.cfg.MaxHalfOpenPerSource {
		e.Stats.BusySource++
		e.flood.refuse(e.cfg.Log, now, source, e.cfg.MaxHalfOpenPerSource)
		e.refuseREQ(from, tid, req, RejNoResources)
		return
	}
	c := &Comm{
		RemoteCommID: req.LocalCommID, RemoteQPN: req.LocalQPN,
		RemoteGID: src, RemoteGUID: req.LocalCAGUID, ServiceID: req.ServiceID,
		Transport: req.TransportType, SendPSN: req.StartingPSN, RecvPSN: RandomPSN(), PathMTU: req.PathMTU,
		RetryCount: req.RetryCount, RNRRetry: req.RNRRetryCount, ACKTimeout: req.Primary.LocalACKTimeout,
		Address:    e.passiveAddress(from, &req.Primary),
		tid:        tid,
		repTimeout: min(max(req.LocalCMResponseTimeout, minREPTimeout), e.cfg.ResponseTimeout),
		repRetries: min(req.MaxCMRetries, e.cfg.MaxRetries),
		source:     source,
	}
	if from.LIDRouted() {
		c.srcLID = from.Path.DLID
	}
	// From the match on, REP and every later MAD go by the REQ's primary
	// path in the REQ's partition, as the QP does (cm_init_av_by_path).
	c.to = ib.MADAddr{GID: src, QPN: ib.QP1, PKey: req.PKey, Path: c.Address}
	if !c.to.PKey.Valid() {
		c.to.PKey = e.cfg.PKey
	}
	c.LocalCommID = e.newCommID()
	e.byLocal[c.LocalCommID] = c
	e.byRemote[remoteID{c.RemoteGUID, c.RemoteCommID}] = c
	e.setState(c, StateREQRcvd)
	e.emit(Event{Type: EvRequest, Comm: c, REQ: req})
}

// refuseREQ answers a REQ the consumer never sees with a REJ for reason;
// no connection exists, so the REJ names only the peer's comm ID and goes
// where the REQ came from (the kernel's cm_issue_rej).
func (e *Engine) refuseREQ(from ib.MADAddr, tid uint64, req *REQ, reason RejectReason) {
	e.Stats.Rejected++
	e.sendREJ(e.responseTo(from), tid, 0, req.LocalCommID, MsgREQ, reason, nil, nil)
}

// minREPTimeout is the shortest REP timeout code a REQ can ask for (about
// 16 ms): shorter ones would have us give up on a REP in microseconds.
const minREPTimeout = 12

// reqFromItsSource checks a REQ's claims against the MAD's source: its
// primary local port GID must be the source GID, and a CA GUID in
// softib's IPv4 form (0x0000ffff then the IPv4 address, the low half of an
// IPv4-mapped GID) must be the source's own. Other GUIDs cannot be
// derived from an address (softib on IPv6 uses the interface ID, adapters
// their node GUID) and are taken as they come. A MAD without a source GID
// (InfiniBand without a GRH) has nothing to compare: its source LID may be
// another of the peer's LIDs than the REQ's Primary Local LID (its LMC),
// and a GID's LID is the SA's to say; the source LID is what identifies
// the peer from then on (fromPeer) and what its slots count against.
func reqFromItsSource(from ib.MADAddr, req *REQ) bool {
	if from.GID == (ib.GID{}) {
		return true
	}
	if req.Primary.LocalGID != from.GID {
		return false
	}
	if req.LocalCAGUID>>32 == 0x0000ffff {
		return from.GID.IsIPv4Mapped() && req.LocalCAGUID == binary.BigEndian.Uint64(from.GID[8:])
	}
	return true
}

func (e *Engine) handleREP(now time.Time, from ib.MADAddr, rep *REP) {
	c := e.byLocal[rep.RemoteCommID]
	if c == nil || !c.Active || !fromPeer(from, c) {
		e.Stats.Unknown.Add(AttrREP)
		e.sendREJ(e.responseTo(from), e.newTID(), rep.RemoteCommID, rep.LocalCommID, MsgREP, RejInvalidCommID, nil, nil) // IDs swapped, as cm_issue_rej does
		return
	}
	if c.State != StateREQSent {
		e.Stats.Duplicate++
		if c.State == StateEstablished && c.RemoteCommID == rep.LocalCommID {
			_ = e.sendRTU(c) // our RTU was lost
		}
		return
	}
	if old := e.byQP[remoteQP{rep.LocalCAGUID, rep.LocalQPN}]; old != nil {
		if fromPeer(from, old) {
			e.stale(now, old)
		} else {
			e.Stats.StaleForeign++
		}
		e.sendREJ(e.responseTo(from), c.tid, c.LocalCommID, rep.LocalCommID, MsgREP, RejStaleConnection, nil, nil)
		e.forget(c)
		e.emit(Event{Type: EvTimeout, Comm: c})
		return
	}
	e.setState(c, StateREPRcvd)
	if from.LIDRouted() && c.srcLID == 0 {
		c.srcLID = from.Path.DLID // the peer's answers come from here on
	}
	c.RemoteCommID, c.RemoteQPN, c.RemoteGUID = rep.LocalCommID, rep.LocalQPN, rep.LocalCAGUID
	c.SendPSN = rep.StartingPSN
	c.RNRRetry = rep.RNRRetryCount
	c.deadline = time.Time{}
	e.byRemote[remoteID{c.RemoteGUID, c.RemoteCommID}] = c
	e.emit(Event{Type: EvReply, Comm: c, REP: rep})
}

func (e *Engine) handleRTU(from ib.MADAddr, rtu *RTU) {
	c := e.byLocal[rtu.RemoteCommID]
	if c == nil || !fromPeer(from, c) || c.RemoteCommID != rtu.LocalCommID {
		e.Stats.Unknown.Add(AttrRTU)
		return
	}
	if c.State != StateREPSent {
		e.Stats.Duplicate++ // a repeated RTU
		return
	}
	e.establish(c)
	c.deadline = time.Time{}
	e.emit(Event{Type: EvEstablished, Comm: c})
}

// rejected finds the connection a REJ names, as the kernel's
// cm_acquire_rejected_id does: a REJ 4 (Timeout) by the sender's CA GUID
// in its ARI and its Local Comm ID (the sender may not know ours); a REJ
// of our REQ by our comm ID alone; any other by both comm IDs.
func (e *Engine) rejected(rej *REJ) *Comm {
	if rej.Reason == RejTimeout && rej.RejectInfoLength >= 8 {
		guid := binary.BigEndian.Uint64(rej.ARI[:8])
		if c := e.byRemote[remoteID{guid, rej.LocalCommID}]; c != nil {
			return c
		}
	}
	c := e.byLocal[rej.RemoteCommID]
	switch {
	case c == nil:
		return nil
	case rej.MessageRejected == MsgREQ:
		if !c.Active || c.State != StateREQSent {
			return nil
		}
	case c.RemoteCommID != rej.LocalCommID:
		return nil
	}
	return c
}

func (e *Engine) handleREJ(now time.Time, from ib.MADAddr, rej *REJ) {
	c := e.rejected(rej)
	if c == nil || !fromPeer(from, c) {
		e.Stats.Unknown.Add(AttrREJ)
		return
	}
	switch c.State {
	case StateREQSent, StateREQRcvd, StateREPSent, StateREPRcvd:
		e.forget(c)
		e.emit(Event{Type: EvRejected, Comm: c, REJ: rej})
	case StateEstablished, StateDREQSent:
		// IBA 12.9.7: a REJ naming an established connection (the peer gave
		// up waiting for our RTU, or found the connection stale) ends it:
		// timewait, and the consumer stops the QP.
		e.timewait(now, c)
		e.emit(Event{Type: EvDisconnected, Comm: c, REJ: rej})
	default:
		e.Stats.Duplicate++
	}
}

func (e *Engine) handleMRA(now time.Time, from ib.MADAddr, mra *MRA) {
	c := e.byLocal[mra.RemoteCommID]
	if c == nil || !fromPeer(from, c) {
		e.Stats.Unknown.Add(AttrMRA)
		return
	}
	if c.State != StateREQSent && c.State != StateREPSent {
		e.Stats.Duplicate++
		return
	}
	// The peer is alive but slow: wait the time it asks for, plus our own
	// response timeout, before sending again.
	c.deadline = now.Add(TimeoutDuration(mra.ServiceTimeout) + c.timeout)
}

func (e *Engine) handleDREQ(now time.Time, from ib.MADAddr, tid uint64, dreq *DREQ) {
	c := e.byLocal[dreq.RemoteCommID]
	if c == nil || !fromPeer(from, c) || c.LocalQPN != dreq.RemoteQPN || c.RemoteCommID != dreq.LocalCommID {
		// Unknown or already forgotten: answer anyway so the peer stops.
		e.Stats.Unknown.Add(AttrDREQ)
		e.sendDREP(e.responseTo(from), tid, dreq.RemoteCommID, dreq.LocalCommID)
		return
	}
	switch c.State {
	case StateEstablished, StateREPSent, StateDREQSent:
		e.sendDREP(c.to, tid, c.LocalCommID, c.RemoteCommID)
		e.timewait(now, c)
		e.emit(Event{Type: EvDisconnected, Comm: c})
	case StateTimewait:
		// The kernel answers a DREQ in timewait where it came from.
		e.Stats.Duplicate++
		e.sendDREP(e.responseTo(from), tid, c.LocalCommID, c.RemoteCommID)
	}
}

func (e *Engine) handleDREP(now time.Time, from ib.MADAddr, drep *DREP) {
	c := e.byLocal[drep.RemoteCommID]
	if c == nil || !fromPeer(from, c) || c.RemoteCommID != drep.LocalCommID {
		e.Stats.Unknown.Add(AttrDREP)
		return
	}
	if c.State != StateDREQSent {
		e.Stats.Duplicate++
		return
	}
	e.timewait(now, c)
	e.emit(Event{Type: EvDisconnected, Comm: c})
}

// stale applies IBA 12.9.8.3.1 to an established connection whose remote
// QP shows up in a new REQ or REP: the peer must have lost it, so we
// disconnect it (DREQ until answered) and report it gone.
func (e *Engine) stale(now time.Time, old *Comm) {
	e.Stats.Stale++
	e.sendDREQ(now, old)
	e.emit(Event{Type: EvTimeout, Comm: old})
}

func (e *Engine) establish(c *Comm) {
	dropLast(c)
	e.setState(c, StateEstablished)
	e.byQP[remoteQP{c.RemoteGUID, c.RemoteQPN}] = c
}

func (e *Engine) sendDREQ(now time.Time, c *Comm) {
	delete(e.byQP, remoteQP{c.RemoteGUID, c.RemoteQPN})
	dreq := DREQ{LocalCommID: c.LocalCommID, RemoteCommID: c.RemoteCommID, RemoteQPN: c.RemoteQPN}
	c.tid = e.newTID()
	if err := dreq.MarshalMAD(keepLast(c), c.tid); err != nil {
		dropLast(c)
	}
	e.setState(c, StateDREQSent)
	e.arm(now, c, TimeoutDuration(e.cfg.ResponseTimeout), int(e.cfg.MaxRetries))
	e.sendLast(c)
}

func (e *Engine) timewait(now time.Time, c *Comm) {
	delete(e.byQP, remoteQP{c.RemoteGUID, c.RemoteQPN})
	e.setState(c, StateTimewait)
	dropLast(c)
	c.deadline = now.Add(e.cfg.Timewait)
}

// forget drops a connection that never got to timewait (rejected, timed
// out while being set up).
func (e *Engine) forget(c *Comm) {
	dropLast(c)
	delete(e.byLocal, c.LocalCommID)
	if r := (remoteID{c.RemoteGUID, c.RemoteCommID}); e.byRemote[r] == c {
		delete(e.byRemote, r)
	}
	if q := (remoteQP{c.RemoteGUID, c.RemoteQPN}); e.byQP[q] == c {
		delete(e.byQP, q)
	}
	e.setState(c, StateIdle)
	c.deadline = time.Time{}
}

// halfOpen reports whether s is a state of connection setup.
func halfOpen(s State) bool {
	switch s {
	case StateREQSent, StateREQRcvd, StateREPSent, StateREPRcvd:
		return true
	}
	return false
}

// setState moves c to s, keeping the half-open counts.
func (e *Engine) setState(c *Comm, s State) {
	was, is := halfOpen(c.State), halfOpen(s)
	c.State = s
	switch {
	case is && !was:
		e.halfOpen++
		e.halfOpenFrom[c.source]++
	case was && !is:
		e.halfOpen--
		if n := e.halfOpenFrom[c.source] - 1; n > 0 {
			e.halfOpenFrom[c.source] = n
		} else {
			delete(e.halfOpenFrom, c.source)
		}
	}
}

// full reports whether a new connection would exceed MaxConns (those past
// setup) or MaxHalfOpen.
func (e *Engine) full() bool {
	return len(e.byLocal)-e.halfOpen >= e.cfg.MaxConns || e.halfOpen >= e.cfg.MaxHalfOpen
}

// primaryPath is the primary path of our REQs, as the kernel's
// cm_format_req fills it for a path with our hop limit.
func (e *Engine) primaryPath(remote ib.GID, ackTimeout uint8) Path {
	p := Path{LocalGID: e.cfg.GID, RemoteGID: remote, HopLimit: e.cfg.HopLimit,
		SubnetLocal: e.cfg.HopLimit <= 1, LocalACKTimeout: ackTimeout}
	// A routed path names no LIDs: the permissive LID, and the receiver
	// takes the route from the packet. (A subnet-local path would carry
	// the ports' LIDs, which a RoCE or softib port does not have either.)
	p.LocalLID, p.RemoteLID = 0xffff, 0xffff
	return p
}

// passiveAddress is how the passive side reaches the peer, from the REQ's
// primary path p as the kernel's cm_req_handler builds it: the peer's LID
// is the path's local LID with the path's SL, our source path bits the
// low LMC bits of its remote LID. A routed path (not Subnet Local) that
// names the permissive LID takes the received MAD's source LID and SL
// instead, and our LID bits the MAD was sent to (cm_process_routed_req):
// the route back is the one the REQ came by. A GRH goes with it only
// when the REQ came with one (the kernel sets the path's hop limit from
// the received GRH, ib_init_ah_attr_from_path adds a GRH for a hop limit
// above 0); its flow label and traffic class are the path's. A path that
// names no unicast LID (RoCE, softib: routed REQs whose MADs came with no
// source LID) gives the zero ib.Path: the GID alone.
func (e *Engine) passiveAddress(from ib.MADAddr, p *Path) ib.Path {
	lid, sl, ours := p.LocalLID, p.SL, p.RemoteLID
	bitsFromMAD := false
	if !p.SubnetLocal && from.LIDRouted() {
		if lid == permissiveLID {
			lid, sl = from.Path.DLID, from.Path.SL
		}
		if ours == permissiveLID {
			bitsFromMAD = true
		}
	}
	if lid == 0 || lid >= 0xc000 {
		return ib.Path{}
	}
	a := ib.Path{DLID: lid, SL: sl, StaticRate: p.PacketRate,
		SrcPathBits: uint8(ours & (1<<min(e.cfg.LMC, 7) - 1))}
	if bitsFromMAD {
		a.SrcPathBits = from.Path.SrcPathBits
	}
	if from.Path.GRH {
		a.GRH, a.HopLimit, a.TrafficClass, a.FlowLabel = true, from.Path.HopLimit, p.TrafficClass, p.FlowLabel
		if a.HopLimit == 0 {
			a.HopLimit = 0xff // what the kernel's response address carries on InfiniBand
		}
	}
	return a
}

// permissiveLID names no port: a routed REQ's LIDs, which the receiver
// replaces by the route the REQ came by.
const permissiveLID = 0xffff

// responseTo is where an answer to a MAD that matches no exchange of ours
// goes (REJ and DREP for the unknown, MRA and REJ for duplicates): back
// the way it came, as the kernel answers from a work completion
// (cm_alloc_response_msg): the source LID, SL and our LID's bits, a GRH
// only if the MAD had one, its P_Key.
func (e *Engine) responseTo(from ib.MADAddr) ib.MADAddr {
	to := from
	if to.QPN == 0 {
		to.QPN = ib.QP1
	}
	if to.PKey == 0 {
		to.PKey = e.cfg.PKey
	}
	return to
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

// sendREJ sends a REJ with the given ARI; a REJ 4 (Timeout) always carries
// our CA GUID there, which is how the kernel finds the connection it ends
// (cm_acquire_rejected_id ignores a REJ 4 without it).
func (e *Engine) sendREJ(to ib.MADAddr, tid uint64, local, remote uint32, rejected MsgType, reason RejectReason, ari, private []byte) {
	rej := REJ{LocalCommID: local, RemoteCommID: remote, MessageRejected: rejected, Reason: reason}
	if reason == RejTimeout {
		var guid [8]byte
		binary.BigEndian.PutUint64(guid[:], e.cfg.GUID)
		ari = guid[:]
	}
	rej.RejectInfoLength = uint8(copy(rej.ARI[:], ari))
	copy(rej.PrivateData[:], private)
	if rej.MarshalMAD(e.buf[:], tid) == nil {
		e.Stats.RejSent.Add(reason)
		e.send(to, e.buf[:])
	}
}

func (e *Engine) sendMRA(to ib.MADAddr, c *Comm, what MsgType) {
	mra := MRA{LocalCommID: c.LocalCommID, RemoteCommID: c.RemoteCommID, MessageMRAed: what, ServiceTimeout: e.cfg.ResponseTimeout}
	if mra.MarshalMAD(e.buf[:], c.tid) == nil {
		e.send(to, e.buf[:])
	}
}

func (e *Engine) sendDREP(to ib.MADAddr, tid uint64, local, remote uint32) {
	drep := DREP{LocalCommID: local, RemoteCommID: remote}
	if drep.MarshalMAD(e.buf[:], tid) == nil {
		e.send(to, e.buf[:])
	}
}

func (e *Engine) send(to ib.MADAddr, mad []byte) {
	e.Stats.Sent++
	if err := e.cfg.Send(to, mad); err != nil {
		e.Stats.SendErrors++
	}
}

func (e *Engine) emit(ev Event) {
	if e.cfg.Event != nil {
		e.cfg.Event(ev)
	}
}

// newCommID returns a random communication ID that is not 0 and not in
// use: a peer (or a host that connected once) must not be able to predict
// the IDs of other connections, which REJs and DREQs name.
func (e *Engine) newCommID() uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		id := binary.BigEndian.Uint32(b[:])
		if e.cfg.CommIDTag != 0 {
			id = id&0x00ffffff | uint32(e.cfg.CommIDTag)<<24
		}
		if id != 0 && e.byLocal[id] == nil {
			return id
		}
	}
}

func (e *Engine) newTID() uint64 {
	e.nextTID++
	return e.nextTID
}

// RandomPSN returns a starting packet sequence number from crypto/rand:
// an off-path host must not be able to guess the PSNs of a connection.
// The passive side's Engine chooses its own; a consumer passes one in
// ConnectParams.RecvPSN.
func RandomPSN() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:]) & 0xffffff
}
