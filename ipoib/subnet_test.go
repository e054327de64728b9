package ipoib

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibtest"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/netdev/netdevtest"
	"github.com/ipoibd/ipoibd/sa"
)

// fakeSA is a subnet administrator for every host of a test: it hands out
// the broadcast group with its Q_Key, MLIDs for new groups, and path
// records to the GIDs it was told about. The real one (OpenSM) judges
// package umadsa and sapath; here the interface's use of the answers is
// what is checked.
type fakeSA struct {
	mu       sync.Mutex
	qkey     ib.QKey
	mtu      ib.MTU
	joins    []sa.JoinRequest
	leaves   []ib.GID
	paths    map[ib.GID]uint16 // DGID -> DLID
	queries  map[ib.GID]int
	failing  map[ib.GID]bool // path queries to these fail
	joinErr  error
	nextMLID uint16
	groups   map[ib.GID]uint16
}

func newFakeSA(qkey ib.QKey) *fakeSA {
	return &fakeSA{qkey: qkey, mtu: ib.MTU2048, paths: map[ib.GID]uint16{}, queries: map[ib.GID]int{}, failing: map[ib.GID]bool{},
		nextMLID: 0xc001, groups: map[ib.GID]uint16{}}
}

func (f *fakeSA) Join(j sa.JoinRequest) (sa.MCMemberRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joins = append(f.joins, j)
	if f.joinErr != nil {
		return sa.MCMemberRecord{}, f.joinErr
	}
	mlid, ok := f.groups[j.MGID]
	switch {
	case ok:
	case j.MGID == encap.BroadcastMGID(j.PKey, encap.LinkLocal):
		mlid = 0xc000
	default:
		mlid = f.nextMLID
		f.nextMLID++
	}
	f.groups[j.MGID] = mlid
	return sa.MCMemberRecord{MGID: j.MGID, QKey: f.qkey, MLID: mlid, PKey: j.PKey, JoinState: j.State,
		MTU: sa.Selected{Selector: sa.Exactly, Value: uint8(f.mtu)}, SL: 2, Rate: sa.Selected{Selector: sa.Exactly, Value: 3}}, nil
}

func (f *fakeSA) Leave(mgid ib.GID, pkey ib.PKey, state sa.JoinState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaves = append(f.leaves, mgid)
	return nil
}

func (f *fakeSA) PathRecord(dgid ib.GID, pkey ib.PKey) (sa.PathRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries[dgid]++
	dlid, ok := f.paths[dgid]
	switch {
	case f.failing[dgid]:
		return sa.PathRecord{}, errors.New("fake SA: busy")
	case !ok:
		return sa.PathRecord{}, errors.New("fake SA: no path")
	}
	return sa.PathRecord{DGID: dgid, DLID: dlid, SLID: 1, SL: 5, PKey: pkey, Reversible: true, NumbPath: 1,
		MTU: sa.Selected{Selector: sa.Exactly, Value: uint8(ib.MTU4096)}, Rate: sa.Selected{Selector: sa.Exactly, Value: 6},
		Lifetime: sa.Selected{Selector: sa.Exactly, Value: 16}}, nil
}

func (f *fakeSA) setJoinErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joinErr = err
}

func (f *fakeSA) setFailing(gid ib.GID, fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing[gid] = fail
}

func (f *fakeSA) queried(gid ib.GID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queries[gid]
}

// joinedAs reports whether a joined mgid in state.
func (f *fakeSA) joinedAs(mgid ib.GID, state sa.JoinState) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(f.joins, func(j sa.JoinRequest) bool { return j.MGID == mgid && j.State == state })
}

// subnetHosts are fake hosts whose ports the SA serves, at LIDs 0x10+k;
// those from outside on are not its.
func subnetHosts(t *testing.T, f *fakeSA, n, outside int) []*fakeHost {
	mods := make([]func(*Config), n)
	for k := range outside {
		mods[k] = func(c *Config) { c.Subnet = f }
	}
	h := newFakeHosts(t, n, mods...)
	f.mu.Lock()
	for k, x := range h {
		f.paths[x.port.local.GID] = uint16(0x10 + k)
	}
	f.mu.Unlock()
	return h
}

// TestSubnetBroadcastJoin: with a subnet administrator the interface takes
// the broadcast group's Q_Key, MLID and MTU from its join; hosts that did
// talk (the device drops a datagram with another Q_Key), and one that kept the
// default Q_Key cannot reach them.
func TestSubnetBroadcastJoin(t *testing.T) {
	f := newFakeSA(0x12345678)
	h := subnetHosts(t, f, 3, 2)
	a, b, c := h[0], h[1], h[2]
	info := a.Show()
	if info.QKey != 0x12345678 || info.BcastMLID != 0xc000 || info.Subnet != "sa" || info.UDMTU != encap.MTUForIB(ib.MTU2048) {
		t.Errorf("show: qkey %#x mlid %#x subnet %q UD MTU %d; want the join's 0x12345678, 0xc000, sa, %d",
			info.QKey, info.BcastMLID, info.Subnet, info.UDMTU, encap.MTUForIB(ib.MTU2048))
	}
	out := packetTo(a.ip4, b.ip4, 1500, 1)
	a.send(out)
	if got := b.next(t); string(got) != string(out) {
		t.Fatalf("b got %d octets, want a's packet", len(got))
	}

	// A host outside the SA's word keeps Q_Key 0x0B1B: its ARP never
	// gets past a's Q_Key check.
	if c.Show().QKey != uint32(ib.DefaultIPoIBQKey) || c.Show().Subnet != "" {
		t.Errorf("without a Subnet: %+v, want the default Q_Key and no subnet", c.Show())
	}
	before, arps := a.stat(t, "dev_rx_drop_qkey"), a.count(arpIn)
	c.send(packetTo(c.ip4, a.ip4, 100, 2))
	waitFor(t, "a drops c's ARP on its Q_Key", func() bool { return a.stat(t, "dev_rx_drop_qkey") > before })
	if a.count(arpIn) != arps {
		t.Error("a took an ARP sent with another Q_Key")
	}

	f.setJoinErr(errors.New("no answer"))
	_, err := newOnFake(netdevtest.New(), Config{Name: "ib1", Device: a.dev, Subnet: f, Queues: 1})
	if err == nil || !strings.Contains(err.Error(), "broadcast group") {
		t.Errorf("New with a failing broadcast join: %v, want an error naming the broadcast group", err)
	}
}

// TestSubnetPaths: unicast traffic waits for the SA's path record (one
// query per peer, then the cache), and a query the SA fails is asked
// again with back-off, counted, until it answers.
func TestSubnetPaths(t *testing.T) {
	f := newFakeSA(0x0b1b)
	h := subnetHosts(t, f, 2, 2)
	a, b := h[0], h[1]
	f.setFailing(b.port.local.GID, true)
	out := packetTo(a.ip4, b.ip4, 1000, 1)
	a.send(out)
	waitFor(t, "a's path query to b fails", func() bool { return a.stat(t, "sa_path_query_failures") > 0 })
	if len(b.nd.Out) != 0 {
		t.Fatal("b got a's packet without a path record")
	}
	f.setFailing(b.port.local.GID, false)
	if got := b.next(t); string(got) != string(out) {
		t.Fatalf("b got %d octets, want a's packet once the SA answered", len(got))
	}
	for k := range 20 {
		a.send(packetTo(a.ip4, b.ip4, 1000, byte(2+k)))
		b.next(t)
	}
	if n := f.queried(b.port.local.GID); n < 2 || n > 4 {
		t.Errorf("a asked the SA %d times for b's path, want the failed tries and one answer", n)
	}
	var attr ib.AHAttr
	a.do(func() { attr = a.ctl.ahs[b.port.local.GID].ah.Attr() })
	if attr.Path.DLID != 0x11 || attr.Path.SL != 5 || attr.Path.StaticRate != 6 {
		t.Errorf("a's address handle to b: %+v, want the path record's DLID 0x11, SL 5, rate 6", attr.Path)
	}
}

// TestSubnetGroups: the IPv6 groups the interface needs are joined as a
// full member through the SA before they are attached, and a group we
// only send to (a peer's solicited-node group) gets a send-only join: the
// solicitation waits for it instead of being lost.
func TestSubnetGroups(t *testing.T) {
	f := newFakeSA(0x0b1b)
	h := subnetHosts(t, f, 2, 2)
	a, b := h[0], h[1]
	allNodesMGID, _ := encap.MulticastMGID(allNodes, a.port.pkey, encap.LinkLocal)
	waitFor(t, "a attaches all-nodes", func() bool {
		var ok bool
		a.do(func() { _, ok = a.ctl.groups[allNodesMGID] })
		return ok
	})
	out := packetTo(a.ip6, b.ip6, 1000, 1)
	a.send(out)
	if got := b.next(t); string(got) != string(out) {
		t.Fatalf("b got %d octets, want a's IPv6 packet", len(got))
	}
	// The join is asked for asynchronously, and b's announcement, if a
	// hears it after making b's entry, resolves b before the join is
	// done: the join is awaited, not expected by now.
	bSolicited, _ := encap.MulticastMGID(neigh.SolicitedNode(b.ip6), a.port.pkey, encap.LinkLocal)
	waitFor(t, "a's send-only join of b's solicited-node group", func() bool { return f.joinedAs(bSolicited, sa.SendOnlyNonMember) })
	// The announcements before the all-nodes join and the first
	// solicitation before the send-only join waited for them.
	if n := a.count(txDropJoining); n != 0 {
		t.Errorf("tx_drop_joining %d: sends were dropped instead of waiting for their group's join", n)
	}
	if a.count(ndOut) < 3 {
		t.Errorf("nd_out %d: want a's announcements and its solicitation", a.count(ndOut))
	}
}

// TestSubnetLeavesOnClose: closing the interface leaves what it joined,
// the broadcast group last, as the kernel's ipoib does when it goes down.
func TestSubnetLeavesOnClose(t *testing.T) {
	f := newFakeSA(0x0b1b)
	a := subnetHosts(t, f, 1, 1)[0]
	allNodesMGID, _ := encap.MulticastMGID(allNodes, a.port.pkey, encap.LinkLocal)
	waitFor(t, "a joins all-nodes", func() bool {
		var ok bool
		a.do(func() { _, ok = a.ctl.groups[allNodesMGID] })
		return ok
	})
	a.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	bcast := encap.BroadcastMGID(a.port.pkey, encap.LinkLocal)
	if !slices.Contains(f.leaves, allNodesMGID) || len(f.leaves) == 0 || f.leaves[len(f.leaves)-1] != bcast {
		t.Errorf("left %v on close, want all-nodes %v among them and the broadcast group %v last", f.leaves, allNodesMGID, bcast)
	}
}

// TestSubnetUnstartedLeaves: an interface closed before Start, or whose
// New failed after the broadcast join, leaves the broadcast group too.
func TestSubnetUnstartedLeaves(t *testing.T) {
	f := newFakeSA(0x0b1b)
	dev, err := ibtest.NewFabric().Open(ibtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	bcast := encap.BroadcastMGID(ib.DefaultPKey, encap.LinkLocal)
	left := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		n := 0
		for _, g := range f.leaves {
			if g == bcast {
				n++
			}
		}
		return n
	}
	i, err := newOnFake(netdevtest.New(), Config{Name: "ib0", Device: dev, Subnet: f, Queues: 1})
	if err != nil {
		t.Fatal(err)
	}
	i.Close()
	if left() != 1 {
		t.Errorf("closed before Start: left the broadcast group %d times, want 1", left())
	}
	// In datagram mode the netdev takes the group's smaller UD MTU after
	// the join; a netdev refusing it fails New after the join.
	cfg := Config{Name: "ib0", Device: dev, Subnet: f, Queues: 1, Mode: Datagram}
	nc, err := cfg.NetdevConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Netdev = mtuRefused{netdevtest.New().Open(nc)}
	if _, err := New(cfg); err == nil {
		t.Fatal("New with a failing netdev succeeded")
	}
	if left() != 2 {
		t.Errorf("New failed after the join: left the broadcast group %d times in all, want 2", left())
	}
}

// eventDevice is an ibtest device that reports subnet events and its
// port's state when a test changes them, as verbs does on an InfiniBand
// port.
type eventDevice struct {
	*ibtest.Device
	events atomic.Uint64
	down   atomic.Bool
}

func (d *eventDevice) SubnetEvents() uint64 { return d.events.Load() }
func (d *eventDevice) PortActive() bool     { return !d.down.Load() }

// TestSubnetEventRejoins: after a subnet event (an SM change, a client
// reregister), or the port down and active again with no event (the SM
// may have dropped our memberships meanwhile), the interface joins the
// broadcast group and every group it is in again and asks for its paths
// again; traffic goes on.
func TestSubnetEventRejoins(t *testing.T) {
	for _, tc := range []struct {
		name  string
		event func(d *eventDevice, a *fakeHost)
	}{
		{"subnet event", func(d *eventDevice, _ *fakeHost) { d.events.Add(1) }},
		{"port down, then active again", func(d *eventDevice, a *fakeHost) {
			d.down.Store(true)
			waitFor(t, "a's carrier off", func() bool { return !a.nd.Carrier() })
			d.down.Store(false)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { testRejoins(t, tc.event) })
	}
}

func testRejoins(t *testing.T, event func(*eventDevice, *fakeHost)) {
	f := newFakeSA(0x0b1b)
	var ev *eventDevice
	withEvents := func(c *Config) {
		c.Subnet = f
		ev = &eventDevice{Device: c.Device.(*ibtest.Device)}
		c.Device = ev
	}
	h := newFakeHosts(t, 2, withEvents, func(c *Config) { c.Subnet = f })
	a, b := h[0], h[1]
	f.mu.Lock()
	f.paths[a.port.local.GID], f.paths[b.port.local.GID] = 0x10, 0x11
	f.mu.Unlock()

	out := packetTo(a.ip4, b.ip4, 500, 1)
	a.send(out)
	if got := b.next(t); string(got) != string(out) {
		t.Fatalf("b got %d octets, want a's packet", len(got))
	}
	allNodesMGID, _ := encap.MulticastMGID(allNodes, a.port.pkey, encap.LinkLocal)
	bcast := encap.BroadcastMGID(a.port.pkey, encap.LinkLocal)
	joins := func(mgid ib.GID) int {
		f.mu.Lock()
		defer f.mu.Unlock()
		n := 0
		for _, j := range f.joins {
			if j.MGID == mgid && j.PKey == a.port.pkey {
				n++
			}
		}
		return n
	}
	waitFor(t, "a joins all-nodes", func() bool { return joins(allNodesMGID) > 0 })
	before := map[ib.GID]int{allNodesMGID: joins(allNodesMGID), bcast: joins(bcast)}
	queries := f.queried(b.port.local.GID)

	event(ev, a)
	waitFor(t, "a joins its groups again", func() bool {
		return joins(allNodesMGID) > before[allNodesMGID] && joins(bcast) > before[bcast]
	})
	waitFor(t, "a asks for b's path again", func() bool { return f.queried(b.port.local.GID) > queries })
	out = packetTo(a.ip4, b.ip4, 500, 2)
	a.send(out)
	if got := b.next(t); string(got) != string(out) {
		t.Fatalf("b got %d octets after the subnet event, want a's packet", len(got))
	}
}

// mtuRefused is a netdev that takes no MTU change.
type mtuRefused struct{ *netdevtest.Netdev }

func (mtuRefused) SetMTU(int) error { return errors.New("no MTU change") }

// TestSubnetDatagramMTU: in datagram mode, without an MTU asked for, the
// netdev opened at the port's UD MTU takes the broadcast group's smaller
// one once New has joined it.
func TestSubnetDatagramMTU(t *testing.T) {
	dev, err := ibtest.NewFabric().Open(ibtest.Config{}) // IB MTU 4096
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	nd := netdevtest.New()
	i, err := newOnFake(nd, Config{Name: "ib0", Device: dev, Subnet: newFakeSA(0x0b1b), Queues: 1, Mode: Datagram}) // group MTU 2048
	if err != nil {
		t.Fatal(err)
	}
	defer i.Close()
	if got := nd.MTU(); got != 2044 {
		t.Errorf("netdev MTU %d, want the group's UD MTU 2044", got)
	}
}

// TestPortBackUDQPInError: a port that comes back finds the UD QP in
// ERROR (rxe moves it there when a send fails while the port is down):
// the QP goes through RESET to RTS again, keeping its number, before the
// carrier comes on, and datagrams flow both ways again.
func TestPortBackUDQPInError(t *testing.T) {
	var ev *eventDevice
	h := newFakeHosts(t, 2, func(c *Config) {
		c.Mode = Datagram
		ev = &eventDevice{Device: c.Device.(*ibtest.Device)}
		c.Device = ev
	}, func(c *Config) { c.Mode = Datagram })
	a, b := h[0], h[1]
	out := packetTo(a.ip4, b.ip4, 500, 1)
	a.send(out)
	if got := b.next(t); string(got) != string(out) {
		t.Fatalf("b got %d octets, want a's packet", len(got))
	}
	qpn := a.udQP.Num()
	ev.down.Store(true)
	waitFor(t, "a's carrier off", func() bool { return !a.nd.Carrier() })
	if err := a.udQP.Modify(ib.QPModify{State: ib.StateError}); err != nil {
		t.Fatal(err)
	}
	ev.down.Store(false)
	waitFor(t, "a's carrier on", func() bool { return a.nd.Carrier() })
	if n := a.count(udReinits); n != 1 {
		t.Errorf("ud_qp_reinits %d, want 1", n)
	}
	if st := a.udQP.State(); st != ib.StateRTS {
		t.Errorf("UD QP %v once the carrier is on, want RTS", st)
	}
	if got := a.udQP.Num(); got != qpn {
		t.Errorf("UD QPN %v, want %v (our link address)", got, qpn)
	}
	for seq := byte(2); seq < 4; seq++ {
		p := packetTo(a.ip4, b.ip4, 500, seq)
		a.send(p)
		if got := b.next(t); string(got) != string(p) {
			t.Fatalf("packet %d after the port came back: b got %d octets", seq, len(got))
		}
		p = packetTo(b.ip4, a.ip4, 500, seq)
		b.send(p)
		if got := a.next(t); string(got) != string(p) {
			t.Fatalf("packet %d after the port came back: a got %d octets", seq, len(got))
		}
	}
}
