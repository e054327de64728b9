package ipoibcm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
)

// This file is the IPoIB connection manager (RFC 4755) above the engine:
// when to connect, what to accept, which connection carries sends, and when
// a connection is stale. Like the engine it is driven by one goroutine.

// Policy chooses which connections carry our sends.
type Policy uint8

// Sending policies.
const (
	// PolicyLinux, the default, sends only on connections we opened and
	// receives on all, as the kernel ipoib driver expects; REQs are never
	// refused for crossing.
	PolicyLinux Policy = iota
	// PolicyRFC sends on connections either side opened, but on one the
	// peer opened only when its REQ carries ipoibd's mark
	// (cm.PrivateData.BothWays): the kernel receives on the connections
	// it accepted only. Crossing REQs (both sides' REQs outstanding at
	// once) are resolved by the RFC 4755 rule. A REQ arriving once ours
	// was answered is accepted as a second connection: refusing it would
	// lock out a peer that never applies the rule (the kernel), and
	// replacing ours would undo what the peer just accepted.
	PolicyRFC
)

// ParsePolicy reads "rfc" or "linux".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "rfc":
		return PolicyRFC, nil
	case "linux":
		return PolicyLinux, nil
	}
	return 0, fmt.Errorf("ipoibcm: policy %q: want rfc or linux", s)
}

func (p Policy) String() string {
	if p == PolicyLinux {
		return "linux"
	}
	return "rfc"
}

// QPFactory makes the connected QPs (in Reset, on the interface's SRQ and
// CQs); the ipoib layer implements it over its device.
type QPFactory interface {
	CreateQP(t ib.QPType) (ib.QP, error)
}

// Connection is one IPoIB connection to a peer.
type Connection struct {
	Peer     ib.LinkAddr // the peer's link address (flags: the transport in use)
	QP       ib.QP
	MTU      int  // largest IP packet: the smaller receive MTU minus 4
	Outgoing bool // we sent the REQ
	Since    time.Time
	// Established is when the handshake completed (zero before); PathMTU
	// the IB path MTU the QP was brought up with (0 before).
	Established time.Time
	PathMTU     ib.MTU
	// Traffic is what the datapath carried on the connection; the
	// manager reads it to find idle connections.
	Traffic Traffic

	comm     *cm.Comm
	sendable bool
	up       bool
	// bothWays: the peer opened it and marked its REQ as ipoibd's
	// (cm.PrivateData.BothWays): it receives on it, so rfc sends on it.
	bothWays bool
	idleSeen uint64
	idleAt   time.Time
}

// Traffic counts the IP packets and octets (IPoIB header not included) a
// connection carried. The TUN readers add to Tx and the receive goroutine
// to Rx at once, so every field is atomic, and each direction has a cache
// line of its own.
type Traffic struct {
	TxPackets, TxBytes atomic.Uint64
	_                  [48]byte
	RxPackets, RxBytes atomic.Uint64
	_                  [48]byte
}

// Packets is the packets both ways.
func (t *Traffic) Packets() uint64 { return t.TxPackets.Load() + t.RxPackets.Load() }

// State returns the CM state of the connection.
func (c *Connection) State() cm.State { return c.comm.State }

// Sendable reports whether the policy lets this connection carry our sends.
func (c *Connection) Sendable() bool { return c.sendable }

// ManagerConfig configures the IPoIB connection manager.
type ManagerConfig struct {
	// Service makes the connection service, given the function its events
	// go to: ipoibd's own, the Engine on QP1 (cm.NewEngineService), or
	// the kernel's CM through librdmacm (package rdmacm).
	Service    func(events func(cm.Event)) (cm.Service, error)
	PKey       ib.PKey     // the partition connected QPs join
	Local      ib.LinkAddr // our link address: flags, UD QPN, GID
	Policy     Policy
	UC         bool   // prefer UC over RC
	ReceiveMTU uint32 // advertised in private data (default LinuxReceiveMTU)
	PathMTU    ib.MTU
	QPs        QPFactory
	// QPCounters, when the device can name its QPs' counters before
	// making one (ib.Caps.QPCounters), has them in ConnCounters from the
	// start; nil: each name appears with the first connection.
	QPCounters ib.QPCounterNamer
	// IdleTimeout tears down connections without traffic (0: never).
	IdleTimeout time.Duration
	// SharedGIDs says the partition's ports may carry several interfaces
	// (pods' P_Key children): a new UD QPN at a known GID is then another
	// interface, not a restarted node, and the restart rule
	// (peerRestarted) is off.
	SharedGIDs bool
	// Up is called when a connection may carry sends to its peer; Down when
	// it must no longer (the reason is for logs and counters).
	Up   func(c *Connection)
	Down func(c *Connection, reason string)
	// Refused is told when a connection attempt to peer failed (rejected,
	// timed out): the neighbor should be resolved again.
	Refused func(peer ib.LinkAddr, reason string)
	// PathTo, on an InfiniBand port, gives the SA's path to a peer's GID:
	// our REQs carry it and our QPs use its LIDs, SL and rate. Nil on RoCE
	// and softib, where REQs carry the routed path.
	PathTo func(gid ib.GID) (IBPath, bool)
}

// IBPath is one peer's path on an InfiniBand subnet, from the SA's
// PathRecord (package sapath makes it).
type IBPath struct {
	REQ     cm.Path // the REQ's primary path
	Address ib.Path // the QP's addressing to the peer
	MTU     ib.MTU
}

// ErrNoPath: PathTo knows no path to the peer yet; the caller asks the SA
// and connects once it answered.
var ErrNoPath = errors.New("ipoibcm: no path record for the peer yet")

// ManagerStats counts the manager's decisions. Each tagged field is a
// counter under its tag's name (see Counters).
type ManagerStats struct {
	Connects    uint64 `counter:"connects"`
	Accepted    uint64 `counter:"accepted"`
	Established uint64 `counter:"established"`
	// CrossingAccepted counts REQs that came while a REQ of ours to the
	// same peer was unanswered, accepted: every one under the linux
	// policy, the smaller link address's under rfc. CrossingRejected
	// counts those the larger link address rejected (rfc).
	CrossingAccepted uint64 `counter:"crossing_accepted"`
	CrossingRejected uint64 `counter:"crossing_rejected"`
	// Rejected counts REJs received for our REQs and REPs.
	Rejected     uint64 `counter:"rejected"`
	TimedOut     uint64 `counter:"timed_out"`
	Disconnected uint64 `counter:"disconnected"`
	// PeerRestarts counts peers found restarted (a new UD QPN at a known
	// GID); only a completed handshake with the new one proves it.
	PeerRestarts uint64 `counter:"peer_restarts"`
	IdleReaped   uint64 `counter:"idle_reaped"`
	SendFails    uint64 `counter:"send_failures"`
	// RNRFailovers counts connections made again at once because the
	// peer's receive queue ran dry (RNR retries exceeded: sendRNRRetry).
	RNRFailovers uint64 `counter:"rnr_failovers"`
	QPErrors     uint64 `counter:"qp_errors"`
}

// Manager is the IPoIB connection manager of one interface.
type Manager struct {
	cfg   ManagerConfig
	svc   cm.Service
	conns map[ib.LinkAddr][]*Connection // by peer, flags zeroed
	now   time.Time
	Stats ManagerStats
	// gone holds the QP counters of removed connections, so the sums
	// ConnCounters reports never go backwards when a peer leaves; it
	// starts with the names the QP factory gives (ib.QPCounterNamer).
	gone      map[string]uint64
	goneNames []string // the factory's order, then first-seen
	// byQPN is every connection by its local QPN, for the datapath's
	// receive side (ByQPN); the manager's goroutine changes it under
	// qpnMu, in O(1) per connection however many there are.
	qpnMu sync.RWMutex
	byQPN map[ib.QPN]*Connection
}

// NewManager makes a manager listening on the service ID of our UD QPN.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.ReceiveMTU == 0 {
		cfg.ReceiveMTU = cm.LinuxReceiveMTU
	}
	m := &Manager{cfg: cfg, conns: map[ib.LinkAddr][]*Connection{}, gone: map[string]uint64{}, byQPN: map[ib.QPN]*Connection{}}
	// Every QP counter is in ConnCounters from the start, at 0, when the
	// QPs' maker can name them: no key appears with the first connection.
	if cfg.QPCounters != nil {
		for _, name := range cfg.QPCounters.QPCounterNames() {
			if _, dup := m.gone[name]; !dup {
				m.gone[name] = 0
				m.goneNames = append(m.goneNames, name)
			}
		}
	}
	if cfg.Service == nil {
		return nil, errors.New("ipoibcm: the manager needs a connection service")
	}
	svc, err := cfg.Service(m.event)
	if err != nil {
		return nil, err
	}
	m.svc = svc
	if err := m.svc.Listen(cm.IPoIBServiceID(cfg.Local.QPN)); err != nil {
		_ = m.svc.Close()
		return nil, fmt.Errorf("ipoibcm: listening on the service ID of UD QPN %v: %w", cfg.Local.QPN, err)
	}
	return m, nil
}

// Service returns the connection service.
func (m *Manager) Service() cm.Service { return m.svc }

// Counters returns the manager's counters followed by its service's, under
// the names the daemon shows with a "cm_" prefix.
func (m *Manager) Counters() []ib.Counter {
	return append(cm.StatCounters(&m.Stats), m.svc.Counters()...)
}

func peerKey(a ib.LinkAddr) ib.LinkAddr { a.Flags = 0; return a }

// Connections returns every connection, for display.
func (m *Manager) Connections() []*Connection {
	var all []*Connection
	for _, cs := range m.conns {
		all = append(all, cs...)
	}
	return all
}

// ByQPN returns the connection whose QP is qpn, or nil. Any goroutine may
// call it: the datapath's receive side does, per message, to count it.
func (m *Manager) ByQPN(qpn ib.QPN) *Connection {
	m.qpnMu.RLock()
	c := m.byQPN[qpn]
	m.qpnMu.RUnlock()
	return c
}

// reindex adds c to ByQPN's map (add) or removes it.
func (m *Manager) reindex(c *Connection, add bool) {
	m.qpnMu.Lock()
	defer m.qpnMu.Unlock()
	if add {
		m.byQPN[c.QP.Num()] = c
	} else if m.byQPN[c.QP.Num()] == c {
		delete(m.byQPN, c.QP.Num())
	}
}

// RemoteQPN returns the peer's QPN of the connection (0 before the CM
// learned it).
func (c *Connection) RemoteQPN() ib.QPN {
	if c.comm == nil {
		return 0
	}
	return c.comm.RemoteQPN
}

// fold adds a leaving connection's QP counters to the totals of gone ones.
func (m *Manager) fold(c *Connection) {
	for _, x := range c.QP.Counters() {
		if _, ok := m.gone[x.Name]; !ok {
			m.goneNames = append(m.goneNames, x.Name)
		}
		m.gone[x.Name] += x.Value
	}
}

// ConnCounters returns the QP counters summed over every connection, the
// live ones and those gone, so that no total goes backwards.
func (m *Manager) ConnCounters() []ib.Counter {
	sums := map[string]uint64{}
	names := slices.Clone(m.goneNames)
	for n, v := range m.gone {
		sums[n] = v
	}
	for _, cs := range m.conns {
		for _, c := range cs {
			for _, x := range c.QP.Counters() {
				if _, ok := sums[x.Name]; !ok {
					names = append(names, x.Name)
				}
				sums[x.Name] += x.Value
			}
		}
	}
	out := make([]ib.Counter, len(names))
	for k, n := range names {
		out[k] = ib.Counter{Name: n, Value: sums[n]}
	}
	return out
}

// Connecting reports whether a connection to peer is being set up.
func (m *Manager) Connecting(peer ib.LinkAddr) bool {
	for _, c := range m.conns[peerKey(peer)] {
		switch c.comm.State {
		case cm.StateREQSent, cm.StateREQRcvd, cm.StateREPSent, cm.StateREPRcvd:
			return true
		}
	}
	return false
}

// SendConnection returns the connection that carries our sends to peer, or
// nil.
func (m *Manager) SendConnection(peer ib.LinkAddr) *Connection {
	for _, c := range m.conns[peerKey(peer)] {
		if c.sendable && c.up {
			return c
		}
	}
	return nil
}

// transportFor picks RC or UC for a peer from its link-address flags and
// our preference; ok is false when we share no connected mode.
func (m *Manager) transportFor(peer ib.LinkAddr) (cm.TransportType, bool) {
	rc, uc := peer.Flags&ib.FlagRC != 0, peer.Flags&ib.FlagUC != 0
	switch {
	case m.cfg.UC && uc:
		return cm.TransportUC, true
	case rc:
		return cm.TransportRC, true
	case uc:
		return cm.TransportUC, true
	}
	return 0, false
}

// Connect opens a connection to peer unless one that can carry our sends
// exists or is being set up. It reports whether peer can be connected at
// all (a peer without RC/UC flags stays on UD).
func (m *Manager) Connect(now time.Time, peer ib.LinkAddr) (bool, error) {
	m.now = now
	tr, ok := m.transportFor(peer)
	if !ok {
		return false, nil
	}
	for _, c := range m.conns[peerKey(peer)] {
		if m.carriesSends(c) && c.comm.State != cm.StateTimewait && c.comm.State != cm.StateDREQSent {
			return true, nil
		}
	}
	var path IBPath
	if m.cfg.PathTo != nil {
		if path, ok = m.cfg.PathTo(peer.GID); !ok {
			return true, ErrNoPath
		}
	}
	qp, err := m.newQP(tr)
	if err != nil {
		return true, err
	}
	c := &Connection{Peer: peer, QP: qp, Outgoing: true, Since: now}
	c.Peer.Flags = flagFor(tr)
	p := cm.ConnectParams{
		RemoteGID: peer.GID, ServiceID: cm.IPoIBServiceID(peer.QPN), LocalQPN: qp.Num(),
		Transport: tr, RecvPSN: cm.RandomPSN(), PathMTU: m.cfg.PathMTU,
		RetryCount: 7, RNRRetry: 7, ACKTimeout: ackTimeout,
		PrivateData: m.privateData(), Context: c,
	}
	if m.cfg.PathTo != nil {
		p.Primary, p.Address, p.ACKTimeout = &path.REQ, path.Address, path.REQ.LocalACKTimeout
		p.PathMTU = min(p.PathMTU, path.MTU)
	}
	cc, err := m.svc.Connect(now, p)
	if err != nil {
		_ = qp.Close()
		return true, err
	}
	c.comm = cc
	m.add(c)
	m.Stats.Connects++
	return true, nil
}

// ackTimeout is the local ACK timeout code of our RC QPs: about 67 ms,
// short against TCP's minimum RTO as RFC 4755 advises.
const ackTimeout = 14

func flagFor(tr cm.TransportType) ib.LinkFlags {
	if tr == cm.TransportUC {
		return ib.FlagUC
	}
	return ib.FlagRC
}

// Disconnect tears down every connection to peer (a neighbor that expired
// or changed its link address).
func (m *Manager) Disconnect(now time.Time, peer ib.LinkAddr, reason string) {
	m.now = now
	for _, c := range append([]*Connection(nil), m.conns[peerKey(peer)]...) {
		m.teardown(c, reason)
	}
}

// SendFailed reports an error completion on a connection's QP (status is
// the completion's; ib.WCSuccess when the post itself was refused): the
// peer is gone or lost the connection, so it is torn down and resolved
// again. An RNR retry count exceeded is the exception: the peer is there,
// its receive queue ran dry, so the connection is made again at once,
// with no back-off, as the kernel's ipoib does (see sendRNRRetry).
func (m *Manager) SendFailed(now time.Time, qpn ib.QPN, status ib.WCStatus) {
	m.now = now
	for _, cs := range m.conns {
		for _, c := range cs {
			if c.QP.Num() == qpn && c.comm.State != cm.StateTimewait {
				m.Stats.SendFails++
				peer := c.Peer
				if status == ib.WCRNRRetryExceeded {
					m.Stats.RNRFailovers++
					m.teardown(c, "receiver not ready")
					if _, err := m.Connect(now, peer); err != nil {
						m.refused(peer, "connecting again after an RNR failure: "+err.Error())
					}
					return
				}
				// What failed, for the log line of the refusal.
				what := fmt.Sprintf("send failed on the %v connection, QPN %v to the peer's QPN %v", c.QP.Type(), c.QP.Num(), c.RemoteQPN())
				m.teardown(c, "send failed")
				m.refused(peer, what)
				return
			}
		}
	}
}

// Wake is the service's: signalled when Poll has input to handle.
func (m *Manager) Wake() <-chan struct{} { return m.svc.Wake() }

// Poll handles the service's pending input (MADs, the kernel CM's events);
// the caller waits on Wake.
func (m *Manager) Poll(now time.Time) {
	m.now = now
	m.svc.Poll(now)
}

// Next returns when Expire must next run (zero: nothing pending).
func (m *Manager) Next() time.Time {
	next := m.svc.Next()
	if m.cfg.IdleTimeout > 0 && len(m.conns) > 0 {
		idle := m.now.Add(m.cfg.IdleTimeout / 2)
		if next.IsZero() || idle.Before(next) {
			next = idle
		}
	}
	return next
}

// Expire runs the engine's timers and reaps idle connections.
func (m *Manager) Expire(now time.Time) {
	m.now = now
	m.svc.Expire(now)
	if m.cfg.IdleTimeout <= 0 {
		return
	}
	for _, cs := range m.conns {
		for _, c := range cs {
			if c.comm.State != cm.StateEstablished {
				continue
			}
			if n := c.Traffic.Packets(); n != c.idleSeen || c.idleAt.IsZero() {
				c.idleSeen, c.idleAt = n, now
				continue
			}
			if now.Sub(c.idleAt) >= m.cfg.IdleTimeout {
				m.Stats.IdleReaped++
				m.teardown(c, "idle")
			}
		}
	}
}

// Close disconnects everything (daemon exit): DREQs go out, QPs stop.
func (m *Manager) Close(now time.Time) {
	m.now = now
	for _, cs := range m.conns {
		for _, c := range append([]*Connection(nil), cs...) {
			m.teardown(c, "shutdown")
		}
	}
}

func (m *Manager) event(ev cm.Event) {
	c, _ := ev.Comm.Context.(*Connection)
	switch ev.Type {
	case cm.EvRequest:
		m.request(ev.Comm, ev.REQ)
	case cm.EvReply:
		m.reply(c, ev.REP)
	case cm.EvEstablished:
		m.Stats.Established++
		if c != nil {
			c.Established = m.now
			m.peerRestarted(c)
			m.setUp(c)
		}
	case cm.EvRejected:
		m.Stats.Rejected++
		if c == nil {
			return
		}
		m.remove(c)
		_ = c.QP.Close()
		if ev.REJ.Reason == cm.RejConsumerReject && m.hasOther(c) {
			return // the crossing rule: the peer's own REQ wins
		}
		// Only our own attempts send the neighbor back to resolution: a
		// REJ of our REP says nothing of the path (and answers a spoofed
		// REQ, whose UD QPN is nobody's).
		if c.Outgoing {
			m.refused(c.Peer, "rejected: "+ev.REJ.Reason.String())
		}
	case cm.EvTimeout:
		m.Stats.TimedOut++
		if c == nil {
			return
		}
		m.setDown(c, "timeout")
		if ev.Comm.State == cm.StateIdle {
			m.remove(c)
			_ = c.QP.Close()
		} else { // stale: disconnecting until timewait ends
			_ = c.QP.Modify(ib.QPModify{State: ib.StateError})
		}
		if c.Outgoing || ev.Comm.State != cm.StateIdle { // as for REJs; a stale connection was in use
			m.refused(c.Peer, "timeout")
		}
	case cm.EvDisconnected:
		m.Stats.Disconnected++
		if c != nil {
			m.setDown(c, "disconnected")
			_ = c.QP.Modify(ib.QPModify{State: ib.StateError})
		}
	case cm.EvTimewaitDone:
		if c != nil {
			m.remove(c)
			_ = c.QP.Close()
		}
	}
}

// request decides on a REQ: the crossing rule (rfc), then accept. A REQ
// never tears a connection down by itself: anyone can send one, naming
// any UD QPN; a peer restart is acted on once the new connection is
// established (peerRestarted).
func (m *Manager) request(cc *cm.Comm, req *cm.REQ) {
	pd, err := cm.DecodePrivateData(req.PrivateData[:])
	if err != nil {
		m.reject(cc, cm.RejConsumerReject)
		return
	}
	peer := ib.LinkAddr{Flags: flagFor(req.TransportType), QPN: pd.UDQPN, GID: cc.RemoteGID}
	if m.cfg.Local.Flags&flagFor(req.TransportType) == 0 {
		m.reject(cc, cm.RejInvalidTransportType)
		return
	}
	// RFC 4755: only a REQ of ours still unanswered crosses.
	crossing := slices.ContainsFunc(m.conns[peerKey(peer)], func(c *Connection) bool {
		return c.Outgoing && c.comm.State == cm.StateREQSent
	})
	if crossing {
		if m.cfg.Policy == PolicyRFC && ib.CompareIgnoringFlags(m.cfg.Local, peer) > 0 {
			// The smaller link address accepts, we reject.
			m.Stats.CrossingRejected++
			m.reject(cc, cm.RejConsumerReject)
			return
		}
		m.Stats.CrossingAccepted++ // linux accepts every one, as the kernel does
	}
	qp, err := m.newQP(req.TransportType)
	if err != nil {
		m.reject(cc, cm.RejNoQP)
		return
	}
	if err := m.bringUp(qp, cc, cc.RecvPSN, cc.RNRRetry); err != nil {
		_ = qp.Close()
		m.Stats.QPErrors++
		m.reject(cc, cm.RejConsumerReject)
		return
	}
	c := &Connection{Peer: peer, QP: qp, MTU: connMTU(pd.ReceiveMTU, m.cfg.ReceiveMTU), Since: m.now, PathMTU: cc.PathMTU, comm: cc,
		bothWays: pd.BothWays}
	cc.Context = c
	// RNR retry 7: an RNR NAK only delays the requester, never kills it
	// (a Linux requester would otherwise drop the connection).
	if err := m.svc.Accept(m.now, cc, cm.AcceptParams{LocalQPN: qp.Num(), RNRRetry: 7, PrivateData: m.privateData()}); err != nil {
		_ = qp.Close()
		return
	}
	m.add(c)
	m.Stats.Accepted++
}

// peerRestarted applies the restart rule once c is established: the
// connections to c's GID under another UD QPN belong to the node before it
// restarted, and are stale. Only a completed handshake proves the new UD
// QPN: the REP went to the GID, and the RTU or REP that came back named
// our random comm ID.
func (m *Manager) peerRestarted(c *Connection) {
	if m.cfg.SharedGIDs {
		return
	}
	restarted := false
	for key, cs := range m.conns {
		if key.GID != c.Peer.GID || key.QPN == c.Peer.QPN {
			continue
		}
		restarted = true
		for _, o := range append([]*Connection(nil), cs...) {
			m.teardown(o, "peer restarted")
		}
	}
	if restarted {
		m.Stats.PeerRestarts++
	}
}

// reply finishes our side after a REP.
func (m *Manager) reply(c *Connection, rep *cm.REP) {
	if c == nil {
		return
	}
	pd, err := cm.DecodePrivateData(rep.PrivateData[:])
	if err == nil {
		err = m.bringUp(c.QP, c.comm, c.comm.RecvPSN, sendRNRRetry(c.comm.RNRRetry, pd.BothWays))
	}
	if err != nil {
		m.Stats.QPErrors++
		_ = m.svc.RejectReply(c.comm, cm.RejConsumerReject, m.privateData())
		m.remove(c)
		_ = c.QP.Close()
		m.refused(c.Peer, "bad REP")
		return
	}
	c.MTU, c.PathMTU = connMTU(pd.ReceiveMTU, m.cfg.ReceiveMTU), c.comm.PathMTU
	if err := m.svc.Ready(c.comm); err != nil {
		return
	}
	m.Stats.Established++
	c.Established = m.now
	m.peerRestarted(c)
	m.setUp(c)
}

// minRNRTimer is the RNR NAK timer code of our receiving QPs: 1, 0.01 ms,
// the shortest. A requester that meets our SRQ empty tries again almost at
// once; the port posts the SRQ's slots again as soon as their packets are
// written to the TUN. (ib_cm gives the kernel's QPs code 0, 655.36 ms; the
// measure is in docs/ipoib-cm.md §7.6.)
const minRNRTimer = 1

// sendRNRRetry is the RNR retry count of our QP on a connection we opened,
// from the REP's (granted) and whether the REP carries ipoibd's mark. An
// ipoibd peer answers an RNR NAK with minRNRTimer: retrying for ever (7)
// costs 0.01 ms a NAK and loses nothing. Any other peer is taken for the
// kernel's ipoib, whose QPs ask for 655.36 ms a NAK: there we retry 0
// times, as the kernel does between its own peers, and a dry receive queue
// fails the connection, which is made again at once (SendFailed) instead
// of stalling every flow to the peer for 655 ms a NAK.
func sendRNRRetry(granted uint8, ipoibdPeer bool) uint8 {
	if !ipoibdPeer {
		return 0
	}
	return min(granted, 7)
}

// bringUp moves a QP through Init and RTR to RTS with what the CM agreed,
// retrying RNR NAKs rnrRetry times.
func (m *Manager) bringUp(qp ib.QP, cc *cm.Comm, recvPSN uint32, rnrRetry uint8) error {
	// On an InfiniBand path the ACK timeout follows its packet lifetime,
	// as the REQ said; elsewhere ours.
	timeout := uint8(ackTimeout)
	if cc.Address.LIDRouted() {
		timeout = cc.ACKTimeout
	}
	steps := []ib.QPModify{
		{State: ib.StateInit, PKey: m.cfg.PKey},
		{State: ib.StateRTR, DestGID: cc.RemoteGID, DestQPN: cc.RemoteQPN, PathMTU: cc.PathMTU, RecvPSN: recvPSN, MinRNRTmr: minRNRTimer, Path: cc.Address},
		{State: ib.StateRTS, SendPSN: cc.SendPSN, Timeout: timeout, RetryCount: 7, RNRRetry: rnrRetry},
	}
	for _, s := range steps {
		if err := qp.Modify(s); err != nil {
			return fmt.Errorf("ipoibcm: QP %v to %v: %w", qp.Num(), s.State, err)
		}
	}
	return nil
}

// privateData is the RFC 4755 private data of our REQs, REPs and REJs
// of a REP: our UD QPN and receive MTU, and the mark that we receive on
// every connection (cm.PrivateData.BothWays).
func (m *Manager) privateData() []byte {
	var priv [cm.IPoIBMarkedLen]byte
	_ = cm.PrivateData{UDQPN: m.cfg.Local.QPN, ReceiveMTU: m.cfg.ReceiveMTU, BothWays: true}.Encode(priv[:])
	return priv[:]
}

// carriesSends says whether the policy sends on c once it is up: every
// policy on the connections we opened; rfc also on those an ipoibd peer
// opened (its REQ marked), never on a kernel peer's, which it receives
// on only (its receive path takes any other traffic for a connection it
// accepted: ipoib_cm.c).
func (m *Manager) carriesSends(c *Connection) bool {
	return c.Outgoing || (m.cfg.Policy == PolicyRFC && c.bothWays)
}

func (m *Manager) reject(cc *cm.Comm, reason cm.RejectReason) {
	var priv [cm.IPoIBPrivateDataLen]byte
	binary.BigEndian.PutUint32(priv[0:4], uint32(m.cfg.Local.QPN))
	_ = m.svc.Reject(cc, reason, priv[:])
}

func (m *Manager) teardown(c *Connection, reason string) {
	m.setDown(c, reason)
	switch c.comm.State {
	case cm.StateTimewait, cm.StateDREQSent:
		return
	case cm.StateIdle:
		m.remove(c)
		_ = c.QP.Close()
		return
	}
	m.svc.Disconnect(m.now, c.comm)
	if c.comm.State == cm.StateIdle { // rejected while being set up
		m.remove(c)
		_ = c.QP.Close()
	}
}

func (m *Manager) setUp(c *Connection) {
	if m.carriesSends(c) {
		c.sendable = true
	}
	if c.sendable && !c.up {
		c.up = true
		if m.cfg.Up != nil {
			m.cfg.Up(c)
		}
	}
}

func (m *Manager) setDown(c *Connection, reason string) {
	c.sendable = false
	if c.up {
		c.up = false
		if m.cfg.Down != nil {
			m.cfg.Down(c, reason)
		}
	}
}

func (m *Manager) refused(peer ib.LinkAddr, reason string) {
	if m.cfg.Refused != nil {
		m.cfg.Refused(peer, reason)
	}
}

// hasOther reports whether c's peer has another live connection.
func (m *Manager) hasOther(c *Connection) bool {
	for _, o := range m.conns[peerKey(c.Peer)] {
		if o != c && o.comm.State != cm.StateTimewait && o.comm.State != cm.StateIdle {
			return true
		}
	}
	return false
}

func (m *Manager) add(c *Connection) {
	k := peerKey(c.Peer)
	m.conns[k] = append(m.conns[k], c)
	m.reindex(c, true)
}

func (m *Manager) remove(c *Connection) {
	m.fold(c)
	m.reindex(c, false)
	k := peerKey(c.Peer)
	cs := m.conns[k]
	for i, o := range cs {
		if o == c {
			cs = append(cs[:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(m.conns, k)
	} else {
		m.conns[k] = cs
	}
}

func (m *Manager) newQP(tr cm.TransportType) (ib.QP, error) {
	if m.cfg.QPs == nil {
		return nil, errors.New("ipoibcm: no QP factory")
	}
	return m.cfg.QPs.CreateQP(typeOf(tr))
}

func typeOf(tr cm.TransportType) ib.QPType {
	if tr == cm.TransportUC {
		return ib.UC
	}
	return ib.RC
}

// connMTU is the largest IP packet on a connection: the smaller receive
// MTU less the 4-octet IPoIB header (RFC 4755 §5.1).
func connMTU(peer, ours uint32) int {
	return int(min(peer, ours)) - encap.HeaderLen
}
