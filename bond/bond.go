// Package bond is one IPoIB interface over several ports, as the
// kernel's bonding driver in active-backup mode makes one link of several
// ipoib slaves with fail_over_mac=active: an ipoib.Interface per port (a
// leg), all on one netdev (the TUN), one of them active.
//
// Every leg is warm: its UD QP is in the broadcast group, its connection
// service listens, it writes what it receives into the TUN and follows
// its port's state. Only the active leg reads the TUN (sends), answers
// ARP and ND for our addresses and announces them, so peers know one link
// address: the active port's. When the active port goes down another leg
// takes over: it announces our addresses at its link address, naming the
// one it replaces, and the TUN's queues are handed to its readers. Peers
// that are ipoibd were told of the other port beforehand (the sibling in
// our ARP and ND) and move at once; kernel peers take the gratuitous ARP
// and the unsolicited NA as any.
//
// Beyond bonding, the bond may spread flows over every port that is up
// (Config.Spread): each reads some of the TUN's queues, and the kernel
// keeps a flow on one queue. A port that is not the active one (a rail)
// sends to peers with two ports at their other port's link address, and
// hands every other packet to the active port (ipoib's rail.go); what a
// port receives is written on a queue it reads, so that the replies of a
// flow leave by the port its packets came in on (tun's flow steering).
//
// Legs hold the shared netdev through leg (netdev.go), which lets only a
// queue's owner read it and sets the carrier from every port's: on while
// one is up, off with all of them, as a NIC.
package bond

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/netdev"
)

// Reselect is when the primary port takes over again once it is back:
// the kernel bonding's primary_reselect.
type Reselect uint8

// Reselect policies.
const (
	// ReselectAlways: the primary takes over as soon as it is up (the
	// kernel's default, and ours).
	ReselectAlways Reselect = iota
	// ReselectBetter: the primary takes over when its port is better than
	// the active one's: here, with equal ports, only when that one fails.
	ReselectBetter
	// ReselectFailure: the primary takes over only when the active port
	// fails.
	ReselectFailure
)

func (r Reselect) String() string {
	switch r {
	case ReselectBetter:
		return "better"
	case ReselectFailure:
		return "failure"
	}
	return "always"
}

// ParseReselect reads always, better or failure.
func ParseReselect(s string) (Reselect, error) {
	for _, r := range []Reselect{ReselectAlways, ReselectBetter, ReselectFailure} {
		if r.String() == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("%q: want always, better or failure", s)
}

// Config describes an interface over several ports.
type Config struct {
	// Netdev is the interface in the kernel, opened as the first leg's
	// NetdevConfig says. New takes it over: Close closes it, and so does
	// New on error.
	Netdev netdev.Netdev
	// Legs are the interface on each port, the primary first; New sets
	// their Netdev, LinkLocal (the primary's, for every port) and Standby.
	Legs []ipoib.Config
	Policy
	Log *slog.Logger
}

// Policy is how the ports share the work.
type Policy struct {
	Reselect Reselect
	// Spread puts flows on every port that is up, not only the active
	// one's (it needs two TUN queues or more).
	Spread bool
}

// Modes, as --bond-mode names them: active-backup is the kernel bonding's
// mode (one port carries everything); spread puts flows on every port
// that is up.
const (
	ModeActiveBackup = "active-backup"
	ModeSpread       = "spread"
)

// ParseMode reads a mode: whether it spreads flows.
func ParseMode(s string) (spread bool, err error) {
	switch s {
	case ModeSpread:
		return true, nil
	case ModeActiveBackup:
		return false, nil
	}
	return false, fmt.Errorf("%q: want %s or %s", s, ModeSpread, ModeActiveBackup)
}

// Bond is a running interface over several ports.
type Bond struct {
	nd       netdev.Netdev
	qw       netdev.QueueWriter // nd's, if it writes through a chosen queue (tun)
	legs     []*leg
	reselect Reselect
	spread   bool
	log      *slog.Logger

	// active is the active leg.
	active atomic.Int32
	// owners are the leg that reads each TUN queue: read on every TUN
	// read (leg.Read), so atomic; changed under mu with turn.
	owners []atomic.Int32
	mu     sync.Mutex
	// turn is closed and made again when a queue changes hands or a leg
	// closes: readers waiting for their leg's turn look again.
	turn    chan struct{}
	carrier bool // the netdev's, as set from the legs'
	// replaced is the link address the last failover moved from.
	replaced ib.LinkAddr

	wake      chan struct{} // a leg's port changed: reselect
	done      chan struct{}
	closeOnce sync.Once
	started   atomic.Bool
	watchDone chan struct{}
	lost      chan struct{}
	lostOnce  sync.Once
	lostErr   error

	failovers  atomic.Uint64
	lastTookNs atomic.Int64
	tookSumNs  atomic.Int64
}

// New opens an interface on each of cfg.Legs' ports over cfg.Netdev, the
// first active. Nothing runs until Start. On error everything opened is
// closed, cfg.Netdev too.
func New(cfg Config) (_ *Bond, err error) {
	if len(cfg.Legs) < 2 {
		_ = cfg.Netdev.Close()
		return nil, errors.New("bond: an interface over several ports needs two or more")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	qw, _ := cfg.Netdev.(netdev.QueueWriter)
	b := &Bond{qw: qw,
		nd: cfg.Netdev, reselect: cfg.Reselect, spread: cfg.Spread, log: cfg.Log, carrier: true,
		owners: make([]atomic.Int32, cfg.Netdev.Queues()),
		turn:   make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{}),
		watchDone: make(chan struct{}), lost: make(chan struct{}),
	}
	defer func() {
		if err != nil {
			for _, l := range b.legs {
				l.iface.Close()
			}
			_ = b.nd.Close()
		}
	}()
	nc, err := cfg.Legs[0].NetdevConfig()
	if err != nil {
		return nil, err
	}
	for k, lc := range cfg.Legs {
		l := &leg{b: b, k: k}
		l.healthy.Store(true)
		lc.Netdev, lc.LinkLocal, lc.Standby, lc.Bonded = l, nc.LinkLocal, k != 0, true
		if l.iface, err = ipoib.New(lc); err != nil {
			return nil, fmt.Errorf("port %d (%v): %w", k+1, lc.Device.Name(), err)
		}
		b.legs = append(b.legs, l)
	}
	b.nameSiblings()
	return b, nil
}

// nameSiblings has each leg name, in its ARP and ND, the port that would
// take over from it: the active leg the first other port that is up (none
// when none is: peers must not move, or spread flows, to a port that is
// down), the others the active one. It reports whether the active leg's
// changed: peers are told by an announcement.
func (b *Bond) nameSiblings() bool {
	active := b.legs[b.active.Load()].iface
	var sib ib.LinkAddr
	if next := b.nextUp(int(b.active.Load())); next >= 0 {
		sib = b.legs[next].iface.LinkAddr()
	}
	was, _ := active.Sibling()
	for _, l := range b.legs {
		if l.iface == active {
			l.iface.SetSibling(sib)
		} else {
			l.iface.SetSibling(active.LinkAddr())
		}
	}
	return was != sib
}

// Start runs every leg and the port watcher.
func (b *Bond) Start() {
	b.started.Store(true)
	for _, l := range b.legs {
		l.iface.Start()
	}
	b.assign()
	go b.watch()
}

// railSync is how often rails take the active port's knowledge of its
// neighbors' other ports (Rail entries).
const railSync = 100 * time.Millisecond

// watch reselects the active leg whenever a port changes, keeps the
// rails' entries in step with the active port's neighbors, and ends the
// bond when a leg is lost (its TUN went).
func (b *Bond) watch() {
	defer close(b.watchDone)
	sync := time.NewTicker(railSync)
	defer sync.Stop()
	lost := make(chan *leg, len(b.legs))
	for _, l := range b.legs {
		go func() {
			select {
			case <-l.iface.Lost():
				lost <- l
			case <-b.done:
			}
		}()
	}
	for {
		select {
		case <-b.wake:
			b.reselectNow()
		case now := <-sync.C:
			if b.checkReach(now) {
				b.reselectNow()
			}
			b.syncRails()
		case l := <-lost:
			b.lostOnce.Do(func() { b.lostErr = l.iface.LostErr(); close(b.lost) })
		case <-b.done:
			return
		}
	}
}

// reselectNow moves to the leg the policy chooses, and sets the carrier.
func (b *Bond) reselectNow() {
	from := int(b.active.Load())
	healthy := b.usable()
	to := choose(from, healthy, b.reselect)
	back := b.setCarrier(b.anyUp())
	// Peers learn first which other port is up now (a port back is named
	// before a fail-back to it, which they then follow at once).
	if b.nameSiblings() && healthy[from] && !back {
		b.legs[from].iface.Announce()
	}
	switch {
	case to != from:
		b.failover(from, to, b.reason(from))
	case back:
		// Back from every port down on the one that was active: an
		// announcement of the move made just before may have been lost
		// with the port, so it is made again, as a NIC's link coming up
		// sends a gratuitous ARP.
		b.legs[to].iface.Activate(b.replacedLast())
	}
	b.assign()
}

// replacedLast is the link address the last failover moved from (what
// announcements name as replaced); zero before any.
func (b *Bond) replacedLast() ib.LinkAddr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.replaced
}

// reason says why the active leg changes, for the log.
func (b *Bond) reason(from int) string {
	switch l := b.legs[from]; {
	case !l.healthy.Load():
		return "active port down"
	case l.unreachable:
		return "every connection on the active port failed"
	}
	return "primary port back"
}

// usable are the legs that may carry traffic: their port is up and, while
// another's is up and reaches its peers, it reaches its own (reach.go in
// ipoib). When every port that is up fails its connections, their ports'
// state alone counts: there is nowhere better to go.
func (b *Bond) usable() []bool {
	up, ok := make([]bool, len(b.legs)), make([]bool, len(b.legs))
	anyOK := false
	for k, l := range b.legs {
		up[k] = l.healthy.Load()
		ok[k] = up[k] && !l.unreachable
		anyOK = anyOK || ok[k]
	}
	if !anyOK {
		return up
	}
	return ok
}

// anyUp reports whether some leg's port is up: the link's carrier.
func (b *Bond) anyUp() bool {
	for _, l := range b.legs {
		if l.healthy.Load() {
			return true
		}
	}
	return false
}

// choose is the leg that should be active: the active one while it is
// up (unless the policy gives the primary, leg 0, back its place), else
// the first up; active when none is up (nothing to move to).
func choose(active int, healthy []bool, r Reselect) int {
	if healthy[0] && active != 0 && (r == ReselectAlways || !healthy[active]) {
		return 0
	}
	if healthy[active] {
		return active
	}
	for k, up := range healthy {
		if up {
			return k
		}
	}
	return active
}

// failover makes leg to the active one: its readers take the TUN's
// queues, the old leg goes on standby and stops answering, and the new
// one announces our addresses naming the old link address.
func (b *Bond) failover(from, to int, why string) {
	start := time.Now()
	old, next := b.legs[from], b.legs[to]
	old.iface.SetStandby(true)
	b.mu.Lock()
	b.active.Store(int32(to))
	b.replaced = old.iface.LinkAddr()
	b.mu.Unlock()
	b.assign()
	b.nameSiblings()
	next.iface.Activate(old.iface.LinkAddr())
	took := time.Since(start)
	b.failovers.Add(1)
	b.lastTookNs.Store(int64(took))
	b.tookSumNs.Add(int64(took))
	b.log.Warn("failover", "if", next.iface.Name(), "from", old.iface.DeviceName(), "to", next.iface.DeviceName(),
		"reason", why, "link_addr", next.iface.LinkAddr(), "took", took.Round(time.Microsecond))
}

// nextTurn wakes the readers waiting for their leg's turn. b.mu is held.
func (b *Bond) nextTurn() {
	close(b.turn)
	b.turn = make(chan struct{})
}

// setCarrier sets the netdev's carrier when it changes, and reports
// whether it came on now.
func (b *Bond) setCarrier(on bool) bool {
	b.mu.Lock()
	same := on == b.carrier
	b.mu.Unlock()
	if same {
		return false
	}
	if err := b.nd.SetCarrier(on); err != nil {
		b.log.Warn("setting the carrier", "err", err)
		return false
	}
	b.mu.Lock()
	b.carrier = on
	b.mu.Unlock()
	if on {
		b.log.Info("a port is active: carrier on", "if", b.Name())
	} else {
		b.log.Warn("every port down: carrier off", "if", b.Name())
	}
	return on
}

// nextUp is the first usable leg after k, -1 if none.
func (b *Bond) nextUp(k int) int {
	usable := b.usable()
	for d := 1; d < len(b.legs); d++ {
		if j := (k + d) % len(b.legs); usable[j] {
			return j
		}
	}
	return -1
}

// Active is the interface on the active port.
func (b *Bond) Active() *ipoib.Interface {
	return b.legs[b.active.Load()].iface
}

// Legs are the interfaces on every port, the primary first.
func (b *Bond) Legs() []*ipoib.Interface {
	out := make([]*ipoib.Interface, len(b.legs))
	for k, l := range b.legs {
		out[k] = l.iface
	}
	return out
}

// Failovers counts the moves from port to port, and says how long the
// last one took.
func (b *Bond) Failovers() (uint64, time.Duration) {
	return b.failovers.Load(), time.Duration(b.lastTookNs.Load())
}

// Lost is closed when the interface can carry nothing any more (its TUN
// went); LostErr says why.
func (b *Bond) Lost() <-chan struct{} { return b.lost }

// LostErr is why the interface was lost (nil while Lost is open).
func (b *Bond) LostErr() error {
	select {
	case <-b.lost:
		return b.lostErr
	default:
		return nil
	}
}

// Close closes every leg, then the netdev. A failover under way ends
// first.
func (b *Bond) Close() {
	b.closeOnce.Do(func() {
		close(b.done)
		if b.started.Load() {
			<-b.watchDone
		}
		for _, l := range b.legs {
			l.iface.Close()
		}
		_ = b.nd.Close()
	})
}
