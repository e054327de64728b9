package cm

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/mad"
)

// SharedQP1 shares one port's QP1 among several Engines, each listening
// on its own service ID: a port has one QP1, and a provider opens its MAD
// service once. ipoibd opens one share per IPoIB interface of the port
// (the parent and its P_Key children), each for the RFC 4755 service ID
// of its UD QPN.
//
// It is generic CM, not IPoIB policy, so it stays in this package: it
// routes as the kernel's CM does for its listeners, by facts of the CM
// protocol only. A REQ or SIDR_REQ goes to the share opened for its
// service ID; every other message names the receiver's own communication
// ID, whose top octet is the tag of the Engine that chose it
// (EngineConfig.CommIDTag). IPoIB only supplies the service IDs. What
// matches no open share (a malformed MAD, a REQ for a service nobody
// listens on, a reply to an ID no Engine would choose) goes to the first
// one, whose Engine answers or counts it as an Engine alone would.
type SharedQP1 struct {
	mads ib.MADService
	done chan struct{}

	mu   sync.Mutex
	subs [256]*QP1Share // by tag; 0 is never a tag
	last int            // the tag given last: tags are reused as late as possible
}

// madQueueLen is each share's received MADs in flight; the EngineService
// above it drains them at once into its own bounded queue.
const madQueueLen = 256

// NewSharedQP1 starts dispatching what mads, the port's QP1, receives.
// Close closes mads.
func NewSharedQP1(mads ib.MADService) *SharedQP1 {
	s := &SharedQP1{mads: mads, done: make(chan struct{})}
	go s.dispatch()
	return s
}

// Open returns the share of QP1 for the Engine listening on serviceID. The
// Engine must use the share's Tag as its EngineConfig.CommIDTag.
func (s *SharedQP1) Open(serviceID uint64) (*QP1Share, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return nil, ib.ErrClosed
	default:
	}
	for tag := 1; tag < len(s.subs); tag++ {
		if sub := s.subs[tag]; sub != nil && sub.serviceID == serviceID {
			return nil, fmt.Errorf("cm: QP1 already serves service ID %#016x", serviceID)
		}
	}
	// A removed interface's tag is given out last, so that the replies
	// and DREQs still on their way to it meet no new Engine.
	for k := 1; k < len(s.subs); k++ {
		tag := (s.last+k-1)%(len(s.subs)-1) + 1
		if s.subs[tag] == nil {
			sub := &QP1Share{s: s, tag: uint8(tag), serviceID: serviceID, recv: make(chan ib.MAD, madQueueLen)}
			s.subs[tag], s.last = sub, tag
			return sub, nil
		}
	}
	return nil, fmt.Errorf("cm: QP1 already serves %d interfaces", len(s.subs)-1)
}

// Close closes the port's QP1; the shares close with it.
func (s *SharedQP1) Close() error {
	err := s.mads.Close()
	<-s.done
	return err
}

func (s *SharedQP1) dispatch() {
	defer func() {
		s.mu.Lock()
		for tag, sub := range s.subs {
			if sub != nil {
				close(sub.recv)
				s.subs[tag] = nil
			}
		}
		close(s.done)
		s.mu.Unlock()
	}()
	for m := range s.mads.Recv() {
		s.mu.Lock()
		if sub := s.route(&m); sub != nil {
			select {
			case sub.recv <- m:
			default:
				sub.dropped.Add(1) // the peer retransmits
			}
		}
		s.mu.Unlock()
	}
}

// route picks the share a MAD is for; s.mu is held. It reads the few
// fields it needs where every CM message keeps them and leaves checking
// the rest to the Engine, which decodes the MAD anyway.
func (s *SharedQP1) route(m *ib.MAD) *QP1Share {
	var sub *QP1Share
	h, err := mad.DecodeHeader(m.Data[:])
	body := m.Data[mad.HeaderLen:]
	if err == nil && h.MgmtClass == mad.ClassCM {
		switch AttrID(h.AttributeID) {
		case AttrREQ, AttrSIDRREQ:
			sub = s.byServiceID(binary.BigEndian.Uint64(body[8:16]))
		case AttrREP, AttrRTU, AttrREJ, AttrMRA, AttrDREQ, AttrDREP, AttrLAP, AttrAPR:
			// The receiver's own comm ID, its "remote" one to the sender.
			sub = s.subs[body[4]]
		}
	}
	if sub != nil {
		return sub
	}
	for _, sub := range s.subs {
		if sub != nil {
			return sub
		}
	}
	return nil
}

func (s *SharedQP1) byServiceID(id uint64) *QP1Share {
	for _, sub := range s.subs {
		if sub != nil && sub.serviceID == id {
			return sub
		}
	}
	return nil
}

// QP1Share is one Engine's share of a port's QP1; it implements
// ib.MADService.
type QP1Share struct {
	s         *SharedQP1
	tag       uint8
	serviceID uint64
	recv      chan ib.MAD
	dropped   atomic.Uint64
}

// Tag is the top octet of every communication ID this share's Engine chooses.
func (m *QP1Share) Tag() uint8 { return m.tag }

// Send transmits on the port's QP1.
func (m *QP1Share) Send(to ib.MADAddr, mad []byte) error { return m.s.mads.Send(to, mad) }

// Recv returns the MADs for this share's Engine.
func (m *QP1Share) Recv() <-chan ib.MAD { return m.recv }

// Close stops this share; the port's QP1 stays open for the
// others.
func (m *QP1Share) Close() error {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	if m.s.subs[m.tag] == m {
		m.s.subs[m.tag] = nil
		close(m.recv)
	}
	return nil
}

// Counters counts the MADs dropped because this share was full,
// then the port's QP1 counters (if its transport counts).
func (m *QP1Share) Counters() []ib.Counter {
	out := []ib.Counter{{Name: "mad_drop_split_full", Value: m.dropped.Load()}}
	if c, ok := m.s.mads.(interface{ Counters() []ib.Counter }); ok {
		out = append(out, c.Counters()...)
	}
	return out
}

// String names the transport below.
func (m *QP1Share) String() string {
	if s, ok := m.s.mads.(fmt.Stringer); ok {
		return s.String()
	}
	return "QP1"
}
