package ipoib

import (
	"fmt"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/sa"
)

// The UD QP after the subnet changed under it. Its Q_Key is the broadcast
// group's, which the SA may change when it makes the group again (an SM
// restart, a client reregister), and its P_Key index is the partition's
// place in the port's P_Key table, which the SM may rewrite. The kernel's
// ipoib follows both: a new Q_Key is set on the QP when the broadcast join
// completes (ipoib_mcast_join_finish, ipoib_mcast_attach with set_qkey),
// and a P_Key change that moves the partition's index stops the QP and
// opens it again (the heavy flush, __ipoib_ib_dev_flush: ipoib_ib_dev_stop
// and ipoib_ib_dev_open, which runs the QP through RESET and back to RTS
// with the new index). Both keep the QP and its number, which is part of
// our link address every peer and neighbor cache holds, so a new QP is not
// made: the same one goes through RESET to RTS again. The provider
// interface has no RTS-to-RTS Q_Key change, so that path serves both.

// qKey is the UD QP's Q_Key.
func (i *Interface) qKey() ib.QKey { return ib.QKey(i.qkey.Load()) }

// readyUD brings the UD QP from RESET to RTS with qkey in our partition
// and posts every UD receive slot.
func (i *Interface) readyUD(qkey ib.QKey) error {
	for _, m := range []ib.QPModify{
		{State: ib.StateInit, PKey: i.port.pkey, QKey: qkey},
		{State: ib.StateRTR},
		{State: ib.StateRTS},
	} {
		if err := i.udQP.Modify(m); err != nil {
			return fmt.Errorf("ipoib: UD QP to %v: %w", m.State, err)
		}
	}
	lay := i.slots.lay
	wrs := make([]ib.RecvWR, 0, lay.udRx)
	for s := lay.firstUDRx(); s < lay.slots(); s++ {
		wrs = append(wrs, ib.RecvWR{ID: uint64(s), SGE: i.slots.recvSGE(s)})
	}
	_, err := i.udQP.PostRecv(wrs)
	return err
}

// reinitUD runs the UD QP through RESET and back to RTS with qkey, keeping
// its number, then attaches it to its groups again (a QP in RESET may
// have lost them). The port's receive path is held meanwhile: what the QP
// had received is handled, its flushed slots are posted again with the
// rest.
// Sends posted meanwhile are refused and counted (tx_drop_post); traffic
// goes on once it is back.
func (c *control) reinitUD(qkey ib.QKey) error {
	i := c.i
	p := i.pool
	p.rxMu.Lock()
	if i.stopping.Load() {
		p.rxMu.Unlock()
		return nil
	}
	err := i.udQP.Modify(ib.QPModify{State: ib.StateReset})
	if err == nil {
		i.udHeld = true
		p.drainLocked()
		i.udHeld = false
		i.qkey.Store(uint32(qkey))
		err = i.readyUD(qkey)
	}
	p.rxMu.Unlock()
	i.ctr.inc(udReinits)
	if err != nil {
		return err
	}
	c.reattach()
	return nil
}

// reattach attaches the UD QP to the broadcast group and every group it
// is in again, with their current MLIDs.
func (c *control) reattach() {
	i := c.i
	groups := map[ib.GID]uint16{encap.BroadcastMGID(i.port.pkey, encap.LinkLocal): i.port.bcast.MLID}
	for mgid := range c.groups {
		groups[mgid] = c.groupRecs[mgid].rec.MLID
	}
	for mgid, mlid := range groups {
		_ = i.dev.DetachMulticast(i.udQP, mgid)
		if err := i.dev.AttachMulticast(i.udQP, mgid, mlid); err != nil {
			i.log.Warn("attaching the UD QP to a multicast group again", "mgid", mgid, "err", err)
		}
	}
}

// followBroadcast takes the broadcast group as the SA answered a join
// after a subnet event. A new Q_Key is set on the UD QP (every send names
// it from now on), a new MLID is attached, a new path (MLID, SL, rate)
// gets a new address handle; the change is counted and logged once. The
// group's MTU cannot follow at run time: a smaller one is only logged.
func (c *control) followBroadcast(rec sa.MCMemberRecord) {
	i := c.i
	old := i.port.bcast
	qkeyMoved, mlidMoved := rec.QKey != old.QKey, rec.MLID != old.MLID
	pathMoved := groupPath(rec) != groupPath(old)
	if rec.MTU.Value < old.MTU.Value {
		i.log.Warn("the SA's broadcast group has a smaller MTU now; restart the interface to take it",
			"mtu_code", rec.MTU.Value, "was_mtu_code", old.MTU.Value)
	}
	if !qkeyMoved && !pathMoved {
		return
	}
	i.ctr.inc(subnetBcastChanges)
	i.log.Warn("the SA changed the broadcast group: following it",
		"mlid", rec.MLID, "was_mlid", old.MLID, "qkey", rec.QKey, "was_qkey", old.QKey, "sl", rec.SL, "was_sl", old.SL)
	i.bcastMu.Lock()
	i.port.bcast = rec
	i.bcastMu.Unlock()
	mgid := encap.BroadcastMGID(i.port.pkey, encap.LinkLocal)
	switch {
	case qkeyMoved:
		if err := c.reinitUD(rec.QKey); err != nil {
			i.log.Error("making the UD QP ready again with the broadcast group's new Q_Key failed; restart the interface", "err", err)
		}
	case mlidMoved:
		if err := i.dev.DetachMulticast(i.udQP, mgid); err != nil {
			i.log.Warn("leaving the broadcast group's old MLID", "err", err)
		}
		if err := i.dev.AttachMulticast(i.udQP, mgid, rec.MLID); err != nil {
			i.log.Error("attaching the UD QP to the broadcast group's new MLID", "err", err)
		}
	}
	if !pathMoved {
		return
	}
	ah, err := i.dev.CreateAH(ib.AHAttr{DestGID: mgid, Path: groupPath(rec)})
	if err != nil {
		i.log.Error("address handle for the broadcast group's new path", "err", err)
		return
	}
	if was := i.bcast.Swap(&ah); was != nil {
		c.retired = append(c.retired, &unicastAH{ah: *was, used: c.now}) // sends may still name it
	}
}

// pkeyIndex is where our partition is in a P_Key table (either membership
// type), or -1.
func pkeyIndex(table []ib.PKey, pkey ib.PKey) int {
	for k, p := range table {
		if p|0x8000 == pkey|0x8000 {
			return k
		}
	}
	return -1
}

// followPKey takes the port's P_Key table after a subnet event. When our
// partition moved to another index, the QPs made before name the wrong
// entry: as the kernel's heavy flush does, every connection is torn down
// (their QPs cannot be moved; the neighbors connect again with new ones)
// and the UD QP goes through RESET to RTS with the new index. A partition
// that left the table is logged: nothing reaches it until it is back.
func (c *control) followPKey(table []ib.PKey) {
	i := c.i
	k := pkeyIndex(table, i.port.pkey)
	if k == i.port.pkeyIndex {
		return
	}
	was := i.port.pkeyIndex
	i.port.pkeyIndex = k
	i.ctr.inc(pkeyIndexChanges)
	if k < 0 {
		i.log.Error("the SM removed our partition from the port's P_Key table", "pkey", i.port.pkey, "table", table)
		return
	}
	i.log.Warn("the port's P_Key table moved our partition: connections torn down, UD QP made ready again",
		"pkey", i.port.pkey, "index", k, "was_index", was)
	c.disconnectAll("P_Key table changed")
	if err := c.reinitUD(i.qKey()); err != nil {
		i.log.Error("making the UD QP ready again after a P_Key change failed; restart the interface", "err", err)
	}
}

// disconnectAll tears down every connection; the neighbors connect again
// when traffic asks.
func (c *control) disconnectAll(reason string) {
	i := c.i
	if i.mgr == nil {
		return
	}
	for _, conn := range i.mgr.Connections() {
		i.mgr.Disconnect(c.now, conn.Peer, reason)
	}
}
