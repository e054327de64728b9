package cm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"log/slog"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// This file is the core of the CM protocol engine of IBA chapter 12 for
// one port: the active and passive connection state machines,
// retransmission, duplicate handling, timewait and the stale-connection
// rule. It is a plain state machine: its owner feeds it received MADs and
// the time, and it answers through the Send and Event callbacks. It never
// starts a goroutine or reads a clock, so tests drive it deterministically.
//
// This file holds the engine itself: its configuration, states, events and
// connections, the dispatch of received MADs, and the bookkeeping every
// exchange shares (half-open counts, comm IDs, sending). The exchanges have
// files of their own: engine_setup.go sets connections up (REQ, MRA, REP,
// RTU, and the stale-connection rule a REQ or REP may set off),
// engine_teardown.go ends them (DREQ, DREP, REJ, timewait), and
// engine_timers.go runs the retries and timeouts.

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
