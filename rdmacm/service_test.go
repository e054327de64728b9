//go:build rdma

package rdmacm

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
)

// These tests run real ipoibcm.Managers on the kernel CM service, one per
// device of the test bed (openPair), each driven as the daemon drives it: a
// goroutine waits on Wake and polls under the Manager's lock.

// node is one side: device, SRQ, UD QP (for the UD QPN), Manager, service.
type node struct {
	t     *testing.T
	e     *end
	srq   ib.SRQ
	local ib.LinkAddr
	svc   *Service

	mu  sync.Mutex // the Manager's: the poll loop and the test take it
	mgr *ipoibcm.Manager

	up, down chan *ipoibcm.Connection
	refused  chan string
	polled   chan struct{} // a Poll ran (capacity one)
	stop     chan struct{}
	done     chan struct{}
}

func newNode(t *testing.T, e *end, uc bool) *node {
	t.Helper()
	n := &node{
		t: t, e: e, up: make(chan *ipoibcm.Connection, 16), down: make(chan *ipoibcm.Connection, 16),
		refused: make(chan string, 16), polled: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	var err error
	// The device's Close releases the SRQ and every QP, after the Manager
	// and the service are closed.
	if n.srq, err = e.dev.CreateSRQ(ib.SRQAttr{MaxWR: 32}); err != nil {
		t.Fatal(err)
	}
	ud := e.udQP(t)
	n.local = ib.LinkAddr{Flags: ib.FlagRC | ib.FlagUC, QPN: ud.Num(), GID: e.port().GID}
	n.mgr, err = ipoibcm.NewManager(ipoibcm.ManagerConfig{
		Service: func(events func(cm.Event)) (cm.Service, error) {
			s, err := New(e.dev, events)
			if err == nil {
				n.svc = s.(*Service)
			}
			return s, err
		},
		PKey:    e.port().PKeys[0],
		Local:   n.local,
		Policy:  ipoibcm.PolicyRFC,
		UC:      uc,
		PathMTU: e.port().ActiveMTU,
		QPs:     n,
		Up:      func(c *ipoibcm.Connection) { n.up <- c },
		Down:    func(c *ipoibcm.Connection, reason string) { n.down <- c },
		Refused: func(peer ib.LinkAddr, reason string) { n.refused <- reason },
	})
	if err != nil {
		t.Fatalf("%s: NewManager: %v", e.dev.Name(), err)
	}
	t.Logf("%s: %v", e.dev.Name(), n.svc)
	go n.loop()
	t.Cleanup(func() {
		close(n.stop)
		<-n.done
		n.mu.Lock()
		defer n.mu.Unlock()
		n.mgr.Close(time.Now())
		if err := n.svc.Close(); err != nil {
			t.Errorf("%s: service Close: %v", e.dev.Name(), err)
		}
		if err := n.svc.Close(); err != nil {
			t.Errorf("%s: second service Close: %v", e.dev.Name(), err)
		}
	})
	return n
}

// CreateQP is the Manager's QP factory: connected QPs on the node's SRQ.
func (n *node) CreateQP(t ib.QPType) (ib.QP, error) {
	return n.e.dev.CreateQP(ib.QPAttr{Type: t, SendCQ: n.e.scq, RecvCQ: n.e.rcq, SRQ: n.srq, MaxSend: 64})
}

func (n *node) loop() {
	defer close(n.done)
	for {
		select {
		case <-n.stop:
			return
		case <-n.svc.Wake():
			n.mu.Lock()
			n.svc.Poll(time.Now())
			n.mu.Unlock()
			select {
			case n.polled <- struct{}{}:
			default:
			}
		}
	}
}

// connect asks the Manager for a connection to peer.
func (n *node) connect(peer ib.LinkAddr) {
	n.t.Helper()
	n.mu.Lock()
	ok, err := n.mgr.Connect(time.Now(), peer)
	n.mu.Unlock()
	if !ok || err != nil {
		n.t.Fatalf("%s: Connect(%v) = %v, %v", n.e.dev.Name(), peer, ok, err)
	}
}

// until waits, polls included, for cond (run under the Manager's lock).
func (n *node) until(what string, cond func() bool) {
	n.t.Helper()
	deadline := time.After(waitFor)
	for {
		n.mu.Lock()
		ok := cond()
		n.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-n.polled:
		case <-deadline:
			n.t.Fatalf("%s: not %s within %v; counters %v", n.e.dev.Name(), what, waitFor, n.svc.Counters())
		}
	}
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("no %s within %v", what, waitFor)
		panic("unreachable")
	}
}

// send carries a 64 KiB message on from's connection to to's, through
// to's SRQ.
func send(t *testing.T, from, to *node, cf, ct *ipoibcm.Connection, seed int) {
	t.Helper()
	const size = 64 << 10
	const slot = 20
	if _, err := to.srq.PostRecv([]ib.RecvWR{{ID: slot, SGE: to.e.sge(slot, slotSize)}}); err != nil {
		t.Fatal(err)
	}
	testutil.Fill(from.e.buf(1)[:size], seed)
	if _, err := cf.QP.PostSend([]ib.SendWR{{ID: 1, SGE: from.e.sge(1, size)}}); err != nil {
		t.Fatal(err)
	}
	if c := one(t, from.e.scq, "send"); c.Status != ib.WCSuccess || c.QPN != cf.QP.Num() {
		t.Fatalf("%s: send completion %+v", from.e.dev.Name(), c)
	}
	c := one(t, to.e.rcq, "receive")
	if c.Status != ib.WCSuccess || c.ID != slot || c.QPN != ct.QP.Num() || c.ByteLen != size {
		t.Fatalf("%s: receive completion %+v, want %d octets on QP %v", to.e.dev.Name(), c, size, ct.QP.Num())
	}
	if !bytes.Equal(to.e.buf(slot)[:size], from.e.buf(1)[:size]) {
		t.Fatalf("%s → %s: the message arrived changed", from.e.dev.Name(), to.e.dev.Name())
	}
}

// checkPair checks that ca (on a) and cb (on b) are the two ends of one
// connection, named by link addresses as IPoIB names them, and carry data
// both ways.
func checkPair(t *testing.T, a, b *node, ca, cb *ipoibcm.Connection, typ ib.QPType) {
	t.Helper()
	if ca.Peer.QPN != b.local.QPN || ca.Peer.GID != b.local.GID || cb.Peer.QPN != a.local.QPN || cb.Peer.GID != a.local.GID {
		t.Errorf("peers %v and %v, want %v and %v (the GID must be the link address's)", ca.Peer, cb.Peer, b.local, a.local)
	}
	if ca.QP.Type() != typ || cb.QP.Type() != typ {
		t.Errorf("QPs %v and %v, want %v", ca.QP.Type(), cb.QP.Type(), typ)
	}
	if ca.QP.State() != ib.StateRTS || cb.QP.State() != ib.StateRTS {
		t.Errorf("QPs in %v and %v, want RTS", ca.QP.State(), cb.QP.State())
	}
	send(t, a, b, ca, cb, 1)
	send(t, b, a, cb, ca, 2)
}

func TestServiceRC(t *testing.T) {
	a, b := openPair(t)
	na, nb := newNode(t, a, false), newNode(t, b, false)
	na.connect(nb.local)
	ca, cb := wait(t, na.up, "Up on "+a.dev.Name()), wait(t, nb.up, "Up on "+b.dev.Name())
	if !ca.Outgoing || cb.Outgoing {
		t.Errorf("outgoing: %v on the requester, %v on the listener", ca.Outgoing, cb.Outgoing)
	}
	checkPair(t, na, nb, ca, cb, ib.RC)
	for _, n := range []*node{na, nb} {
		cs := n.svc.Counters()
		t.Logf("%s: %v", n.e.dev.Name(), cs)
		if counter(cs, "conns") != 1 || counter(cs, "conns_half_open") != 0 {
			t.Errorf("%s: gauges conns=%d half-open=%d, want 1 and 0", n.e.dev.Name(), counter(cs, "conns"), counter(cs, "conns_half_open"))
		}
	}
}

func TestServiceUC(t *testing.T) {
	a, b := openPair(t)
	na, nb := newNode(t, a, true), newNode(t, b, true)
	if q, err := na.CreateQP(ib.UC); err != nil {
		t.Skipf("%s: no UC QP on an SRQ: %v", a.dev.Name(), err)
	} else {
		q.Close()
	}
	na.connect(nb.local)
	ca, cb := wait(t, na.up, "Up on "+a.dev.Name()), wait(t, nb.up, "Up on "+b.dev.Name())
	checkPair(t, na, nb, ca, cb, ib.UC)
}

// Both sides connect at once through the kernel CM. If both REQs were
// outstanding together the Managers' crossing rule leaves one connection;
// if the kernel CM finished one before the other's REQ arrived, RFC 4755
// keeps both (the rule is only for REQs still outstanding). Either way
// each side ends with its sends on an established connection, every connection
// established and pairing with one on the other side, data flowing both
// ways on each, and nothing gone down.
func TestServiceCrossing(t *testing.T) {
	a, b := openPair(t)
	na, nb := newNode(t, a, false), newNode(t, b, false)
	na.connect(nb.local)
	nb.connect(na.local)
	// Settled: every connection established and, under rfc, carrying
	// sends (an incoming one may become so a Poll after it is
	// established).
	settled := func(n *node, peer ib.LinkAddr) bool {
		cs := n.mgr.Connections()
		for _, c := range cs {
			if c.State() != cm.StateEstablished || !c.Sendable() {
				return false
			}
		}
		return len(cs) > 0 && n.mgr.SendConnection(peer) != nil
	}
	na.until("settled with a connection carrying its sends", func() bool { return settled(na, nb.local) })
	nb.until("settled with a connection carrying its sends", func() bool { return settled(nb, na.local) })
	na.mu.Lock()
	csa := na.mgr.Connections()
	na.mu.Unlock()
	nb.mu.Lock()
	csb := nb.mgr.Connections()
	nb.mu.Unlock()
	if len(csa) != len(csb) || len(csa) > 2 {
		t.Fatalf("%d connections on %s, %d on %s: want one or two on each", len(csa), a.dev.Name(), len(csb), b.dev.Name())
	}
	for _, ca := range csa {
		var cb *ipoibcm.Connection
		for _, c := range csb {
			if c.Outgoing != ca.Outgoing {
				cb = c
			}
		}
		if cb == nil {
			t.Fatalf("%s's connection (outgoing %v) has no other end on %s", a.dev.Name(), ca.Outgoing, b.dev.Name())
		}
		checkPair(t, na, nb, ca, cb, ib.RC)
	}
	for _, n := range []*node{na, nb} {
		n.mu.Lock()
		st, sendable := n.mgr.Stats, 0
		for _, c := range n.mgr.Connections() {
			if c.Sendable() {
				sendable++
			}
		}
		n.mu.Unlock()
		t.Logf("%s: %d connections, %+v", n.e.dev.Name(), len(csa), st)
		// Under the rfc policy every connection may carry sends.
		if sendable != len(csa) || len(n.down) != 0 {
			t.Errorf("%s: %d of %d connections carry sends, %d Down callbacks; want all and 0", n.e.dev.Name(), sendable, len(csa), len(n.down))
		}
	}
}

// A disconnects: B's connection goes down, and both sides forget theirs
// when the kernel reports the end of timewait.
func TestServiceDisconnect(t *testing.T) {
	a, b := openPair(t)
	na, nb := newNode(t, a, false), newNode(t, b, false)
	na.connect(nb.local)
	wait(t, na.up, "Up on "+a.dev.Name())
	cb := wait(t, nb.up, "Up on "+b.dev.Name())
	na.mu.Lock()
	na.mgr.Disconnect(time.Now(), nb.local, "test")
	na.mu.Unlock()
	if got := wait(t, nb.down, "Down on "+b.dev.Name()); got != cb {
		t.Errorf("Down for %v, want %v", got.Peer, cb.Peer)
	}
	for _, n := range []*node{na, nb} {
		n.until("rid of the connection after timewait", func() bool { return len(n.mgr.Connections()) == 0 })
		cs := n.svc.Counters()
		if counter(cs, "ev_timewait_exit") != 1 || counter(cs, "conns") != 0 {
			t.Errorf("%s: %d timewait exits, %d ids left; counters %v", n.e.dev.Name(), counter(cs, "ev_timewait_exit"), counter(cs, "conns"), cs)
		}
	}
}

// A REQ for a port nobody listens on is rejected (Invalid Service ID),
// which the Manager reports as refused.
func TestServiceRefused(t *testing.T) {
	a, b := openPair(t)
	na, nb := newNode(t, a, false), newNode(t, b, false)
	nobody := nb.local
	nobody.QPN++
	na.connect(nobody)
	reason := wait(t, na.refused, "Refused on "+a.dev.Name())
	t.Logf("refused: %s", reason)
	if !strings.Contains(reason, "rejected") && !strings.Contains(reason, "timeout") {
		t.Errorf("refused for %q", reason)
	}
	na.until("rid of the attempt", func() bool { return len(na.mgr.Connections()) == 0 })
	if len(nb.up) != 0 {
		t.Errorf("%s accepted a connection for another service", b.dev.Name())
	}
}

// The service runs only on a verbs device: anything else (softib, a fake,
// nothing) gets an error naming what it was given, never a panic.
func TestNewNeedsAVerbsDevice(t *testing.T) {
	events := func(cm.Event) {}
	for _, tt := range []struct {
		name string
		dev  ib.Device
	}{
		{"nil", nil},
		{"another provider's", otherDevice{}},
	} {
		s, err := New(tt.dev, events)
		if s != nil || err == nil || !strings.Contains(err.Error(), "verbs provider") {
			t.Errorf("New(%s device) = %v, %v; want no service and an error naming the verbs provider", tt.name, s, err)
		}
	}
}

// otherDevice is an ib.Device of no provider of ours.
type otherDevice struct{ ib.Device }
