package softib

import (
	"fmt"
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibqueue"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// madLen is the size of every management datagram.
const madLen = ibqueue.MADLen

// madService carries MADs over QP1: UD sends with the GSI Q_Key, and
// received MADs handed to the CM engine through a bounded queue
// (ibqueue.MADQueue).
type madService struct {
	*ibqueue.MADQueue
	dev *Device
}

// madQueue bounds the MADs waiting for the CM engine; beyond it they are
// dropped and counted, so a flood cannot exhaust memory. Each source gets
// a fair share of it (package madqueue), so a flood from one host cannot
// have another host's MADs dropped here.
const madQueue = 256

// MADs opens QP1's management-datagram service.
func (d *Device) MADs() (ib.MADService, error) {
	q, err := d.mads.Open(madQueue, true)
	if err != nil {
		return nil, errorf("%w", err)
	}
	return &madService{MADQueue: q, dev: d}, nil
}

// String names the transport, e.g. "softib0 over UDP 10.77.0.1:4791".
func (m *madService) String() string {
	return fmt.Sprintf("%s over UDP %v", m.dev.cfg.Name, netip.AddrPortFrom(m.dev.cfg.Addr, m.dev.cfg.Port))
}

// Send transmits one MAD to QP1 of the peer.
func (m *madService) Send(to ib.MADAddr, mad []byte) error {
	if len(mad) != madLen {
		return errorf("MAD of %d octets, want %d", len(mad), madLen)
	}
	d := m.dev
	dst := to.GID.Addr()
	var r ibRoute
	if d.ibp != nil {
		// As ib_umad sends a MAD: to the LID, SL and source path bits
		// given, with a GRH only when the address asks for one. A MAD
		// without a LID goes to LID 0, where the fabric drops it.
		r = d.route(to.Path, to.GID)
	} else if !dst.IsValid() || dst.Is4() != d.fab.v4 {
		return errorf("MAD destination %v is not reachable on this underlay", to.GID)
	}
	// The P_Key goes out with the membership the port holds, as ib_umad
	// sends the table entry at a P_Key index; one outside the table goes
	// as given, for tests that forge another partition's MADs.
	pkey := to.PKey
	if pkey == 0 {
		pkey = d.pkeys()[0]
	} else if mine, ok := d.tableKey(pkey); ok {
		pkey = mine
	}
	qpn := to.QPN
	if qpn == 0 {
		qpn = ib.QP1
	}
	q := d.gsi
	q.mu.Lock()
	defer q.mu.Unlock()
	bth := wire.BTH{Opcode: wire.OpUDSendOnly, PKey: pkey, DestQP: qpn, PSN: q.req.next, SE: true}
	q.req.next = q.req.next.Add(1)
	deth := wire.DETH{QKey: ib.GSIQKey, SrcQP: ib.QP1}
	tx := txPool.Get().(*txMsg)
	defer txPool.Put(tx)
	tx.reset()
	d.frame(tx, 0, &bth, &deth, mad, dst, &r)
	err := d.fab.send(tx, dst, 0)
	d.countTx(tx, err)
	if err != nil {
		return errorf("send MAD to %v: %v", to.GID, err)
	}
	q.ctr.txMessages.Add(1)
	return nil
}
