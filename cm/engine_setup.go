package cm

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// Connection setup in the engine: the active side's REQ and RTU (Connect,
// Ready), the passive side's REP (Accept); the REQ, REP, RTU and MRA it
// receives, duplicates among them, and the stale-connection rule a REQ or
// REP naming a live connection's remote QP sets off (IBA 12.9.8.3.1); the
// paths and addresses the exchange goes by.

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

// handleREQ takes a REQ in steps: its claims checked against the MAD's
// source, a duplicate answered, a stale connection ended, one nobody
// listens for or over the setup limits refused; what passes becomes a
// connection in REQ-received, reported as EvRequest.
func (e *Engine) handleREQ(now time.Time, from ib.MADAddr, tid uint64, req *REQ) {
	if !reqFromItsSource(from, req) {
		// The REQ claims a port or adapter that did not send it.
		e.refuseSourceMismatch(from, tid, req)
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
	if e.duplicateREQ(from, tid, req) || e.staleREQ(now, from, tid, req) ||
		e.unservedREQ(from, tid, req) || e.overSetupLimits(now, from, tid, req, source) {
		return
	}
	e.openPassive(from, tid, req, src, source)
}

// refuseSourceMismatch answers a REQ whose claims are not its sender's:
// tell the sender (REJ 12, our GID in the ARI as the kernel sends it) and
// believe nothing of it.
func (e *Engine) refuseSourceMismatch(from ib.MADAddr, tid uint64, req *REQ) {
	e.Stats.SourceMismatch++
	e.sendREJ(e.responseTo(from), tid, 0, req.LocalCommID, MsgREQ, RejInvalidGID, e.cfg.GID[:], nil)
}

// duplicateREQ reports whether req names a (CA GUID, comm ID) we already
// know, and answers it if so.
func (e *Engine) duplicateREQ(from ib.MADAddr, tid uint64, req *REQ) bool {
	c := e.byRemote[remoteID{req.LocalCAGUID, req.LocalCommID}]
	if c == nil {
		return false
	}
	if !fromPeer(from, c) {
		// Another peer's (CA GUID, comm ID): comm IDs are unique per
		// adapter, so the sender claims an adapter it is not.
		e.refuseSourceMismatch(from, tid, req)
		return true
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
	return true
}

// staleREQ reports whether req names the remote QP of an established
// connection, and refuses it if so (REJ 10), ending that connection as
// stale when the REQ comes from its own peer.
func (e *Engine) staleREQ(now time.Time, from ib.MADAddr, tid uint64, req *REQ) bool {
	old := e.byQP[remoteQP{req.LocalCAGUID, req.LocalQPN}]
	if old == nil {
		return false
	}
	if fromPeer(from, old) {
		e.stale(now, old)
	} else {
		// Someone else names the remote QP of a live connection: the
		// connection stays, only its own peer can declare it stale.
		e.Stats.StaleForeign++
	}
	e.refuseREQ(from, tid, req, RejStaleConnection)
	return true
}

// unservedREQ reports whether req asks for a service nobody listens on or
// a transport we do not offer, and refuses it if so.
func (e *Engine) unservedREQ(from ib.MADAddr, tid uint64, req *REQ) bool {
	if !e.listening[req.ServiceID] {
		e.refuseREQ(from, tid, req, RejInvalidServiceID)
		return true
	}
	if req.TransportType != TransportRC && req.TransportType != TransportUC {
		e.refuseREQ(from, tid, req, RejInvalidTransportType)
		return true
	}
	return false
}

// overSetupLimits reports whether a new connection would exceed MaxConns
// or MaxHalfOpen, or its source's MaxHalfOpenPerSource, and refuses req
// (REJ "no resources") if so.
func (e *Engine) overSetupLimits(now time.Time, from ib.MADAddr, tid uint64, req *REQ, source sourceKey) bool {
	if e.full() {
		e.Stats.Full++
		e.refuseREQ(from, tid, req, RejNoResources)
		return true
	}
	if e.halfOpenFrom[source] >= e.cfg.MaxHalfOpenPerSource {
		e.Stats.BusySource++
		e.flood.refuse(e.cfg.Log, now, source, e.cfg.MaxHalfOpenPerSource)
		e.refuseREQ(from, tid, req, RejNoResources)
		return true
	}
	return false
}

// openPassive makes the passive side's connection for a REQ that passed
// every check, in REQ-received with the peer at src, and asks the consumer
// (EvRequest) to Accept or Reject it.
func (e *Engine) openPassive(from ib.MADAddr, tid uint64, req *REQ, src ib.GID, source sourceKey) {
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

func (e *Engine) sendMRA(to ib.MADAddr, c *Comm, what MsgType) {
	mra := MRA{LocalCommID: c.LocalCommID, RemoteCommID: c.RemoteCommID, MessageMRAed: what, ServiceTimeout: e.cfg.ResponseTimeout}
	if mra.MarshalMAD(e.buf[:], c.tid) == nil {
		e.send(to, e.buf[:])
	}
}
