package cm

import (
	"encoding/binary"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// How connections end in the engine: the consumer's Reject, RejectReply
// and Disconnect; the REJ, DREQ and DREP it sends and receives; timewait,
// and forgetting a connection that never got there.

// Reject refuses a REQ-received connection and forgets it.
func (e *Engine) Reject(c *Comm, reason RejectReason, private []byte) error {
	if c.State != StateREQRcvd {
		return ErrBadState
	}
	e.sendREJ(c.to, c.tid, c.LocalCommID, c.RemoteCommID, MsgREQ, reason, nil, private)
	e.forget(c)
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

func (e *Engine) sendDREP(to ib.MADAddr, tid uint64, local, remote uint32) {
	drep := DREP{LocalCommID: local, RemoteCommID: remote}
	if drep.MarshalMAD(e.buf[:], tid) == nil {
		e.send(to, e.buf[:])
	}
}
