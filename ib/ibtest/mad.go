package ibtest

import (
	"fmt"
	"slices"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibqueue"
)

// madLen is the size of every management datagram.
const madLen = ibqueue.MADLen

// madQueue bounds the MADs waiting for their reader; beyond it they are
// dropped and counted, as softib does.
const madQueue = 256

// madService is QP1 of a device: MADs go out as datagrams with the GSI
// Q_Key and come back through a bounded queue (ibqueue.MADQueue).
type madService struct {
	*ibqueue.MADQueue
	dev *Device
}

// MADs opens QP1's management-datagram service; one owner at a time.
func (d *Device) MADs() (ib.MADService, error) {
	if d.closed.Load() {
		return nil, ib.ErrClosed
	}
	q, err := d.mads.Open(madQueue, false)
	if err != nil {
		return nil, errorf("%v", err)
	}
	return &madService{MADQueue: q, dev: d}, nil
}

// String names the transport, e.g. "ibtest0 on an in-memory fabric".
func (m *madService) String() string { return fmt.Sprintf("%s on an in-memory fabric", m.dev.name) }

// Send transmits one MAD to the QP to names (QP1 when 0) with to.PKey (the
// port's default when 0). From a port with a LID, a MAD whose address
// names a LID goes there with a GRH only if asked (its GID may then be
// zero), as the kernel's ib_umad sends it.
func (m *madService) Send(to ib.MADAddr, mad []byte) error {
	if len(mad) != madLen {
		return errorf("MAD of %d octets, want %d", len(mad), madLen)
	}
	if m.Closed() {
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
		d.count(ibqueue.DropQKey)
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
	switch d.mads.Deliver(from, p.data) {
	case ibqueue.MADQueued:
	case ibqueue.MADMalformed:
		d.count(ibqueue.DropMalformed)
	default: // none open, closing, or the queue full
		d.count(ibqueue.DropNoRecv)
	}
}
