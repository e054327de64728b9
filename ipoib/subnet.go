package ipoib

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
	"github.com/ipoibd/ipoibd/sa"
	"github.com/ipoibd/ipoibd/sapath"
)

// Subnet services of an InfiniBand port (Config.Subnet). On InfiniBand
// nothing reaches a peer without the subnet administrator: the broadcast
// group's join gives the Q_Key, MTU and MLID the interface must use, every
// other group must be joined before its traffic flows, and every unicast
// address handle and connection needs the PathRecord's LIDs, SL and rate.
// The SA's answers can take seconds (or never come), so they are asked on
// goroutines of their own and the control goroutine only takes results:
// the broadcast join alone is asked in New, which cannot go on without it.

// Subnet is the SA of the port; *umadsa.Client is one. Nil on RoCE and
// softib ports, and with the kernel's CM, whose rdma_cm does the same.
type Subnet interface {
	Join(j sa.JoinRequest) (sa.MCMemberRecord, error)
	Leave(mgid ib.GID, pkey ib.PKey, state sa.JoinState) error
	sapath.Querier
}

// groupJob is one join or leave for the group worker.
type groupJob struct {
	group netip.Addr // the IP group (or broadcast address) mgid maps
	mgid  ib.GID
	state sa.JoinState // FullMember, or SendOnlyNonMember for a group we only send to
	leave bool
}

// heldSend is an ARP/ND send in slot, n octets, waiting for a join.
type heldSend struct {
	slot uint32
	n    int
}

// maxHeld bounds the held sends: they hold slots of the control
// goroutine's small pool.
const maxHeld = 8

// hold keeps a send to group until its join completes; false when too
// many wait already.
func (s *subnet) hold(group netip.Addr, slot uint32, n int) bool {
	if s.nheld >= maxHeld {
		return false
	}
	s.held[group] = append(s.held[group], heldSend{slot, n})
	s.nheld++
	return true
}

// sendHeld sends (ah valid) or drops what waited for group's join.
func (c *control) sendHeld(group netip.Addr, ah ib.AH) {
	s, i := c.subnet, c.i
	for _, h := range s.held[group] {
		if ah == nil {
			i.drop(h.slot, txDropJoining)
			continue
		}
		i.sendUD(&c.sends, h.slot, h.n, ah, ib.MulticastQPN)
	}
	s.nheld -= len(s.held[group])
	delete(s.held, group)
	i.postBatch(&c.sends)
}

// joinedGroup is a group the SA let us join, as it answered.
type joinedGroup struct {
	group netip.Addr
	rec   sa.MCMemberRecord
}

// groupResult is a join's answer (leaves have none).
type groupResult struct {
	groupJob
	rec sa.MCMemberRecord
	err error
}

// subnet is the control goroutine's state of the subnet services.
type subnet struct {
	sa      Subnet
	paths   *sapath.Cache
	pathW   *sapath.Worker
	jobs    chan groupJob
	results chan groupResult
	asked   map[ib.GID]sa.JoinState // joins under way
	// held are our ARP/ND sends to groups whose join is under way (a
	// neighbor solicitation to a peer's solicited-node group), sent when
	// it completes, as the kernel's ipoib queues them: dropping the first
	// one would cost every IPv6 resolution a probe interval.
	held  map[netip.Addr][]heldSend
	nheld int
	// awaiting are ARP/ND packets from InfiniBand senders whose claim
	// waits for a path to be checked against (vouch.go), by GID.
	awaiting map[ib.GID][]neighPacket
	nawait   int
	stop     chan struct{}
	done     chan struct{}
}

// joinBroadcast joins the broadcast group through the SA, as the kernel's
// ipoib does before the interface carries anything: the UD QP takes its
// Q_Key, attaches with its MLID, and the UD MTU is at most its MTU.
func (i *Interface) joinBroadcast() error {
	mgid := encap.BroadcastMGID(i.port.pkey, encap.LinkLocal)
	g, err := i.cfg.Subnet.Join(sa.JoinRequest{MGID: mgid, PKey: i.port.pkey})
	if err != nil {
		return fmt.Errorf("ipoib: joining the broadcast group %v through the SA: %w", mgid, err)
	}
	mtu := g.MTU.MTU()
	if !mtu.Valid() {
		return fmt.Errorf("ipoib: the SA's broadcast group %v has MTU code %d, not an IB MTU", mgid, g.MTU.Value)
	}
	i.port.bcast = g
	i.qkey.Store(uint32(g.QKey))
	if m := encap.MTUForIB(mtu); m < i.port.udMTU {
		i.port.udMTU = m
		if i.cfg.MTU == 0 && i.cfg.Mode == Datagram {
			i.mtu = m
		}
	}
	if i.cfg.Mode == Datagram && i.mtu > i.port.udMTU {
		return fmt.Errorf("ipoib: MTU %d is above the broadcast group's UD MTU %d", i.mtu, i.port.udMTU)
	}
	return nil
}

// leaveBroadcast leaves the broadcast group, if New joined it, for an
// interface that never started (the control goroutine leaves everything
// otherwise).
func (i *Interface) leaveBroadcast() {
	if i.cfg.Subnet != nil && i.port.bcast.MGID != (ib.GID{}) {
		_ = i.cfg.Subnet.Leave(i.port.bcast.MGID, i.port.pkey, sa.FullMember)
	}
}

// groupPath is how a multicast AH reaches a group on InfiniBand: its MLID,
// with a GRH (multicast always has one) carrying the group's fields.
func groupPath(g sa.MCMemberRecord) ib.Path {
	return ib.Path{DLID: g.MLID, SL: g.SL, StaticRate: g.Rate.Value, GRH: true,
		HopLimit: g.HopLimit, TrafficClass: g.TClass, FlowLabel: g.FlowLabel}
}

// startSubnet starts the workers; nil without a Subnet.
func (i *Interface) startSubnet() *subnet {
	if i.cfg.Subnet == nil {
		return nil
	}
	s := &subnet{
		sa:       i.cfg.Subnet,
		paths:    sapath.New(sapath.Config{LMC: i.port.LMC, ACKDelay: i.port.ACKDelay}),
		pathW:    sapath.NewWorker(i.cfg.Subnet, i.port.pkey),
		jobs:     make(chan groupJob, 256),
		results:  make(chan groupResult, 256),
		asked:    map[ib.GID]sa.JoinState{},
		held:     map[netip.Addr][]heldSend{},
		awaiting: map[ib.GID][]neighPacket{},
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go s.runGroups(i)
	return s
}

// runGroups asks the SA for joins and leaves, one at a time.
func (s *subnet) runGroups(i *Interface) {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case j, ok := <-s.jobs:
			if !ok {
				return // closed once drained: the interface is closing
			}
			if j.leave {
				if err := s.sa.Leave(j.mgid, i.port.pkey, j.state); err != nil {
					i.log.Debug("leaving a multicast group", "mgid", j.mgid, "err", err)
				}
				continue
			}
			r := groupResult{groupJob: j}
			req := sa.JoinRequest{MGID: j.mgid, PKey: i.port.pkey, State: j.state}
			if j.state == sa.FullMember {
				// A new group is made like the broadcast group, as the
				// kernel's ipoib makes it.
				i.bcastMu.Lock()
				req.Create = sa.ParamsOf(i.port.bcast)
				i.bcastMu.Unlock()
			}
			r.rec, r.err = s.sa.Join(req)
			select {
			case s.results <- r:
			case <-s.stop:
				return
			}
		}
	}
}

// leaveAll asks to leave every group the interface joined, the broadcast
// group last, as the kernel's ipoib leaves them when its interface goes
// down: the SM need not wait for the port to go before it prunes them.
func (c *control) leaveAll() {
	s := c.subnet
	for mgid, g := range c.groupRecs {
		s.ask(groupJob{mgid: mgid, state: g.rec.JoinState, leave: true})
	}
	s.ask(groupJob{mgid: c.i.port.bcast.MGID, state: sa.FullMember, leave: true})
}

// leaveWait bounds how long closing waits for the leaves: an SM that does
// not answer must not hold up a daemon that stops.
const leaveWait = 2 * time.Second

// close lets the group worker finish what is queued (the leaves) for at
// most leaveWait, then stops both workers; a question under way ends
// first. Only after the control goroutine ended: nothing asks any more.
func (s *subnet) close() {
	if s == nil {
		return
	}
	close(s.jobs)
	select {
	case <-s.done:
	case <-time.After(leaveWait):
	}
	close(s.stop)
	s.pathW.Close()
}

// ask queues a join or leave; a join already under way is not asked
// twice, and a full queue leaves it for the next group sync to ask again.
func (s *subnet) ask(j groupJob) {
	if _, ok := s.asked[j.mgid]; ok && !j.leave {
		return
	}
	select {
	case s.jobs <- j:
		if !j.leave {
			s.asked[j.mgid] = j.state
		}
	default:
	}
}

// joined takes a join's answer: a full member's group is attached with its
// MLID, and either kind gets the address handle sends to it use.
func (c *control) joined(r groupResult) {
	i, s := c.i, c.subnet
	delete(s.asked, r.mgid)
	if r.err != nil {
		i.ctr.inc(subnetJoinFailures)
		i.log.Warn("joining a multicast group through the SA", "mgid", r.mgid, "state", r.state, "err", r.err)
		c.sendHeld(r.group, nil)
		return
	}
	i.ctr.inc(subnetJoins)
	if r.mgid == i.port.bcast.MGID {
		c.followBroadcast(r.rec) // joined again after a subnet event
		return
	}
	if r.state == sa.FullMember {
		if _, wanted := c.wantGroups[r.mgid]; !wanted {
			s.ask(groupJob{group: r.group, mgid: r.mgid, state: r.state, leave: true})
			return
		}
		if !c.attach(r) {
			return
		}
	}
	c.groupRecs[r.mgid] = joinedGroup{group: r.group, rec: r.rec}
	ah, err := i.dev.CreateAH(ib.AHAttr{DestGID: r.mgid, Path: groupPath(r.rec)})
	if err != nil {
		i.log.Warn("address handle for a multicast group", "mgid", r.mgid, "err", err)
		c.sendHeld(r.group, nil)
		return
	}
	i.mcastMu.Lock()
	if old, ok := i.mcastAHs[r.group]; ok {
		c.retired = append(c.retired, &unicastAH{ah: old.ah, used: c.now})
	}
	i.mcastAHs[r.group] = mcastDest{ah: ah, mgid: r.mgid}
	i.mcastMu.Unlock()
	c.sendHeld(r.group, ah)
}

// attach makes the UD QP a member of a joined group with its MLID; a group
// joined again (after a subnet event) is attached again only when its MLID
// moved.
func (c *control) attach(r groupResult) bool {
	i := c.i
	if _, ok := c.groups[r.mgid]; ok {
		old := c.groupRecs[r.mgid].rec.MLID
		if old == r.rec.MLID {
			return true
		}
		if err := i.dev.DetachMulticast(i.udQP, r.mgid); err != nil {
			i.log.Warn("leaving a multicast group's old MLID", "group", r.group, "err", err)
		}
		delete(c.groups, r.mgid)
	}
	if err := i.dev.AttachMulticast(i.udQP, r.mgid, r.rec.MLID); err != nil {
		i.log.Warn("joining a multicast group", "group", r.group, "err", err)
		return false
	}
	c.groups[r.mgid] = r.group
	return true
}

// followSubnet asks again for every path and joins every group again
// after the port's subnet events (ib.SubnetEventer): after an SM change
// or a client reregister the SM may have forgotten our memberships, and a
// LID change moves paths. The kernel's ipoib flushes its paths and
// restarts its joins on the same events.
func (c *control) followSubnet() {
	ev := c.i.caps.SubnetEvents
	if ev == nil {
		return
	}
	n := ev.SubnetEvents()
	if n == c.subnetSeen {
		return
	}
	c.subnetSeen = n
	port := c.i.dev.Port()
	c.followPKey(port.PKeys)
	if port.LID != c.i.port.LID {
		// Peers reach our connections' QPs by our old LID: as on the
		// kernel's normal flush after a LID change, they are torn down and
		// made again once the paths are asked again.
		if c.i.port.LID != 0 {
			c.i.log.Warn("the SM moved our port to another LID: connections torn down", "lid", port.LID, "was_lid", c.i.port.LID)
			c.disconnectAll("our LID changed")
		}
		c.i.port.LID = port.LID
	}
	c.askSubnetAgain("subnet event")
}

// askSubnetAgain asks the SA again for every path and joins every group
// again, the broadcast group first; why is for the log.
func (c *control) askSubnetAgain(why string) {
	s := c.subnet
	if s == nil {
		return
	}
	port := c.i.dev.Port()
	c.i.log.Info(why + ": asking the SA again for paths and joins")
	s.paths.SetLMC(port.LMC) // a LID change may come with a new LMC
	if m := c.i.mgr; m != nil {
		if l, ok := m.Service().(interface{ SetLMC(uint8) }); ok {
			l.SetLMC(port.LMC)
		}
	}
	s.paths.Invalidate(c.now)
	s.pathW.Ask(s.paths.Due(c.now)...)
	s.ask(groupJob{mgid: c.i.port.bcast.MGID, state: sa.FullMember})
	for mgid, g := range c.groupRecs {
		s.ask(groupJob{group: g.group, mgid: mgid, state: g.rec.JoinState})
	}
}

// sendOnlyJoin asks for a send-only join of the group dst maps to, so that
// our packets to a group we are not in (a neighbor solicitation to a
// peer's solicited-node group) may flow; the datapath drops until then.
func (c *control) sendOnlyJoin(dst netip.Addr) {
	s := c.subnet
	mgid, err := encap.MulticastMGID(dst, c.i.port.pkey, encap.LinkLocal)
	if err != nil {
		return
	}
	if _, ok := c.groupRecs[mgid]; !ok {
		s.ask(groupJob{group: dst, mgid: mgid, state: sa.SendOnlyNonMember})
	}
}

// unicastPath is the SA's path to gid: ok false while it is being asked.
// A miss may have queued a new destination, which is asked at once; the
// refreshes and retries of the others are subnetTick's.
func (c *control) unicastPath(gid ib.GID) (sapath.Path, bool) {
	s := c.subnet
	p, ok := s.paths.Lookup(gid, c.now)
	if !ok {
		s.pathW.Ask(s.paths.Due(c.now)...)
	}
	return p, ok
}

// pathAnswered takes a PathRecord answer. A neighbor that waited for it
// is published now; one whose path changed gets a new address handle.
func (c *control) pathAnswered(r sapath.Result) {
	s := c.subnet
	s.paths.Done(r.DGID, r.Record, r.Err, c.now)
	defer c.pathCame(r) // after the neighbors that had the path moved to it
	if r.Err != nil {
		return // the cache retries; a path it held stays in use
	}
	p, ok := s.paths.Lookup(r.DGID, c.now)
	if !ok {
		return
	}
	moved := false
	if u := c.ahs[r.DGID]; u != nil {
		if u.ah.Attr().Path == p.AH {
			return // a refresh that changed nothing
		}
		moved = u.ah.Attr().Path.DLID != p.AH.DLID
		u.used = c.now
		c.retired = append(c.retired, u) // sends may still name it
		delete(c.ahs, r.DGID)
	}
	for _, e := range c.i.neigh.All() {
		if e.Resolved() && e.Link.GID == r.DGID {
			if moved && c.i.mgr != nil {
				// Its connections' QPs were made ready for the old LID:
				// connect again by the new path, as the kernel's ipoib
				// drops a path's connections when it flushes the path.
				c.i.mgr.Disconnect(c.now, e.Link, "the SA moved the peer to another LID")
			}
			c.resolved(e, e.Link)
		}
	}
}

// pathTo is the connection manager's PathTo with a Subnet (nil without):
// it runs on the control goroutine, which drives the manager.
func (i *Interface) pathTo() func(ib.GID) (ipoibcm.IBPath, bool) {
	if i.cfg.Subnet == nil {
		return nil
	}
	return i.ctl.pathTo
}

// pathTo is the cached path to gid, if any.
func (c *control) pathTo(gid ib.GID) (ipoibcm.IBPath, bool) {
	p, ok := c.unicastPath(gid)
	if !ok {
		return ipoibcm.IBPath{}, false
	}
	return ipoibcm.IBPath{REQ: p.CM, Address: p.AH, MTU: p.MTU}, true
}

// subnetTick asks what is due (refreshes, retries).
func (c *control) subnetTick() {
	if s := c.subnet; s != nil {
		s.pathW.Ask(s.paths.Due(c.now)...)
	}
}

// pathCounters are the path cache's counters, for Stats: zero without a
// Subnet, so that the names are the same on every port.
func (c *control) pathCounters() []ib.Counter {
	if c.subnet == nil {
		return (&sapath.Stats{}).Counters()
	}
	return c.subnet.paths.Stats.Counters()
}
