package bond

import (
	"errors"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/mtu"
	"github.com/ipoibd/ipoibd/netdev"
	"github.com/ipoibd/ipoibd/offload"
)

// leg is one port's interface and its view of the shared netdev: packets
// written go through the leg's home queue; reads of the queues the bond
// gave it; the MTU and the per-destination routes only while the leg is
// active; its carrier is its port's state, which the bond weighs with the
// others'.
type leg struct {
	b       *Bond
	k       int
	iface   *ipoib.Interface
	healthy atomic.Bool  // its port is up (the interface's SetCarrier)
	home    atomic.Int32 // the queue its writes go through (Bond.homeOf)
	closed  atomic.Bool

	// Bond goroutine only: the port fails every connection (Unreachable),
	// and when it may be tried again (reach.go).
	unreachable bool
	retryAt     time.Time
	hold        time.Duration
}

var errLegClosed = errors.New("bond: the port's interface is closed")

func (l *leg) isActive() bool { return int(l.b.active.Load()) == l.k }

func (l *leg) owns(q int) bool { return int(l.b.owners[q].Load()) == l.k }

// waitTurn returns once the leg reads queue q (true) or is closed
// (false). The owner's reader passes without a lock, once per TUN read.
func (l *leg) waitTurn(q int) bool {
	for {
		if l.owns(q) && !l.closed.Load() {
			return true
		}
		// Read under mu, which the bond holds while it moves queues: no
		// wake-up is lost between the look and the wait.
		l.b.mu.Lock()
		owns, turn := l.owns(q), l.b.turn
		l.b.mu.Unlock()
		switch {
		case l.closed.Load():
			return false
		case owns:
			return true
		}
		<-turn
	}
}

func (l *leg) Queues() int { return l.b.nd.Queues() }

// Read reads the TUN's queue q once the leg owns it. A read interrupted
// because the queue went to another leg waits for the leg's turn again.
func (l *leg) Read(q int, b []byte, h *offload.Hdr) (int, error) {
	for l.waitTurn(q) {
		n, err := l.b.nd.Read(q, b, h)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		return n, err
	}
	return 0, errLegClosed
}

// Write and WriteGSO write through the leg's home queue: the kernel reads
// the flow's next packets from there (tun's flow steering), so the leg a
// flow came in by sends its replies.
func (l *leg) Write(b []byte) (int, error) {
	if l.b.qw != nil {
		return l.b.qw.WriteOn(int(l.home.Load()), b)
	}
	return l.b.nd.Write(b)
}

func (l *leg) WriteGSO(h offload.Hdr, parts [][]byte) (int, error) {
	if l.b.qw != nil {
		return l.b.qw.WriteGSOOn(int(l.home.Load()), h, parts)
	}
	return l.b.nd.WriteGSO(h, parts)
}
func (l *leg) SendIPv4(b []byte) error        { return l.b.nd.SendIPv4(b) }
func (l *leg) Offloads() (tso, uso bool)      { return l.b.nd.Offloads() }
func (l *leg) Name() string                   { return l.b.nd.Name() }
func (l *leg) Addrs() ([]netip.Prefix, error) { return l.b.nd.Addrs() }
func (l *leg) EnsureAddrs(ps []netip.Prefix) (int, error) {
	return l.b.nd.EnsureAddrs(ps)
}
func (l *leg) State() (netdev.LinkStatus, error) { return l.b.nd.State() }
func (l *leg) Gateway(dst netip.Addr) (netip.Addr, bool) {
	return l.b.nd.Gateway(dst)
}
func (l *leg) Groups() ([]netip.Addr, error) { return l.b.nd.Groups() }
func (l *leg) Watch(stop <-chan struct{}) <-chan netdev.LinkEvent {
	return l.b.nd.Watch(stop)
}
func (l *leg) InNetns(f func() error) error { return l.b.nd.InNetns(f) }

// SetMTU sets the link's MTU from the active leg only.
func (l *leg) SetMTU(m int) error {
	if !l.isActive() {
		return nil
	}
	return l.b.nd.SetMTU(m)
}

// SetCarrier is the leg's port state: the bond sets the link's carrier
// from every leg's and moves to another leg when the active one's fails.
func (l *leg) SetCarrier(on bool) error {
	l.healthy.Store(on)
	select {
	case l.b.wake <- struct{}{}:
	default:
	}
	return nil
}

// Routes are the per-destination MTU routes, set by the active leg only:
// those a leg set stay when another takes over (the paths' MTUs are the
// peers', whichever port reaches them).
func (l *leg) Routes() netdev.Routes { return legRoutes{l} }

// Close ends the leg's reads; the netdev stays, the bond closes it.
func (l *leg) Close() error {
	l.closed.Store(true)
	l.b.mu.Lock()
	l.b.nextTurn()
	l.b.mu.Unlock()
	if ir, ok := l.b.nd.(netdev.ReadInterrupter); ok {
		ir.InterruptReads()
	}
	return nil
}

type legRoutes struct{ l *leg }

func (r legRoutes) Set(dst netip.Addr, m int) (bool, error) {
	if !r.l.isActive() {
		return false, nil
	}
	return r.l.b.nd.Routes().Set(dst, m)
}

func (r legRoutes) SetMany(dests []mtu.Dest) ([]bool, []error) {
	if !r.l.isActive() {
		return make([]bool, len(dests)), make([]error, len(dests))
	}
	return r.l.b.nd.Routes().SetMany(dests)
}

func (r legRoutes) Remove(dst netip.Addr) error {
	if !r.l.isActive() {
		return nil
	}
	return r.l.b.nd.Routes().Remove(dst)
}

func (r legRoutes) Flush() error {
	if !r.l.isActive() {
		return nil
	}
	return r.l.b.nd.Routes().Flush()
}
