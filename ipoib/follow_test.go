package ipoib

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibtest"
)

// subnetDevice is an ibtest device whose subnet a test changes, as the SM
// changes an InfiniBand port's: it raises subnet events, can be given a
// new P_Key table, and records which MLID each group is attached with.
type subnetDevice struct {
	*ibtest.Device
	events   atomic.Uint64
	mu       sync.Mutex
	pkeys    []ib.PKey         // nil: the device's own
	lid      uint16            // the port's LID as the SM set it
	attached map[ib.GID]uint16 // MGID -> the MLID of its attachment
	attaches int
}

func (d *subnetDevice) SubnetEvents() uint64 { return d.events.Load() }

func (d *subnetDevice) Port() ib.PortAttr {
	p := d.Device.Port()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pkeys != nil {
		p.PKeys = d.pkeys
	}
	p.LID = d.lid
	return p
}

func (d *subnetDevice) AttachMulticast(qp ib.QP, mgid ib.GID, mlid uint16) error {
	d.mu.Lock()
	d.attached[mgid] = mlid
	d.attaches++
	d.mu.Unlock()
	return d.Device.AttachMulticast(qp, mgid, mlid)
}

func (d *subnetDevice) DetachMulticast(qp ib.QP, mgid ib.GID) error {
	d.mu.Lock()
	delete(d.attached, mgid)
	d.mu.Unlock()
	return d.Device.DetachMulticast(qp, mgid)
}

func (d *subnetDevice) attachedMLID(mgid ib.GID) (uint16, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.attached[mgid]
	return m, ok
}

// subnetDeviceHosts are n hosts on subnet devices served by f, in mode.
func subnetDeviceHosts(t *testing.T, f *fakeSA, n int, mode Mode) ([]*fakeHost, []*subnetDevice) {
	devs := make([]*subnetDevice, n)
	mods := make([]func(*Config), n)
	for k := range n {
		mods[k] = func(c *Config) {
			c.Subnet, c.Mode = f, mode
			devs[k] = &subnetDevice{Device: c.Device.(*ibtest.Device), attached: map[ib.GID]uint16{}, lid: uint16(0x10 + k)}
			c.Device = devs[k]
		}
	}
	h := newFakeHosts(t, n, mods...)
	f.mu.Lock()
	for k, x := range h {
		f.paths[x.port.local.GID] = uint16(0x10 + k)
	}
	f.mu.Unlock()
	return h, devs
}

// TestSubnetBroadcastChangeFollowed: when the SA answers the join after a
// subnet event with a changed broadcast group, the interface follows it
// without a restart: a new Q_Key is set on the UD QP (same QP number, so
// our link address stays), a new MLID is attached, and datagrams flow
// both ways afterwards. Each change is counted once.
func TestSubnetBroadcastChangeFollowed(t *testing.T) {
	for _, tc := range []struct {
		name        string
		change      func(f *fakeSA, bcast ib.GID)
		wantQKey    ib.QKey
		wantMLID    uint16
		wantChanges uint64
		wantReinits uint64
	}{
		{"new Q_Key", func(f *fakeSA, _ ib.GID) { f.qkey = 0x2222 }, 0x2222, 0xc000, 1, 1},
		{"new MLID", func(f *fakeSA, bcast ib.GID) { f.groups[bcast] = 0xc0ff }, 0x0b1b, 0xc0ff, 1, 0},
		{"new Q_Key and MLID", func(f *fakeSA, bcast ib.GID) { f.qkey, f.groups[bcast] = 0x3333, 0xc0fe }, 0x3333, 0xc0fe, 1, 1},
		{"nothing changed", func(*fakeSA, ib.GID) {}, 0x0b1b, 0xc000, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeSA(0x0b1b)
			h, devs := subnetDeviceHosts(t, f, 2, Datagram)
			a, b := h[0], h[1]
			bcast := encap.BroadcastMGID(a.port.pkey, encap.LinkLocal)
			out := packetTo(a.ip6, b.ip6, 600, 1)
			a.send(out)
			if got := b.next(t); string(got) != string(out) {
				t.Fatalf("b got %d octets before the change, want a's packet", len(got))
			}
			linkA, linkB := a.LinkAddr(), b.LinkAddr()
			f.mu.Lock()
			joins := len(f.joins)
			f.mu.Unlock()

			f.mu.Lock()
			tc.change(f, bcast)
			f.mu.Unlock()
			for _, d := range devs {
				d.events.Add(1)
			}
			for k, x := range h {
				waitFor(t, "both hosts join the broadcast group again", func() bool {
					f.mu.Lock()
					defer f.mu.Unlock()
					return len(f.joins) >= joins+2
				})
				waitFor(t, "the host follows the group", func() bool {
					info := x.Show()
					return info.QKey == uint32(tc.wantQKey) && info.BcastMLID == tc.wantMLID
				})
				if mlid, ok := devs[k].attachedMLID(bcast); !ok || mlid != tc.wantMLID {
					t.Errorf("host %d: broadcast group attached %v with MLID %#x, want %#x", k, ok, mlid, tc.wantMLID)
				}
				waitFor(t, "the change is counted", func() bool { return x.count(subnetBcastChanges) == tc.wantChanges })
				if x.count(udReinits) != tc.wantReinits {
					t.Errorf("host %d: ud_qp_reinits %d, want %d", k, x.count(udReinits), tc.wantReinits)
				}
			}
			if a.LinkAddr() != linkA || b.LinkAddr() != linkB {
				t.Errorf("link addresses moved: %v→%v, %v→%v", linkA, a.LinkAddr(), linkB, b.LinkAddr())
			}
			// Traffic goes on: the resolved neighbor over UD both ways, and a
			// new resolution over the broadcast group (ARP).
			for seq, p := range [][]byte{packetTo(a.ip6, b.ip6, 600, 2), packetTo(a.ip4, b.ip4, 500, 3)} {
				a.send(p)
				if got := b.next(t); string(got) != string(p) {
					t.Fatalf("packet %d after the change: b got %d octets, want a's", seq, len(got))
				}
			}
			back := packetTo(b.ip4, a.ip4, 400, 4)
			b.send(back)
			if got := a.next(t); string(got) != string(back) {
				t.Fatalf("a got %d octets after the change, want b's packet", len(got))
			}
			if n := a.ibdev.Counter("rx_drop_qkey") + b.ibdev.Counter("rx_drop_qkey"); tc.wantReinits == 0 && n != 0 {
				t.Errorf("%d datagrams dropped for their Q_Key with no Q_Key change", n)
			}
		})
	}
}

// TestSubnetPKeyIndexMoved: a P_Key change that moves our partition to
// another index of the port's table tears the connections down and makes
// the UD QP ready again, as the kernel's heavy flush does; one that
// leaves the index alone changes nothing. Traffic goes on either way.
func TestSubnetPKeyIndexMoved(t *testing.T) {
	for _, tc := range []struct {
		name        string
		table       []ib.PKey
		wantMoved   uint64
		wantReinits uint64
	}{
		{"index moved", []ib.PKey{0x8001, ib.DefaultPKey}, 1, 1},
		{"index unchanged", []ib.PKey{ib.DefaultPKey, 0x8001}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeSA(0x0b1b)
			h, devs := subnetDeviceHosts(t, f, 2, Connected)
			a, b := h[0], h[1]
			out := packetTo(a.ip4, b.ip4, 3000, 1)
			a.send(out)
			if got := b.next(t); string(got) != string(out) {
				t.Fatalf("b got %d octets, want a's packet", len(got))
			}
			waitFor(t, "a connects to b", func() bool { return len(a.Connections()) > 0 })
			before := a.Connections()[0]

			f.mu.Lock()
			joins := len(f.joins)
			f.mu.Unlock()
			devs[0].mu.Lock()
			devs[0].pkeys = tc.table
			devs[0].mu.Unlock()
			devs[0].events.Add(1)
			// A join still in flight from the first packets may reach the
			// SA after joins was read: the event is taken once a has joined
			// again and (when it should) counted the move.
			waitFor(t, "a takes the event (and joins again)", func() bool {
				f.mu.Lock()
				defer f.mu.Unlock()
				return len(f.joins) > joins && a.count(pkeyIndexChanges) >= tc.wantMoved && a.count(udReinits) >= tc.wantReinits
			})
			if a.count(pkeyIndexChanges) != tc.wantMoved {
				t.Errorf("pkey_index_changes %d, want %d", a.count(pkeyIndexChanges), tc.wantMoved)
			}
			if a.count(udReinits) != tc.wantReinits {
				t.Errorf("ud_qp_reinits %d, want %d", a.count(udReinits), tc.wantReinits)
			}
			if tc.wantMoved > 0 {
				waitFor(t, "the old connection is torn down", func() bool {
					for _, c := range a.Connections() {
						if c.LocalQPN == before.LocalQPN {
							return false
						}
					}
					return true
				})
			}
			for seq := byte(2); seq < 4; seq++ {
				p := packetTo(a.ip4, b.ip4, 3000, seq)
				a.send(p)
				if got := b.next(t); string(got) != string(p) {
					t.Fatalf("packet %d after the event: b got %d octets", seq, len(got))
				}
			}
		})
	}
}

// TestSubnetLIDMovesReconnect: after a subnet event, connections made for
// LIDs that no longer hold are made again, as the kernel's ipoib flushes
// the paths they hang on: all of them when the SM gave our port another
// LID, those to a peer when the SA's new path puts it at another LID.
// An event that moved nothing keeps them. Traffic goes on throughout.
func TestSubnetLIDMovesReconnect(t *testing.T) {
	for _, tc := range []struct {
		name   string
		move   func(f *fakeSA, d *subnetDevice, b *fakeHost)
		redone bool
	}{
		{"our LID moved", func(_ *fakeSA, d *subnetDevice, _ *fakeHost) { d.lid = 0x77 }, true},
		{"the peer's LID moved", func(f *fakeSA, _ *subnetDevice, b *fakeHost) { f.paths[b.port.local.GID] = 0x66 }, true},
		{"nothing moved", func(*fakeSA, *subnetDevice, *fakeHost) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeSA(0x0b1b)
			h, devs := subnetDeviceHosts(t, f, 2, Connected)
			a, b := h[0], h[1]
			out := packetTo(a.ip4, b.ip4, 3000, 1)
			a.send(out)
			if got := b.next(t); string(got) != string(out) {
				t.Fatalf("b got %d octets, want a's packet", len(got))
			}
			waitFor(t, "a connects to b", func() bool { return len(a.Connections()) > 0 })
			before := a.Connections()[0].LocalQPN
			queries := f.queried(b.port.local.GID)

			f.mu.Lock()
			devs[0].mu.Lock()
			tc.move(f, devs[0], b)
			devs[0].mu.Unlock()
			f.mu.Unlock()
			devs[0].events.Add(1)
			waitFor(t, "a asks for b's path again", func() bool { return f.queried(b.port.local.GID) > queries })
			a.Show() // the answer is taken by now or in the next turns of the control loop
			gone := func() bool {
				for _, c := range a.Connections() {
					if c.LocalQPN == before {
						return false
					}
				}
				return true
			}
			if tc.redone {
				waitFor(t, "the old connection is torn down", gone)
			} else if gone() {
				t.Error("the connection was torn down after an event that moved nothing")
			}
			for seq := byte(2); seq < 4; seq++ {
				p := packetTo(a.ip4, b.ip4, 3000, seq)
				a.send(p)
				if got := b.next(t); string(got) != string(p) {
					t.Fatalf("packet %d after the event: b got %d octets", seq, len(got))
				}
			}
			if tc.redone {
				waitFor(t, "a connects to b again", func() bool {
					return len(a.Connections()) > 0 && !slices.ContainsFunc(a.Connections(), func(c ConnInfo) bool { return c.LocalQPN == before })
				})
			}
		})
	}
}
