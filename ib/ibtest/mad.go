package ibtest

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/ipoibd/ipoibd/ib"
)

// madLen is the size of every management datagram.
const madLen = 256

// madQueue bounds the MADs waiting for their reader; beyond it they are
// dropped and counted, as softib does.
const madQueue = 256

// madService is QP1 of a device: MADs go out as datagrams with the GSI
// Q_Key and come back through a bounded channel.
type madService struct {
	dev    *Device
	recv   chan ib.MAD
	mu     sync.Mutex
	closed bool
}

// MADs opens QP1's management-datagram service; one owner at a time.
func (d *Device) MADs() (ib.MADService, error) {
	if d.closed.Load() {
		return nil, ib.ErrClosed
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mads != nil {
		return nil, errors.New("ibtest: the MAD service is already open")
	}
	d.mads = &madService{dev: d, recv: make(chan ib.MAD, madQueue)}
	return d.mads, nil
}

// String names the transport, e.g. "ibtest0 on an in-memory fabric".
func (m *madService) String() string { return fmt.Sprintf("%s on an in-memory fabric", m.dev.name) }

func (m *madService) Recv() <-chan ib.MAD { return m.recv }

// Send transmits one MAD to the QP to names (QP1 when 0) with to.PKey (the
// port's default when 0). From a port with a LID, a MAD whose address
// names a LID goes there with a GRH only if asked (its GID may then be
// zero), as the kernel's ib_umad sends it.
func (m *madService) Send(to ib.MADAddr, mad []byte) error {
	if len(mad) != madLen {
		return errorf("MAD of %d octets, want %d", len(mad), madLen)
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return ib.ErrClosed
	}
	d := m.dev
	byLID := d.port.LID != 0 && to.LIDRouted()
	if (to.GID == (ib.GID{}) && !byLID) || to.GID.IsMulticast() {
		return errorf("MAD destination %v", to.GID)
	}
	p := &packet{kind: kindMAD, sgid: d.port.GID, dgid: to.GID, srcQPN: ib.QP1, dstQPN: to.QPN,
		pkey: to.PKey, qkey: ib.GSIQKey, data: slices.Clone(mad)}
	d.route(p, to.Path)
	if p.pkey == 0 {
		p.pkey = d.port.PKeys[0]
	}
	switch p.dstQPN {
	case 0:
		p.dstQPN = ib.QP1
	case ib.QP1:
	default:
		p.kind = kindUD // to a UD QP of the peer, as a datagram like any other
	}
	d.count(txMessages)
	d.ctr[txBytes].Add(madLen)
	d.fab.send(p)
	return nil
}

// recvMAD passes a datagram for QP1 to the MAD service, if one is open
// (delivery goroutine).
func (d *Device) recvMAD(p *packet) {
	if p.qkey != ib.GSIQKey {
		d.count(dropQKey)
		return
	}
	d.mu.Lock()
	m := d.mads
	d.mu.Unlock()
	if m == nil {
		d.count(dropNoRecv)
		return
	}
	from := ib.MADAddr{GID: p.sgid, QPN: p.srcQPN, PKey: p.pkey}
	if p.slid != 0 {
		// As ib_umad reports it: the way back is the sender's LID and SL,
		// with its GRH only if one came.
		from.Path = ib.Path{DLID: p.slid, SL: p.sl, GRH: p.grh}
		if p.grh {
			from.Path.HopLimit = 0xff
		} else {
			from.GID = ib.GID{}
		}
	}
	m.deliver(from, p.data)
}

func (m *madService) deliver(from ib.MADAddr, b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		m.dev.count(dropNoRecv)
		return
	}
	if len(b) != madLen {
		m.dev.count(dropMalformed)
		return
	}
	mad := ib.MAD{From: from}
	copy(mad.Data[:], b)
	select {
	case m.recv <- mad:
	default:
		m.dev.count(dropNoRecv)
	}
}

// Close stops the service and closes its Recv channel.
func (m *madService) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		close(m.recv)
		m.dev.mu.Lock()
		if m.dev.mads == m {
			m.dev.mads = nil
		}
		m.dev.mu.Unlock()
	}
	return nil
}
