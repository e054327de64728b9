package cm

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
)

// MADSplitter shares one port's QP1 between the CM engines of several
// IPoIB interfaces on that port (P_Key children): a port has one QP1, and
// a provider opens its MAD service once. A REQ goes to the interface
// whose UD QPN its RFC 4755 service ID names; every other message names
// the receiver's own communication ID, whose top octet is the tag of the
// engine that chose it (EngineConfig.CommIDTag). What matches no open
// engine (a malformed MAD, a REQ for no interface, a reply to an ID no
// engine would choose) goes to the first one, which answers or counts it
// as an engine alone would.
type MADSplitter struct {
	mads ib.MADService
	done chan struct{}

	mu   sync.Mutex
	subs [256]*SplitMADs // by tag; 0 is never a tag
	last int             // the tag given last: tags are reused as late as possible
}

// madQueueLen is each engine's share of received MADs in flight; the
// MADEngine above it drains it at once into its own bounded queue.
const madQueueLen = 256

// NewMADSplitter starts dispatching what mads receives. Close closes mads.
func NewMADSplitter(mads ib.MADService) *MADSplitter {
	s := &MADSplitter{mads: mads, done: make(chan struct{})}
	go s.dispatch()
	return s
}

// Open returns the MAD service of the interface whose UD QP is udQPN. Its
// engine must use Tag as EngineConfig.CommIDTag.
func (s *MADSplitter) Open(udQPN ib.QPN) (*SplitMADs, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return nil, ib.ErrClosed
	default:
	}
	for tag := 1; tag < len(s.subs); tag++ {
		if sub := s.subs[tag]; sub != nil && sub.qpn == udQPN {
			return nil, fmt.Errorf("cm: QP1 already serves UD QPN %v", udQPN)
		}
	}
	// A removed interface's tag is given out last, so that the replies
	// and DREQs still on their way to it meet no new engine.
	for k := 1; k < len(s.subs); k++ {
		tag := (s.last+k-1)%(len(s.subs)-1) + 1
		if s.subs[tag] == nil {
			sub := &SplitMADs{s: s, tag: uint8(tag), qpn: udQPN, recv: make(chan ib.MAD, madQueueLen)}
			s.subs[tag], s.last = sub, tag
			return sub, nil
		}
	}
	return nil, fmt.Errorf("cm: QP1 already serves %d interfaces", len(s.subs)-1)
}

// Close closes the port's MAD service; the engines' services close with it.
func (s *MADSplitter) Close() error {
	err := s.mads.Close()
	<-s.done
	return err
}

func (s *MADSplitter) dispatch() {
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

// route picks the engine a MAD is for; s.mu is held. It reads the few
// fields it needs where every CM message keeps them and leaves checking
// the rest to the engine, which decodes the MAD anyway.
func (s *MADSplitter) route(m *ib.MAD) *SplitMADs {
	var sub *SplitMADs
	h, err := DecodeMADHeader(m.Data[:])
	body := m.Data[MADHeaderLen:]
	if err == nil && h.MgmtClass == MgmtClassCM {
		switch h.AttributeID {
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

func (s *MADSplitter) byServiceID(id uint64) *SplitMADs {
	qpn, err := ParseIPoIBServiceID(id)
	if err != nil {
		return nil
	}
	for _, sub := range s.subs {
		if sub != nil && sub.qpn == qpn {
			return sub
		}
	}
	return nil
}

// SplitMADs is one engine's share of a port's QP1; it implements
// ib.MADService.
type SplitMADs struct {
	s       *MADSplitter
	tag     uint8
	qpn     ib.QPN
	recv    chan ib.MAD
	dropped atomic.Uint64
}

// Tag is the top octet of every communication ID this engine chooses.
func (m *SplitMADs) Tag() uint8 { return m.tag }

// Send transmits on the port's QP1.
func (m *SplitMADs) Send(to ib.MADAddr, mad []byte) error { return m.s.mads.Send(to, mad) }

// Recv returns the MADs for this engine.
func (m *SplitMADs) Recv() <-chan ib.MAD { return m.recv }

// Close stops this engine's share; the port's QP1 stays open for the
// others.
func (m *SplitMADs) Close() error {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	if m.s.subs[m.tag] == m {
		m.s.subs[m.tag] = nil
		close(m.recv)
	}
	return nil
}

// Counters counts the MADs dropped because this engine's share was full,
// then the port's QP1 counters (if its transport counts).
func (m *SplitMADs) Counters() []ib.Counter {
	out := []ib.Counter{{Name: "mad_drop_split_full", Value: m.dropped.Load()}}
	if c, ok := m.s.mads.(interface{ Counters() []ib.Counter }); ok {
		out = append(out, c.Counters()...)
	}
	return out
}

// String names the transport below.
func (m *SplitMADs) String() string {
	if s, ok := m.s.mads.(fmt.Stringer); ok {
		return s.String()
	}
	return "QP1"
}
