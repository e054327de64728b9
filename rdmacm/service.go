//go:build rdma

package rdmacm

/*
#cgo LDFLAGS: -lrdmacm -libverbs
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/verbs"
)

// Service is the kernel's IB CM reached through librdmacm: the connection
// service the ipoibcm.Manager runs on with rdma-core adapters when the kernel
// owns QP1 (so the cm.Engine cannot). Its rdma_cm ids live on the verbs
// Device's own context, which librdmacm handed out, so they and the
// Manager's QPs share it. The QPs stay the Manager's: librdmacm only
// carries their numbers, and the Manager moves them to RTS itself with the
// attributes the kernel CM reports (rdma_init_qp_attr), which is what makes
// both sides agree on PSNs and path MTU.
//
// Like the Engine it is driven by one goroutine: its owner waits on Wake
// and calls Poll, which reports events; every other method is called on
// that goroutine too (String and Counters excepted). Addressing is in
// addr.go.
type Service struct {
	dev    string           // the device's name, for messages
	gid    ib.GID           // the port's GID: our address
	at     verbs.RDMACMPort // the context and port our ids must be on
	events func(cm.Event)
	mode   addrMode
	scope  int     // IPv6 link-local: the GID's interface
	pkey   ib.PKey // AF_IB addresses: the port's default partition
	// rfcIDs: Connect asks for RFC 4755's service ID itself (AF_IB, no
	// mapping, no pad), as a kernel ipoib peer listens (NewRFCSender).
	rfcIDs bool

	ch   *C.struct_rdma_event_channel
	stop func() // ends the watcher of ch
	wake chan struct{}

	info      sync.Mutex // listener, serviceID, port: String reads them from other goroutines
	listener  cmID
	serviceID uint64
	port      uint16

	byID     map[cmID]*conn
	byComm   map[*cm.Comm]*conn
	halfOpen int
	later    []cm.Event  // reports for the next Poll, from calls that must not report themselves
	ev       *cmEventBuf // its own allocation: cgo checks the whole object a pointer points into
	ctr      counters
	closed   bool
}

var _ cm.Service = (*Service)(nil)

// conn is one rdma_cm id and the connection it carries.
type conn struct {
	id   cmID
	c    *cm.Comm
	step connStep
	priv []byte // the REQ's private data, kept until rdma_connect
}

// connStep is where an outgoing connection is before its REQ is sent.
type connStep uint8

const (
	stepSent  connStep = iota // REQ sent, or a passive connection
	stepAddr                  // rdma_resolve_addr under way
	stepRoute                 // rdma_resolve_route under way
)

// Limits, as the Engine's defaults: beyond them a REQ is refused and
// Connect fails with cm.ErrTooMany.
const (
	maxConns    = 4096
	maxHalfOpen = 256
)

const (
	resolveMs   = 5000 // address and route resolution (generous: test beds run under emulation)
	cmPollBatch = 64   // events per Poll before the owner gets a turn
	qpTypeAny   = 0    // a listener for any QP type (cma_ib_check_req_qp_type)
)

// New makes the kernel CM connection service on dev, a device of the verbs
// provider opened through librdmacm (verbs.Config.NoRDMACM unset); events
// gets the connection events, from Poll only. Close the service before the
// device.
func New(dev ib.Device, events func(cm.Event)) (cm.Service, error) {
	s, err := newService(dev, events)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// NewRFCSender is the kernel CM's connection service for a node where
// ib_cm is loaded but the peers are the kernel's ipoib: its connections go
// to RFC 4755's service IDs themselves, through rdma_cm's AF_IB active
// side, which puts a destination's service ID in the REQ as it is and our
// private data at octet 0. Only outgoing connections: rdma_cm cannot listen
// on those IDs, so the interface offers no connected mode (ipoib's
// Config.SendOnly) and peers send to it over UD. AF_IB needs an InfiniBand
// port: on RoCE it is refused here. Judged on paper only (docs/hardware.md).
func NewRFCSender(dev ib.Device, events func(cm.Event)) (cm.Service, error) {
	s, err := newService(dev, events)
	if err != nil {
		return nil, err
	}
	if s.mode != modeIB {
		_ = s.Close()
		return nil, fmt.Errorf("rdmacm: connections to RFC 4755 service IDs need an InfiniBand port (rdma_cm's AF_IB); %s is %s", s.dev, s.mode)
	}
	s.rfcIDs = true
	return s, nil
}

func newService(dev ib.Device, events func(cm.Event)) (*Service, error) {
	d, ok := dev.(*verbs.Device)
	if !ok {
		return nil, fmt.Errorf("rdmacm: the kernel CM service runs on a device of the verbs provider, not %T", dev)
	}
	if events == nil {
		return nil, errors.New("rdmacm: the kernel CM service needs an events function")
	}
	at, err := d.RDMACMPort()
	if err != nil {
		return nil, err
	}
	port := d.Port()
	s := &Service{
		dev: d.Name(), gid: port.GID, at: at, events: events, mode: modeFor(at.Ethernet, port.GID), pkey: port.PKeys[0],
		wake: make(chan struct{}, 1), byID: map[cmID]*conn{}, byComm: map[*cm.Comm]*conn{}, ev: new(cmEventBuf),
	}
	if s.mode == modeIPv6 && port.GID.Addr().IsLinkLocalUnicast() {
		s.scope = at.Ifindex
	}
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return nil, fmt.Errorf("%w (is the rdma_ucm module loaded, and /dev/infiniband/rdma_cm readable?)", callError("rdma_create_event_channel", cgoErrno(err)))
	}
	s.ch = ch
	if s.stop, err = verbs.WatchFD(int(ch.fd), s.dev+" rdma_cm events", s.signal); err != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, err
	}
	return s, nil
}

// signal is the watcher's drain function: it only wakes the owner, whose
// Poll takes the events. That is enough for the runtime poller, which
// waits edge-triggered: the kernel wakes the channel's pollers for every
// event it queues (ucma_event_handler), so an event that arrives after
// Poll's last read wakes the watcher again.
func (s *Service) signal() bool {
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return false
}

// Wake is signalled when events are pending.
func (s *Service) Wake() <-chan struct{} { return s.wake }

// addr is our address (port 0: any) or a peer's.
func (s *Service) addr(gid ib.GID, port uint16) *sockaddr {
	return addrFor(s.mode, gid, port, s.scope, s.pkey)
}

// checkDevice makes sure rdma_cm put an id on our device and port: with IP
// addresses it picks the device by the address and route, and a wrong
// route (two RoCE devices on one host) silently uses the other one.
func (s *Service) checkDevice(id cmID) error {
	if unsafe.Pointer(id.verbs) == s.at.Context && uint8(id.port_num) == s.at.Port {
		return nil
	}
	other := "no device"
	if id.verbs != nil {
		other = fmt.Sprintf("%s port %d", C.GoString(C.ibv_get_device_name(id.verbs.device)), id.port_num)
	}
	return fmt.Errorf("rdmacm: rdma_cm put the connection on %s, not %s port %d: check the routing of %v (on one host with two RoCE devices, policy routing must send each device's traffic out of its own interface)",
		other, s.dev, s.at.Port, s.gid)
}

// Listen makes connection requests for an IPoIB-CM service ID reach the
// events function, on the port the service ID maps to (addr.go).
func (s *Service) Listen(serviceID uint64) error {
	if s.closed {
		return ib.ErrClosed
	}
	if s.listener != nil {
		if serviceID == s.serviceID {
			return nil
		}
		return fmt.Errorf("rdmacm: already listening for service ID %#x; one service listens once", s.serviceID)
	}
	port, err := servicePort(serviceID)
	if err != nil {
		return err
	}
	id, err := createID(s.ch, s.addr(s.gid, port), qpTypeAny)
	if err != nil {
		s.ctr.fail("rdma_create_ep")
		return fmt.Errorf("%w (binding %s %v port %d%s)", err, s.mode, s.gid, port, s.listenHint(err))
	}
	if err := s.checkDevice(id); err != nil {
		s.destroy(id)
		return err
	}
	if err := listenOn(id, maxHalfOpen); err != nil {
		s.ctr.fail("rdma_listen")
		s.destroy(id)
		return err
	}
	s.info.Lock()
	s.listener, s.serviceID, s.port = id, serviceID, port
	s.info.Unlock()
	return nil
}

func (s *Service) listenHint(err error) string {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return ": another interface on this address listens on the same port (UD QPNs 64512 apart share one)"
	case s.mode == modeIB && errors.Is(err, syscall.EINVAL):
		return ": AF_IB needs librdmacm and a kernel with AF_IB support"
	}
	return ""
}

// Next is zero: the kernel runs the CM's timers.
func (s *Service) Next() time.Time { return time.Time{} }

// Expire does nothing: the kernel runs the CM's timers.
func (s *Service) Expire(now time.Time) {}

// Counters returns events by type, failed librdmacm calls by name and the
// connection gauges.
func (s *Service) Counters() []ib.Counter { return s.ctr.snapshot() }

// String names what is in use, e.g. "kernel CM via librdmacm on rxe0
// port 1, AF_INET (RoCE) 192.0.2.1, RDMA_PS_IB port 1041 for IPoIB
// service ID 0x1000000000000011".
func (s *Service) String() string {
	gid := s.gid
	addr := gid.String()
	if s.mode == modeIPv4 {
		addr = gid.Addr().String()
	}
	out := fmt.Sprintf("kernel CM via librdmacm on %s port %d, %s %s", s.dev, s.at.Port, s.mode, addr)
	s.info.Lock()
	defer s.info.Unlock()
	switch {
	case s.listener == nil:
		return out + ", not listening"
	case s.mode == modeIB:
		return out + fmt.Sprintf(", service ID %#016x (RDMA_PS_IB port %d) for IPoIB service ID %#x", sidOf(s.port), s.port, s.serviceID)
	}
	return out + fmt.Sprintf(", RDMA_PS_IB port %d for IPoIB service ID %#x", s.port, s.serviceID)
}

// Close destroys every id, the listener and the event channel; the Manager
// is closed first. It is idempotent.
func (s *Service) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.stop()
	var errs []error
	for _, cn := range s.byID {
		errs = append(errs, s.destroy(cn.id))
		cn.c.State = cm.StateIdle
	}
	clear(s.byID)
	clear(s.byComm)
	s.halfOpen, s.later = 0, nil
	s.ctr.gauges(0, 0)
	s.info.Lock()
	if s.listener != nil {
		errs = append(errs, s.destroy(s.listener))
		s.listener = nil
	}
	s.info.Unlock()
	C.rdma_destroy_event_channel(s.ch)
	return errors.Join(errs...)
}

// add records a new connection in state st.
func (s *Service) add(cn *conn, st cm.State) {
	s.byID[cn.id] = cn
	s.byComm[cn.c] = cn
	s.setState(cn, st)
}

// setState moves a connection to st, keeping the half-open count.
func (s *Service) setState(cn *conn, st cm.State) {
	if halfOpen(cn.c.State) {
		s.halfOpen--
	}
	cn.c.State = st
	if halfOpen(st) {
		s.halfOpen++
	}
	s.ctr.gauges(len(s.byID), s.halfOpen)
}

func halfOpen(st cm.State) bool {
	switch st {
	case cm.StateREQSent, cm.StateREQRcvd, cm.StateREPSent, cm.StateREPRcvd:
		return true
	}
	return false
}

// forget destroys a connection's id and leaves it in StateIdle. Every event
// read was acknowledged when read, so rdma_destroy_id never waits.
func (s *Service) forget(cn *conn) {
	if s.byID[cn.id] != cn {
		return
	}
	delete(s.byID, cn.id)
	delete(s.byComm, cn.c)
	s.setState(cn, cm.StateIdle)
	_ = s.destroy(cn.id)
}

func (s *Service) destroy(id cmID) error {
	if err := destroyID(id); err != nil {
		s.ctr.fail("rdma_destroy_id")
		return err
	}
	return nil
}

func (s *Service) reject(cn *conn, private []byte) error {
	if err := rejectID(cn.id, private); err != nil {
		s.ctr.fail("rdma_reject")
		return err
	}
	return nil
}
