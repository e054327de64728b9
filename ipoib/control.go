package ipoib

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/sapath"
)

// Timers of the control goroutine (resolution's own are neigh's).
const (
	tickInterval = 100 * time.Millisecond
	// groupSyncInterval is how often the kernel's multicast memberships are
	// read: TUN devices get no notice when a socket joins a group.
	groupSyncInterval = time.Second
	// dropReportInterval rate-limits the log lines about dropped packets:
	// one line per cause and interval, with the count.
	dropReportInterval = 10 * time.Second
	connectBackoff     = time.Second
	// cmRearm is how often at most the connection service's next deadline
	// is asked for (armCM).
	cmRearm    = 20 * time.Millisecond
	maxBackoff = 30 * time.Second
	// connCheckInterval is how often live connections' QPs are checked
	// for the error state (an idle connection posts nothing that could
	// fail), at most connCheckBatch of them each time.
	connCheckInterval = time.Second
	connCheckBatch    = 256
	// maxUrgent bounds the urgent events served before one solicitation,
	// so that our own traffic cannot starve the answers others wait for.
	maxUrgent = 64
)

// control is the state the control goroutine owns.
type control struct {
	i          *Interface
	addrs      []netip.Prefix
	broadcasts atomic.Pointer[[]netip.Addr] // read by the datapath
	groups     map[ib.GID]netip.Addr        // IP multicast groups the UD QP joined, by MGID
	wantGroups map[ib.GID]netip.Addr        // the groups it should be in (syncGroups)
	groupRecs  map[ib.GID]joinedGroup       // Subnet: the SA's answers to our joins, send-only ones too
	subnet     *subnet                      // nil without Config.Subnet
	retired    []*unicastAH                 // replaced address handles, closed once idle (reapAHs)
	groupsAt   time.Time                    // when the kernel's groups were last read
	ahs        map[ib.GID]*unicastAH        // unicast address handles
	connsAt    time.Time                    // when connections' QPs were last checked
	connsEvery time.Duration                // connCheckInterval (tests change it)
	reach      reachState                   // connection failures in a row (reach.go)
	backoff    map[ib.LinkAddr]backoff      // peers that refused or failed a connection
	sends      sendBatch
	wc         [rxBatch]ib.Completion
	now        time.Time
	cmAsked    time.Time   // when armCM last asked the manager for its deadline
	unreach    tokenBucket // limits the ICMP unreachable errors (unreach.go)
	// rawWarned: the one warning that IPv4 errors cannot come from our
	// own address (no raw socket) was logged.
	rawWarned   bool
	dropsSeen   [numCounters]uint64 // counter values at the last drop report
	dropsAt     time.Time
	pollAddrs   bool      // the address subscription failed: read them each tick
	linkUp      bool      // the TUN is administratively up (linkChanged)
	llKeptUntil time.Time // our link-local address is put back if removed before then
	carrier     bool      // the TUN's carrier is on (followPort)
	portWasDown bool      // followPort saw the port down since it was last active
	noViaCache  bool      // the route subscription failed: do not cache next hops
	subnetSeen  uint64    // the device's subnet events taken (followSubnet)
	portAt      time.Time // when followPort last read the port's state
	// replaces is the link address our announcements name as replaced:
	// Config.Replaces at start, the port we took over from (Activate).
	replaces ib.LinkAddr
}

func (c *control) init(i *Interface) {
	c.i = i
	c.groups = map[ib.GID]netip.Addr{}
	c.wantGroups = map[ib.GID]netip.Addr{}
	c.groupRecs = map[ib.GID]joinedGroup{}
	c.subnet = i.startSubnet()
	if ev := i.caps.SubnetEvents; ev != nil {
		c.subnetSeen = ev.SubnetEvents() // events before Start changed nothing yet
	}
	c.ahs = map[ib.GID]*unicastAH{}
	c.backoff = map[ib.LinkAddr]backoff{}
	c.connsEvery = connCheckInterval
	empty := []netip.Addr{}
	c.broadcasts.Store(&empty)
	c.now = time.Now()
	c.linkUp, c.carrier = true, true // as tun.OpenNetdev leaves the device
	c.llKeptUntil = c.now.Add(linkLocalKept)
	c.replaces = i.cfg.Replaces
	c.refreshAddrs()
}

func (i *Interface) controlLoop() {
	c := &i.ctl
	tick := time.NewTicker(tickInterval)
	defer tick.Stop()
	stop := make(chan struct{})
	defer close(stop)
	linkEvents := i.netdev.Watch(stop)
	c.watching()
	// The connection service: its input (MADs, the kernel CM's events)
	// wakes the loop, and its timers run when its Next says.
	var cmWake <-chan struct{}
	cmTimer := time.NewTimer(time.Hour)
	cmTimer.Stop()
	defer cmTimer.Stop()
	var cmAt time.Time // when cmTimer fires; zero: stopped
	if i.mgr != nil {
		cmWake = i.mgr.Wake()
	}
	var pathResults <-chan sapath.Result
	var groupResults <-chan groupResult
	if c.subnet != nil {
		pathResults, groupResults = c.subnet.pathW.Results(), c.subnet.results
	}
	for {
		if i.mgr != nil {
			c.armCM(cmTimer, &cmAt)
		}
		select {
		case <-i.done:
			return
		case f := <-i.requests:
			c.now = time.Now()
			f()
		case p := <-i.pending:
			c.now = time.Now()
			c.handlePending(p)
		case e := <-i.wantConn:
			c.now = time.Now()
			e.WantConn.Store(false)
			c.connect(e)
		case m := <-i.rxReply:
			c.now = time.Now()
			c.handleNeighPacket(&m)
		case m := <-i.rxSolicit:
			// Learning waits for what resolution of traffic needs.
			c.urgent()
			c.now = time.Now()
			c.handleNeighPacket(&m)
		case f := <-i.sendFail:
			c.now = time.Now()
			c.sendFailed(f)
		case <-cmWake:
			c.now = time.Now()
			i.mgr.Poll(c.now)
		case now := <-cmTimer.C:
			c.now, cmAt = now, time.Time{}
			i.mgr.Expire(c.now)
		case r := <-pathResults:
			c.now = time.Now()
			c.pathAnswered(r)
		case r := <-groupResults:
			c.now = time.Now()
			c.joined(r)
		case dst := <-i.wantGroup:
			c.now = time.Now()
			c.sendOnlyJoin(dst)
		case u := <-linkEvents:
			c.now = time.Now()
			c.followLink(u)
		case now := <-tick.C:
			c.now = now
			c.tick()
		}
	}
}

// watching reads the addresses again now that changes are watched: one
// added between the first read (control.init) and the subscription, as
// networkd does to a new link at boot, would otherwise go unseen until the
// next change, and we would answer no ARP for it. Ours go back first: one
// that vanished in that window stays gone otherwise (the systemd boot once
// had ib0 without its link-local after networkd configured it; a down and
// up, which drops IPv6 addresses, is one way).
func (c *control) watching() {
	c.now = time.Now()
	c.restoreOwnAddrs("before watching the link")
	c.refreshAddrs()
}

// urgent serves, without waiting, what goes before a solicitation: the
// control socket's requests, packets waiting for resolution, replies to our
// requests, failed sends and wanted connections.
func (c *control) urgent() {
	i := c.i
	for range maxUrgent {
		select {
		case f := <-i.requests:
			c.now = time.Now()
			f()
		case p := <-i.pending:
			c.now = time.Now()
			c.handlePending(p)
		case m := <-i.rxReply:
			c.now = time.Now()
			c.handleNeighPacket(&m)
		case f := <-i.sendFail:
			c.now = time.Now()
			c.sendFailed(f)
		case e := <-i.wantConn:
			c.now = time.Now()
			e.WantConn.Store(false)
			c.connect(e)
		default:
			return
		}
	}
}

// armCM sets the timer to the connection service's next deadline (the
// manager's idle reaping included) when it changed. Next costs a pass over
// the connections, so it is asked at most once per cmRearm: in between,
// the timer is only brought forward to the end of that period, when the
// deadline is asked again (a burst of MADs at 10,000 connections must not
// cost a pass each).
func (c *control) armCM(t *time.Timer, at *time.Time) {
	now := time.Now()
	if now.Sub(c.cmAsked) < cmRearm {
		if soon := c.cmAsked.Add(cmRearm); at.IsZero() || at.After(soon) {
			*at = soon
			t.Reset(soon.Sub(now))
		}
		return
	}
	c.cmAsked = now
	next := c.i.mgr.Next()
	if next.Equal(*at) {
		return
	}
	*at = next
	if next.IsZero() {
		t.Stop()
		return
	}
	t.Reset(next.Sub(now))
}

// tick runs the neighbor timers (the connection service has its own timer).
func (c *control) tick() {
	i := c.i
	// Completions of an idle interface (its TUN reader sleeps in read):
	// failures must not wait for the next packet.
	i.reapSends(&c.wc)
	if c.now.Sub(c.dropsAt) >= dropReportInterval {
		c.reportDrops()
	}
	if c.now.Sub(c.groupsAt) >= groupSyncInterval {
		if c.pollAddrs {
			c.refreshAddrs()
		}
		c.syncGroups()
		c.reapAHs()
		c.followSubnet()
	}
	// A port of an interface over several (it has a sibling) is watched
	// each tick: its failover waits for this; alone, each second.
	if i.cfg.Bonded || c.now.Sub(c.portAt) >= groupSyncInterval {
		c.portAt = c.now
		c.followPort()
	}
	c.subnetTick()
	if c.now.Sub(c.connsAt) >= c.connsEvery {
		c.checkConns(connCheckBatch)
	}
	for _, e := range i.neigh.All() {
		old := e.Link
		if a := e.Tick(c.now); a != 0 {
			c.apply(e, a, old)
		}
	}
	i.logs.flush(c.now)
}

// shutdown disconnects every connection before the interface closes.
func (c *control) shutdown() {
	if c.i.mgr != nil {
		c.i.mgr.Close(time.Now())
	}
	if c.subnet != nil {
		c.leaveAll()
	}
	_ = c.i.routes.Flush()
}
