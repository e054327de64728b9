package forge

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/neigh"
)

// UDSender sends IPoIB datagrams to one node from a UD QP of its own on a
// device (a softib one in the tools that use it): for paced floods of what
// any node may send (neighbor solicitations), where a Sender's packets
// would need a QP to come from.
type UDSender struct {
	qp   ib.QP
	cq   ib.CQ
	ah   ib.AH
	mr   ib.MR
	slab *ib.Slab
	to   ib.LinkAddr
	self ib.LinkAddr
}

// udSlot is the octets of each message buffer; udSlots buffers.
const (
	udSlot  = 256
	udSlots = 256
)

// NewUDSender makes a UD QP on dev that sends to the IPoIB node to.
func NewUDSender(dev ib.Device, to ib.LinkAddr) (*UDSender, error) {
	u := &UDSender{to: to}
	var err error
	if u.cq, err = dev.CreateCQ(1024); err != nil {
		return nil, err
	}
	if u.qp, err = dev.CreateQP(ib.QPAttr{Type: ib.UD, SendCQ: u.cq, RecvCQ: u.cq, MaxSend: udSlots, MaxRecv: 1}); err != nil {
		return nil, err
	}
	for _, m := range []ib.QPModify{{State: ib.StateInit, PKey: ib.DefaultPKey, QKey: ib.DefaultIPoIBQKey},
		{State: ib.StateRTR}, {State: ib.StateRTS}} {
		if err := u.qp.Modify(m); err != nil {
			return nil, err
		}
	}
	if u.slab, err = ib.NewSlab(udSlots * udSlot); err != nil {
		return nil, err
	}
	if u.mr, err = dev.RegisterMemory(u.slab); err != nil {
		_ = u.slab.Close()
		return nil, err
	}
	if u.ah, err = dev.CreateAH(ib.AHAttr{DestGID: to.GID}); err != nil {
		_ = u.slab.Close()
		return nil, err
	}
	u.self = ib.LinkAddr{QPN: u.qp.Num(), GID: dev.Port().GID}
	return u, nil
}

// Self is the sender's own link address.
func (u *UDSender) Self() ib.LinkAddr { return u.self }

// Close releases the message buffers; the device's Close the rest.
func (u *UDSender) Close() error { return u.slab.Close() }

// Run sends n messages that build makes into a buffer (returning their
// length), rate a second in bursts every 10 ms, counting them in sent.
func (u *UDSender) Run(rate, n int, sent *atomic.Int64, build func(buf []byte, k int) (int, error)) error {
	if rate < 1 {
		return fmt.Errorf("forge: rate %d: want at least 1", rate)
	}
	var wc [64]ib.Completion
	var wr [1]ib.SendWR
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	k := 0
	for k < n {
		now := <-tick.C
		for due := min(n, int(now.Sub(start).Seconds()*float64(rate))); k < due; k++ {
			for u.cq.Poll(wc[:]) > 0 {
			}
			slot := k % udSlots
			l, err := build(u.mr.Slab().Bytes()[slot*udSlot:(slot+1)*udSlot], k)
			if err != nil {
				return err
			}
			wr[0] = ib.SendWR{ID: uint64(slot), SGE: ib.SGE{MR: u.mr, Offset: slot * udSlot, Length: l},
				AH: u.ah, RemoteQPN: u.to.QPN, RemoteQKey: ib.DefaultIPoIBQKey}
			if _, err := u.qp.PostSend(wr[:]); err != nil {
				return fmt.Errorf("forge: post %d: %w", k, err)
			}
			sent.Add(1)
		}
	}
	return nil
}

// Solicitation builds into buf the IPoIB datagram of a neighbor
// solicitation for target from src, claiming the link address claim.
func Solicitation(buf []byte, src, target netip.Addr, claim ib.LinkAddr) (int, error) {
	m := neigh.NeighborMessage{Type: neigh.TypeNeighborSolicitation, Target: target, LinkAddr: claim, HasLinkAddr: true}
	l, err := m.EncodeIPv6(buf[encap.HeaderLen:], src, neigh.SolicitedNode(target))
	if err != nil {
		return 0, err
	}
	if err := encap.PutHeader(buf, encap.EtherTypeIPv6); err != nil {
		return 0, err
	}
	return encap.HeaderLen + l, nil
}
