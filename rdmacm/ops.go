//go:build rdma

package rdmacm

/*
#include <rdma/rdma_cma.h>
*/
import "C"

import (
	"fmt"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
)

// The calls the Manager makes to set connections up and tear them down.

// Connect starts an outgoing connection: the id resolves the peer's
// address, then its route, and Poll sends the REQ (rdma_connect) when the
// route is known. The connection is in StateREQSent from the start, as with
// the Engine; RecvPSN, SendPSN and the path MTU are filled from the kernel
// CM when the REP arrives (ConnectParams.RecvPSN and PathMTU cannot be
// chosen: the kernel picks the PSN and takes the MTU from the path).
func (s *Service) Connect(now time.Time, p cm.ConnectParams) (*cm.Comm, error) {
	if s.closed {
		return nil, ib.ErrClosed
	}
	qpType := C.IBV_QPT_RC
	switch p.Transport {
	case cm.TransportRC:
	case cm.TransportUC:
		qpType = C.IBV_QPT_UC
	default:
		return nil, fmt.Errorf("rdmacm: connections are RC or UC, not %v", p.Transport)
	}
	if len(s.byID) >= maxConns || s.halfOpen >= maxHalfOpen {
		return nil, cm.ErrTooMany
	}
	if m := modeFor(s.at.Ethernet, p.RemoteGID); m != s.mode {
		return nil, fmt.Errorf("rdmacm: peer GID %v needs %s, but this port uses %s", p.RemoteGID, m, s.mode)
	}
	dst, priv, err := s.destination(p)
	if err != nil {
		return nil, err
	}
	src := s.addr(s.gid, 0)
	id, err := createID(s.ch, src, int(qpType))
	if err != nil {
		s.ctr.fail("rdma_create_ep")
		return nil, err
	}
	if err := resolveAddr(id, src, dst); err != nil {
		s.ctr.fail("rdma_resolve_addr")
		s.destroy(id)
		return nil, err
	}
	cn := &conn{id: id, step: stepAddr, priv: append([]byte(nil), priv...), c: &cm.Comm{
		Active: true, LocalQPN: p.LocalQPN, RemoteGID: p.RemoteGID, ServiceID: p.ServiceID,
		Transport: p.Transport, PathMTU: p.PathMTU, RetryCount: p.RetryCount, RNRRetry: p.RNRRetry,
		ACKTimeout: p.ACKTimeout, Context: p.Context,
	}}
	s.add(cn, cm.StateREQSent)
	return cn.c, nil
}

// destination is the peer's address for a REQ to p.ServiceID and the
// private data it carries: the service ID's rdma_cm port (another ipoibd's
// mapping, addr.go) with the AF_IB pad; or, sending to RFC 4755 peers
// (NewRFCSender), the service ID itself and the private data at octet 0,
// as a kernel ipoib peer reads it.
func (s *Service) destination(p cm.ConnectParams) (*sockaddr, []byte, error) {
	if s.rfcIDs {
		if _, err := cm.ParseIPoIBServiceID(p.ServiceID); err != nil {
			return nil, nil, err
		}
		return addrForSID(s.mode, p.RemoteGID, p.ServiceID, s.pkey), p.PrivateData, nil
	}
	port, err := servicePort(p.ServiceID)
	if err != nil {
		return nil, nil, err
	}
	priv := p.PrivateData
	if s.mode == modeIB {
		priv = append(make([]byte, afIBPad), priv...)
	}
	return s.addr(p.RemoteGID, port), priv, nil
}

// Accept answers a connection request with a REP (rdma_accept) carrying
// the Manager's QP. The receive PSN is the kernel's (Comm.RecvPSN, which
// the REP carries); p.RecvPSN may only repeat it.
func (s *Service) Accept(now time.Time, c *cm.Comm, p cm.AcceptParams) error {
	cn := s.byComm[c]
	if cn == nil || c.State != cm.StateREQRcvd {
		return cm.ErrBadState
	}
	if p.RecvPSN != 0 && p.RecvPSN&0xffffff != c.RecvPSN {
		return fmt.Errorf("rdmacm: the kernel CM chose receive PSN %#x; it cannot use %#x", c.RecvPSN, p.RecvPSN)
	}
	c.LocalQPN = p.LocalQPN
	if err := connectQP(cn.id, p.PrivateData, p.LocalQPN, 0, p.RNRRetry, true); err != nil {
		s.ctr.fail("rdma_accept")
		s.forget(cn) // the kernel rejected the REQ itself
		return err
	}
	s.setState(cn, cm.StateREPSent)
	return nil
}

// Reject refuses a connection request and forgets it. rdma_cm sends every
// REJ with reason Consumer Reject (ucma_reject allows no other), whatever
// reason says; the private data goes as given.
func (s *Service) Reject(c *cm.Comm, reason cm.RejectReason, private []byte) error {
	cn := s.byComm[c]
	if cn == nil || c.State != cm.StateREQRcvd {
		return cm.ErrBadState
	}
	err := s.reject(cn, private)
	s.forget(cn)
	return err
}

// Ready finishes an outgoing connection after EvReply: rdma_establish sends
// the RTU. The QP must be in RTS.
func (s *Service) Ready(c *cm.Comm) error {
	cn := s.byComm[c]
	if cn == nil || c.State != cm.StateREPRcvd {
		return cm.ErrBadState
	}
	if err := establishID(cn.id); err != nil {
		// The kernel rejected the REP itself; the Manager keeps the
		// connection after a failed Ready, so tell it the attempt is over.
		s.ctr.fail("rdma_establish")
		s.forget(cn)
		s.later = append(s.later, cm.Event{Type: cm.EvTimeout, Comm: c})
		s.signal()
		return err
	}
	s.setState(cn, cm.StateEstablished)
	return nil
}

// RejectReply refuses a REP (after EvReply) and forgets the connection; the
// REJ's reason is Consumer Reject, as with Reject.
func (s *Service) RejectReply(c *cm.Comm, reason cm.RejectReason, private []byte) error {
	cn := s.byComm[c]
	if cn == nil || c.State != cm.StateREPRcvd {
		return cm.ErrBadState
	}
	err := s.reject(cn, private)
	s.forget(cn)
	return err
}

// Disconnect ends a connection in any state. An established one gets a
// DREQ (EvDisconnected follows, then EvTimewaitDone); one being set up is
// refused or dropped at once and left in StateIdle without an event, as the
// Engine leaves it.
func (s *Service) Disconnect(now time.Time, c *cm.Comm) {
	cn := s.byComm[c]
	if cn == nil {
		return
	}
	switch c.State {
	case cm.StateEstablished:
		if err := disconnectID(cn.id); err != nil {
			// Destroying an established id sends the DREQ itself.
			s.ctr.fail("rdma_disconnect")
			s.forget(cn)
			return
		}
		s.setState(cn, cm.StateDREQSent)
	case cm.StateREQRcvd, cm.StateREPSent:
		// The IB CM sends a DREQ only once the RTU is in: before that
		// rdma_disconnect sends nothing, so refuse with a REJ.
		_ = s.reject(cn, nil)
		s.forget(cn)
	case cm.StateREQSent, cm.StateREPRcvd:
		// Destroying the id rejects whatever REQ or REP is outstanding.
		s.forget(cn)
	}
}
