//go:build rdma

package rdmacm

/*
#include <rdma/rdma_cma.h>
*/
import "C"

import (
	"syscall"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
)

// cmEvent is one rdma_cm event, copied out of librdmacm (and acknowledged)
// before it is handled: the events function may call back into the
// service.
type cmEvent struct {
	typ, status int
	id, listen  cmID
	qpn         ib.QPN // the peer's QP (connection request, response)
	retry       uint8
	rnrRetry    uint8
	srq         bool
	priv        []byte
}

// Poll handles the pending events without blocking and reports them to the
// events function. After a batch it leaves the rest for the next Poll (and
// signals Wake), so that one busy channel does not hold its owner.
func (s *Service) Poll(now time.Time) {
	if s.closed {
		return
	}
	for n := 0; ; n++ {
		if n == cmPollBatch {
			s.signal()
			break
		}
		nextEvent(s.ch, s.ev)
		if s.ev.err != 0 {
			if syscall.Errno(s.ev.err) != syscall.EAGAIN {
				s.ctr.fail("rdma_get_cm_event")
			}
			break
		}
		ev := cmEvent{
			typ: int(s.ev._type), status: int(s.ev.status), id: s.ev.id, listen: s.ev.listen_id,
			qpn: ib.QPN(s.ev.qp_num) & ib.QPNMask, retry: uint8(s.ev.retry_count), rnrRetry: uint8(s.ev.rnr_retry_count),
			srq: s.ev.srq != 0, priv: eventData(s.ev),
		}
		s.ctr.event(ev.typ)
		s.handle(ev)
		if s.closed { // the events function closed us
			return
		}
	}
	for len(s.later) > 0 {
		ev := s.later[0]
		s.later = s.later[1:]
		s.events(ev)
	}
}

func (s *Service) handle(ev cmEvent) {
	switch {
	case ev.typ == evConnectRequest:
		s.request(ev)
		return
	case ev.id == s.listener && s.listener != nil:
		if ev.typ == evDeviceRemoval {
			s.info.Lock()
			s.listener = nil
			s.info.Unlock()
			_ = s.destroy(ev.id)
		}
		return
	}
	cn := s.byID[ev.id]
	if cn == nil {
		s.ctr.add(&s.ctr.stale)
		return
	}
	switch ev.typ {
	case evAddrResolved:
		s.addrResolved(cn)
	case evRouteResolved:
		s.routeResolved(cn)
	case evConnectResponse:
		s.reply(cn, ev)
	case evEstablished:
		if cn.c.State == cm.StateREPSent {
			s.setState(cn, cm.StateEstablished)
			s.events(cm.Event{Type: cm.EvEstablished, Comm: cn.c})
		}
	case evRejected:
		s.rejected(cn, ev)
	case evAddrError, evRouteError, evConnectError, evUnreachable, evDeviceRemoval:
		s.failed(cn)
	case evDisconnected:
		s.disconnected(cn)
	case evTimewaitExit:
		if cn.c.State == cm.StateTimewait {
			s.timewaitDone(cn)
		}
	}
}

// addrResolved checks the device rdma_cm chose and resolves the route.
func (s *Service) addrResolved(cn *conn) {
	if cn.step != stepAddr {
		return
	}
	if err := s.checkDevice(cn.id); err != nil {
		s.ctr.fail("device_check")
		s.failed(cn)
		return
	}
	if err := resolveRoute(cn.id); err != nil {
		s.ctr.fail("rdma_resolve_route")
		s.failed(cn)
		return
	}
	cn.step = stepRoute
}

// routeResolved sends the REQ for the Manager's QP.
func (s *Service) routeResolved(cn *conn) {
	if cn.step != stepRoute {
		return
	}
	c := cn.c
	if err := connectQP(cn.id, cn.priv, c.LocalQPN, c.RetryCount, c.RNRRetry, false); err != nil {
		s.ctr.fail("rdma_connect")
		s.failed(cn)
		return
	}
	cn.step, cn.priv = stepSent, nil
}

// attrs reads what the kernel CM will program for RTR and RTS.
func (s *Service) attrs(id cmID) (rtr, rts qpAttr, ok bool) {
	var err error
	if rtr, err = initQPAttr(id, C.IBV_QPS_RTR); err == nil {
		rts, err = initQPAttr(id, C.IBV_QPS_RTS)
	}
	if err != nil {
		s.ctr.fail("rdma_init_qp_attr")
		return rtr, rts, false
	}
	return rtr, rts, true
}

// reply takes the REP of an outgoing connection. The Manager brings its QP
// to RTS with the fields filled here and calls Ready (rdma_establish), or
// RejectReply.
func (s *Service) reply(cn *conn, ev cmEvent) {
	c := cn.c
	if c.State != cm.StateREQSent || cn.step != stepSent {
		return
	}
	rtr, rts, ok := s.attrs(cn.id)
	if !ok {
		s.failed(cn) // destroying the id rejects the REP
		return
	}
	// The kernel CM's own values: the receive PSN is the one our REQ
	// carried, the send PSN the one the REP carries.
	c.RemoteQPN = ib.QPN(rtr.dest_qp_num) & ib.QPNMask
	c.PathMTU = ib.MTU(rtr.path_mtu)
	c.RecvPSN = uint32(rtr.rq_psn) & 0xffffff
	c.SendPSN = uint32(rts.sq_psn) & 0xffffff
	c.RNRRetry = ev.rnrRetry
	if rts.mask&qpRNRRetry != 0 {
		c.RNRRetry = uint8(rts.rnr_retry)
	}
	s.setState(cn, cm.StateREPRcvd)
	rep := &cm.REP{LocalQPN: ev.qpn, StartingPSN: c.SendPSN, RNRRetryCount: ev.rnrRetry, SRQ: ev.srq}
	copy(rep.PrivateData[:], ev.priv)
	s.events(cm.Event{Type: cm.EvReply, Comm: c, REP: rep})
}

// request takes a connection request on the listener: a new id, which the
// Manager accepts or rejects.
func (s *Service) request(ev cmEvent) {
	id := ev.id
	if s.listener == nil || ev.listen != s.listener {
		s.ctr.add(&s.ctr.stale)
		s.refuse(id)
		return
	}
	if len(s.byID) >= maxConns || s.halfOpen >= maxHalfOpen {
		s.ctr.add(&s.ctr.refused)
		s.refuse(id)
		return
	}
	rtr, rts, ok := s.attrs(id)
	if !ok {
		s.ctr.add(&s.ctr.unusable)
		s.refuse(id)
		return
	}
	tr, ok := transportOf(int(rtr.mask), int(rts.mask))
	gid, gidOK := peerGID(id)
	if !ok || !gidOK || s.checkDevice(id) != nil {
		s.ctr.add(&s.ctr.unusable)
		s.refuse(id)
		return
	}
	priv := ev.priv
	if s.mode == modeIB && len(priv) >= afIBPad {
		priv = priv[afIBPad:]
	}
	// Before the REP: the send PSN is the REQ's (the kernel CM took it),
	// the receive PSN the one rdma_accept will put in the REP (the id's,
	// which rdma_init_qp_attr reports for RTR).
	c := &cm.Comm{
		RemoteQPN: ib.QPN(rtr.dest_qp_num) & ib.QPNMask, RemoteGID: gid, ServiceID: s.serviceID, Transport: tr,
		SendPSN: uint32(rts.sq_psn) & 0xffffff, RecvPSN: uint32(rtr.rq_psn) & 0xffffff, PathMTU: ib.MTU(rtr.path_mtu),
		RetryCount: ev.retry, RNRRetry: ev.rnrRetry,
	}
	if rts.mask&qpRetryCnt != 0 {
		c.RetryCount = uint8(rts.retry_cnt)
	}
	if rts.mask&qpRNRRetry != 0 {
		c.RNRRetry = uint8(rts.rnr_retry)
	}
	if rts.mask&qpTimeout != 0 {
		c.ACKTimeout = uint8(rts.timeout)
	}
	cn := &conn{id: id, c: c}
	s.add(cn, cm.StateREQRcvd)
	req := &cm.REQ{
		ServiceID: s.serviceID, LocalQPN: c.RemoteQPN, TransportType: tr, StartingPSN: c.SendPSN,
		RetryCount: c.RetryCount, RNRRetryCount: c.RNRRetry, PathMTU: c.PathMTU, SRQ: ev.srq,
		Primary: cm.Path{LocalGID: gid, RemoteGID: s.gid, LocalACKTimeout: c.ACKTimeout},
	}
	copy(req.PrivateData[:], priv)
	s.events(cm.Event{Type: cm.EvRequest, Comm: c, REQ: req})
}

// refuse rejects a request the Manager never sees and destroys its id.
func (s *Service) refuse(id cmID) {
	if err := rejectID(id, nil); err != nil {
		s.ctr.fail("rdma_reject")
	}
	_ = s.destroy(id)
}

// rejected reports a REJ: for a connection being set up, the end of the
// attempt; for an established one (the peer found it stale or gave up on
// our RTU) the end of the connection, as the Engine has it.
func (s *Service) rejected(cn *conn, ev cmEvent) {
	reason := cm.RejTimeout
	if ev.status > 0 && ev.status <= 0xffff {
		reason = cm.RejectReason(ev.status)
	}
	rej := &cm.REJ{Reason: reason}
	copy(rej.PrivateData[:], ev.priv)
	switch cn.c.State {
	case cm.StateEstablished, cm.StateDREQSent:
		// The kernel reports TIMEWAIT_EXIT only after DISCONNECTED
		// (cma_ib_handler), so timewait ends here.
		s.setState(cn, cm.StateTimewait)
		s.events(cm.Event{Type: cm.EvDisconnected, Comm: cn.c, REJ: rej})
		s.timewaitDone(cn)
	case cm.StateTimewait:
	default:
		s.forget(cn)
		s.events(cm.Event{Type: cm.EvRejected, Comm: cn.c, REJ: rej})
	}
}

// failed ends a connection the kernel gave up on (no answer, no address or
// route, device gone): EvTimeout, the connection in StateIdle.
func (s *Service) failed(cn *conn) {
	if cn.c.State == cm.StateTimewait {
		s.timewaitDone(cn)
		return
	}
	s.forget(cn)
	s.events(cm.Event{Type: cm.EvTimeout, Comm: cn.c})
}

// disconnected takes a DREQ or the answer to ours. rdma_disconnect sends
// the DREP when the peer started (and does nothing otherwise): without it
// the kernel CM would wait in DREQ-received and never reach timewait.
func (s *Service) disconnected(cn *conn) {
	switch cn.c.State {
	case cm.StateEstablished, cm.StateDREQSent, cm.StateREPSent:
	default:
		return
	}
	answered := true
	if err := disconnectID(cn.id); err != nil {
		s.ctr.fail("rdma_disconnect")
		answered = false
	}
	s.setState(cn, cm.StateTimewait)
	s.events(cm.Event{Type: cm.EvDisconnected, Comm: cn.c})
	if !answered {
		s.timewaitDone(cn) // no timewait to wait for; destroying the id sends the DREP
	}
}

// timewaitDone forgets a connection after its timewait.
func (s *Service) timewaitDone(cn *conn) {
	if s.byID[cn.id] != cn {
		return
	}
	s.forget(cn)
	s.events(cm.Event{Type: cm.EvTimewaitDone, Comm: cn.c})
}
