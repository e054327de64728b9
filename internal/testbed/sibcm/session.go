package main

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/softib"
)

// session is one run: a softib device, the CM engine on its QP1 and at most
// one connection with its queue pair. One goroutine (run) owns all of it;
// the engine's events arrive on that goroutine, inside HandleMAD and Expire.
type session struct {
	cfg  config
	out  io.Writer
	dev  *softib.Device
	mads ib.MADService
	eng  *cm.Engine

	conn *cm.Comm
	ep   *endpoint

	rejected     int // REQs refused so far (listen --reject)
	disconnected bool
	err          error // the verdict: set once, by fail
	done         bool
	summary      string
}

func open(c config, out io.Writer) (*session, error) {
	dev, err := softib.Open(softib.Config{Name: "sibcm", Addr: c.local})
	if err != nil {
		return nil, err
	}
	mads, err := dev.MADs()
	if err != nil {
		dev.Close()
		return nil, err
	}
	s := &session{cfg: c, out: out, dev: dev, mads: mads}
	port := dev.Port()
	s.eng = s.newEngine()
	s.logf("softib %v GID %v GUID %#016x active MTU %v", c.local, port.GID, port.GUID, port.ActiveMTU)
	return s, nil
}

func (s *session) newEngine() *cm.Engine {
	port := s.dev.Port()
	return cm.NewEngine(cm.EngineConfig{
		GID: port.GID, GUID: port.GUID, PKey: ib.DefaultPKey,
		ResponseTimeout: s.cfg.cmTimeout, MaxRetries: s.cfg.cmRetries,
		Send:  s.mads.Send,
		Event: s.event,
	})
}

func (s *session) logf(format string, a ...any) {
	fmt.Fprintf(s.out, "sibcm: "+format+"\n", a...)
}

// fail records the first failure as the verdict.
func (s *session) fail(format string, a ...any) {
	if s.err == nil {
		s.err = fmt.Errorf(format, a...)
	}
	s.done = true
}

func (s *session) pass(format string, a ...any) {
	if s.err == nil {
		s.summary = fmt.Sprintf(format, a...)
	}
	s.done = true
}

// run drives the engine and the queue pair until a verdict.
func (s *session) run() error {
	if s.cfg.active {
		if err := s.connect(time.Now()); err != nil {
			return err
		}
	} else {
		sid := serviceID(s.cfg.ps, s.cfg.port)
		if err := s.eng.Listen(sid); err != nil {
			return err
		}
		s.logf("listening on service ID %#016x (port %d)", sid, s.cfg.port)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	giveUp := time.NewTimer(s.cfg.timeout)
	defer giveUp.Stop()
	for !s.done {
		wait := time.Hour
		if next := s.eng.Next(); !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		var sendReady, recvReady <-chan struct{}
		if s.ep != nil {
			sendReady, recvReady = s.ep.scq.Ready(), s.ep.rcq.Ready()
		}
		select {
		case m, ok := <-s.mads.Recv():
			if !ok {
				s.fail("the MAD service closed")
				break
			}
			s.eng.HandleMAD(time.Now(), &m)
		case <-timer.C:
			s.eng.Expire(time.Now())
		case <-sendReady:
			s.poll()
		case <-recvReady:
			s.poll()
		case <-giveUp.C:
			s.fail("no verdict after %v: %s", s.cfg.timeout, s.waiting())
		}
		s.progress(time.Now())
	}
	s.report()
	return s.err
}

// waiting says what a timed-out run was still waiting for.
func (s *session) waiting() string {
	switch {
	case s.conn == nil && s.cfg.active:
		return "no connection"
	case s.conn == nil:
		return fmt.Sprintf("%d REQs refused, waiting for a REQ", s.rejected)
	case s.ep == nil:
		return "connection " + s.conn.State.String()
	}
	return fmt.Sprintf("connection %v, %d/%d sent, %d/%d received, disconnected %v",
		s.conn.State, s.ep.sendsDone, s.cfg.count, s.ep.recvsDone, s.cfg.count, s.disconnected)
}

// connect sends our REQ: rdma_cm's service ID and header in front of our
// private data.
func (s *session) connect(now time.Time) error {
	ep, err := newEndpoint(s.dev, s.cfg.count, s.cfg.size)
	if err != nil {
		return err
	}
	s.ep = ep
	if err := ep.init(); err != nil {
		return err
	}
	src := s.cfg.srcPort
	if src == 0 {
		var b [2]byte
		_, _ = rand.Read(b[:])
		src = 0xc000 | binary.BigEndian.Uint16(b[:])&0x3fff
	}
	pd := make([]byte, cmaHeaderLen+len(s.cfg.private))
	if err := (cmaHeader{Port: src, Src: s.cfg.local, Dst: s.cfg.remote}).marshal(pd); err != nil {
		return err
	}
	copy(pd[cmaHeaderLen:], s.cfg.private)
	sid := serviceID(s.cfg.ps, s.cfg.port)
	c, err := s.eng.Connect(now, cm.ConnectParams{
		RemoteGID: ib.GIDFromAddr(s.cfg.remote), ServiceID: sid, LocalQPN: ep.qp.Num(),
		Transport: cm.TransportRC, RecvPSN: randomPSN(), PathMTU: s.dev.Port().ActiveMTU,
		RetryCount: 7, RNRRetry: 7, ACKTimeout: ackTimeout, PrivateData: pd,
	})
	if err != nil {
		return err
	}
	s.conn = c
	s.logf("REQ sent: service ID %#016x, comm ID %#08x, QPN %v, rdma_cm header %v -> %v",
		sid, c.LocalCommID, ep.qp.Num(), netip.AddrPortFrom(s.cfg.local.Unmap(), src), s.cfg.remote)
	if s.cfg.abandon == "restart" {
		// As a daemon restarted right after its REQ: a new engine that
		// knows nothing of it gets the REP.
		s.eng = s.newEngine()
		s.conn = nil
		s.logf("engine restarted: the REP will name a comm ID it does not know")
	}
	return nil
}

// ackTimeout is our QPs' local ACK timeout code: 268 ms, generous for an
// emulated guest.
const ackTimeout = 16

func randomPSN() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:]) & 0xffffff
}

// event handles the engine's reports; it runs inside HandleMAD or Expire.
func (s *session) event(ev cm.Event) {
	now := time.Now()
	c := ev.Comm
	switch ev.Type {
	case cm.EvRequest:
		s.request(now, c, ev.REQ)
	case cm.EvReply:
		s.reply(now, c, ev.REP)
	case cm.EvEstablished:
		s.logf("RTU received: connection established (comm IDs %#08x/%#08x)", c.LocalCommID, c.RemoteCommID)
	case cm.EvRejected:
		s.rejectedBy(ev.REJ)
	case cm.EvTimeout:
		s.fail("the CM gave up on the connection in %v (no answer after %d retries)", c.State, s.cfg.cmRetries)
	case cm.EvDisconnected:
		if ev.REJ != nil {
			s.fail("connection ended by REJ reason %d (%v)", ev.REJ.Reason, ev.REJ.Reason)
			return
		}
		s.disconnected = true
		s.logf("disconnected (%s)", map[bool]string{true: "our DREQ answered", false: "the peer's DREQ answered with our DREP"}[s.cfg.dreq])
	case cm.EvTimewaitDone:
	}
}

// request answers a REQ: refuse it (--reject), or check rdma_cm's header
// and accept it on a new queue pair.
func (s *session) request(now time.Time, c *cm.Comm, req *cm.REQ) {
	describeREQ(s, c, req)
	ps, port, ok := splitServiceID(req.ServiceID)
	if !ok || ps != s.cfg.ps || port != s.cfg.port {
		s.fail("REQ for service ID %#016x, listening on %#016x", req.ServiceID, serviceID(s.cfg.ps, s.cfg.port))
		_ = s.eng.Reject(c, cm.RejInvalidServiceID, nil)
		return
	}
	h, private, err := parseCMAHeader(req.PrivateData[:])
	if err != nil {
		s.fail("the REQ's private data: %v", err)
		_ = s.eng.Reject(c, cm.RejConsumerReject, nil)
		return
	}
	s.logf("  rdma_cm header: %v -> %v, consumer data %q", netip.AddrPortFrom(h.Src, h.Port), h.Dst, strings.TrimRight(string(private), "\x00"))
	if h.Dst != s.cfg.local || h.Src != c.RemoteGID.Addr() {
		s.fail("rdma_cm header names %v -> %v; the REQ came from %v to us at %v", h.Src, h.Dst, c.RemoteGID.Addr(), s.cfg.local)
		_ = s.eng.Reject(c, cm.RejConsumerReject, nil)
		return
	}
	if s.rejected < len(s.cfg.rejects) {
		r := s.cfg.rejects[s.rejected]
		s.rejected++
		if err := s.eng.Reject(c, r, nil); err != nil {
			s.fail("reject: %v", err)
			return
		}
		s.logf("REJ sent: reason %d (%v) for comm ID %#08x", r, r, c.RemoteCommID)
		if s.rejected == len(s.cfg.rejects) {
			s.pass("refused %d REQs with reasons %v", s.rejected, s.cfg.rejects)
		}
		return
	}
	if s.conn != nil || len(s.cfg.rejects) > 0 {
		s.fail("a second REQ")
		_ = s.eng.Reject(c, cm.RejNoResources, nil)
		return
	}
	if req.TransportType != cm.TransportRC {
		s.fail("REQ for transport %v, want RC", req.TransportType)
		_ = s.eng.Reject(c, cm.RejInvalidTransportType, nil)
		return
	}
	s.conn = c
	ep, err := newEndpoint(s.dev, s.cfg.count, s.cfg.size)
	if err == nil {
		s.ep = ep
		err = ep.init()
	}
	if err == nil {
		err = ep.connect(c, s.dev.Port().ActiveMTU)
	}
	if err == nil {
		err = s.eng.Accept(now, c, cm.AcceptParams{LocalQPN: ep.qp.Num(), RNRRetry: 7})
	}
	if err != nil {
		s.fail("accept: %v", err)
		_ = s.eng.Reject(c, cm.RejNoResources, nil)
		return
	}
	s.logf("REP sent: comm ID %#08x, QPN %v, receive PSN %#06x", c.LocalCommID, ep.qp.Num(), c.RecvPSN)
}

// reply handles the REP to our REQ: bring the QP up and send the RTU, or
// refuse the REP (--abandon, --expect-reject).
func (s *session) reply(now time.Time, c *cm.Comm, rep *cm.REP) {
	s.logf("REP received: comm ID %#08x, QPN %v, PSN %#06x, CA GUID %#016x, RNR retry %d, target ACK delay %d, responder resources %d, initiator depth %d, SRQ %v, failover %d, end-to-end flow control %v",
		rep.LocalCommID, rep.LocalQPN, rep.StartingPSN, rep.LocalCAGUID, rep.RNRRetryCount, rep.TargetACKDelay,
		rep.ResponderResources, rep.InitiatorDepth, rep.SRQ, rep.FailoverAccepted, rep.EndToEndFlowControl)
	switch {
	case len(s.cfg.expectReject) > 0:
		s.fail("REQ accepted, expected REJ reason %d", s.cfg.expectReject[0])
		_ = s.eng.RejectReply(c, cm.RejConsumerReject, nil)
		return
	case s.cfg.abandon == "reply":
		if err := s.eng.RejectReply(c, cm.RejConsumerReject, nil); err != nil {
			s.fail("REJ of the REP: %v", err)
			return
		}
		s.logf("REJ sent: reason %d (%v) of the REP", cm.RejConsumerReject, cm.RejConsumerReject)
		s.pass("refused the REP with REJ reason %d", cm.RejConsumerReject)
		return
	case s.cfg.abandon == "timeout":
		s.eng.Disconnect(now, c)
		s.logf("gave up on the REP: REJ reason %d (%v) sent", cm.RejTimeout, cm.RejTimeout)
		s.pass("gave up on the REP with REJ reason %d", cm.RejTimeout)
		return
	}
	if err := s.ep.connect(c, s.dev.Port().ActiveMTU); err != nil {
		s.fail("bring the QP up: %v", err)
		_ = s.eng.RejectReply(c, cm.RejNoResources, nil)
		return
	}
	if err := s.eng.Ready(c); err != nil {
		s.fail("RTU: %v", err)
		return
	}
	s.logf("RTU sent: connection established")
}

func (s *session) rejectedBy(rej *cm.REJ) {
	s.logf("REJ received: reason %d (%v), rejecting %v, ARI %x, private data %d octets non-zero",
		rej.Reason, rej.Reason, rej.MessageRejected, rej.Info(), nonZero(rej.PrivateData[:]))
	if len(s.cfg.expectReject) > 0 && rej.Reason == s.cfg.expectReject[0] {
		s.pass("REQ rejected with reason %d (%v), as expected", rej.Reason, rej.Reason)
		return
	}
	s.fail("rejected by the peer: reason %d (%v)", rej.Reason, rej.Reason)
}

func nonZero(b []byte) int {
	n := 0
	for _, x := range b {
		if x != 0 {
			n++
		}
	}
	return n
}

// progress moves the data exchange on and decides when a run is done:
// ucmatose's pattern is count messages each way, then a DREQ from the
// server side (our --dreq when we are that side).
func (s *session) progress(now time.Time) {
	if s.cfg.abandon == "restart" && !s.done {
		if n := s.eng.Stats.RejSent.Of(cm.RejInvalidCommID); n > 0 && s.eng.Stats.Unknown.Of(cm.AttrREP) > 0 {
			s.logf("REJ sent: reason %d (%v) of the unknown REP", cm.RejInvalidCommID, cm.RejInvalidCommID)
			s.pass("the REP to a forgotten REQ drew our REJ %d", cm.RejInvalidCommID)
		}
		return
	}
	if s.done || s.ep == nil || s.conn == nil {
		return
	}
	ep := s.ep
	if ep.err != nil {
		s.fail("%v", ep.err)
		return
	}
	if s.conn.State == cm.StateEstablished && !ep.sending && s.cfg.count > 0 {
		if err := ep.sendAll(); err != nil {
			s.fail("post sends: %v", err)
			return
		}
		s.logf("posted %d sends of %d octets", s.cfg.count, s.cfg.size)
	}
	dataDone := ep.sendsDone == s.cfg.count && ep.recvsDone == s.cfg.count
	if !dataDone {
		return
	}
	if s.cfg.dreq && s.conn.State == cm.StateEstablished {
		s.logf("data done: %d messages each way; DREQ sent", s.cfg.count)
		s.eng.Disconnect(now, s.conn)
		return
	}
	if s.disconnected {
		s.pass("%s: REQ/REP/RTU, %d×%d octets each way, %s", map[bool]string{true: "active", false: "passive"}[s.cfg.active],
			s.cfg.count, s.cfg.size, map[bool]string{true: "our DREQ, the peer's DREP", false: "the peer's DREQ, our DREP"}[s.cfg.dreq])
	}
}

func (s *session) poll() {
	if s.ep != nil {
		s.ep.poll()
	}
}

// report prints the engine's and softib's counters: a peer's MAD that did
// not decode, or a packet softib dropped, shows here.
func (s *session) report() {
	s.logf("engine: %s", nonZeroCounters(s.eng.Counters()))
	s.logf("softib: %s", nonZeroCounters(s.dev.Counters()))
	if s.ep != nil {
		s.logf("QP %v: %s", s.ep.qp.Num(), nonZeroCounters(s.ep.qp.Counters()))
	}
	if s.eng.Stats.Malformed != 0 && s.err == nil {
		s.err = errors.New("the peer sent CM MADs our codecs refused")
	}
	// Drops that mean softib refused a well-behaved peer's packets (a
	// retransmission dropped as out of window is not one).
	for _, c := range s.dev.Counters() {
		switch c.Name {
		case "rx_drop_malformed", "rx_drop_bad_icrc", "rx_drop_pkey", "rx_drop_qkey", "rx_drop_wrong_source", "rx_drop_too_long":
			if c.Value != 0 && s.err == nil {
				s.err = fmt.Errorf("softib dropped the peer's packets: %s %d", c.Name, c.Value)
			}
		}
	}
}

// nonZeroCounters formats the counters that are not zero.
func nonZeroCounters(cs []ib.Counter) string {
	var nz []string
	for _, c := range cs {
		if c.Value != 0 {
			nz = append(nz, fmt.Sprintf("%s %d", c.Name, c.Value))
		}
	}
	return strings.Join(nz, ", ")
}

func (s *session) close() {
	if s.ep != nil {
		s.ep.close()
	}
	s.mads.Close()
	s.dev.Close()
}

// describeREQ prints what the kernel puts in a REQ on RoCE: the fields a
// kernel peer sets that our engine must take as they come.
func describeREQ(s *session, c *cm.Comm, req *cm.REQ) {
	p := &req.Primary
	s.logf("REQ received from %v: service ID %#016x, comm ID %#08x, QPN %v, CA GUID %#016x, transport %v, PSN %#06x, path MTU %v, retry %d, RNR retry %d, CM response timeouts remote %d local %d, max CM retries %d, responder resources %d, initiator depth %d, SRQ %v, end-to-end flow control %v, P_Key %#04x",
		c.RemoteGID, req.ServiceID, req.LocalCommID, req.LocalQPN, req.LocalCAGUID, req.TransportType, req.StartingPSN,
		req.PathMTU, req.RetryCount, req.RNRRetryCount, req.RemoteCMResponseTimeout, req.LocalCMResponseTimeout,
		req.MaxCMRetries, req.ResponderResources, req.InitiatorDepth, req.SRQ, req.EndToEndFlowControl, uint16(req.PKey))
	s.logf("  primary path: LIDs %#04x -> %#04x, GIDs %v -> %v, flow label %#x, rate %d, traffic class %d, hop limit %d, SL %d, subnet local %v, local ACK timeout %d",
		p.LocalLID, p.RemoteLID, p.LocalGID, p.RemoteGID, p.FlowLabel, p.PacketRate, p.TrafficClass, p.HopLimit, p.SL, p.SubnetLocal, p.LocalACKTimeout)
}
