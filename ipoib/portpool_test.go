package ipoib

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibtest"
	"github.com/ipoibd/ipoibd/netdev/netdevtest"
)

// portNode is one host of the port tests: a device whose port serves
// several interfaces, as the daemon's ib0 and its P_Key children.
type portNode struct {
	dev  *ibtest.Device
	port *Port
	qp1  *cm.SharedQP1
}

func newPortNode(t *testing.T, fab *ibtest.Fabric, pkeys []ib.PKey) *portNode {
	t.Helper()
	dev, err := fab.Open(ibtest.Config{PKeys: pkeys})
	if err != nil {
		t.Fatal(err)
	}
	mads, err := dev.MADs()
	if err != nil {
		t.Fatal(err)
	}
	n := &portNode{dev: dev, qp1: cm.NewSharedQP1(mads)}
	if n.port, err = OpenPort(dev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.port.Close(); _ = n.qp1.Close(); _ = dev.Close() })
	return n
}

// add opens an interface on the node's port in partition pkey, at
// 10.P.0.host/24 where P is pkey's low octet.
func (n *portNode) add(t *testing.T, pkey ib.PKey, host byte) *fakeHost {
	t.Helper()
	h := &fakeHost{ibdev: n.dev, nd: netdevtest.New(),
		ip4: netip.AddrFrom4([4]byte{10, byte(pkey), 0, host}),
		ip6: netip.MustParseAddr(fmt.Sprintf("fd00:%x::%d", uint16(pkey), host))}
	cfg := Config{Name: fmt.Sprintf("ib0.%04x", uint16(pkey)), Port: n.port, PKey: pkey, Queues: 1,
		ConnService: cm.EngineOnSharedQP1(n.qp1),
		Addrs:       []netip.Prefix{netip.PrefixFrom(h.ip4, 24)},
		Log:         slog.New(slog.NewTextHandler(io.Discard, nil))}
	var err error
	if h.Interface, err = newOnFake(h.nd, cfg); err != nil {
		t.Fatal(err)
	}
	h.Start()
	t.Cleanup(h.Close)
	return h
}

// exchange sends a packet of size octets from a to b and one back.
func exchange(t *testing.T, a, b *fakeHost, size int, seq byte) {
	t.Helper()
	out := packetTo(a.ip4, b.ip4, size, seq)
	a.send(out)
	if got := b.next(t); string(got) != string(out) {
		t.Fatalf("%v got %d octets, want %v's %d-octet packet", b.ip4, len(got), a.ip4, len(out))
	}
	back := packetTo(b.ip4, a.ip4, size, seq+1)
	b.send(back)
	if got := a.next(t); string(got) != string(back) {
		t.Fatalf("%v got %d octets, want %v's %d-octet packet", a.ip4, len(got), b.ip4, len(back))
	}
}

// TestPortSharedByPartitions: interfaces of three partitions on one port
// share its SRQ, receive CQ and slab; each connected QP's receives reach
// the interface that owns it, in its own partition, over UD and RC; the
// first interface has the rings it always had, the others small ones,
// registered apart and given back when they close.
func TestPortSharedByPartitions(t *testing.T) {
	pkeys := []ib.PKey{0xffff, 0x8001, 0x8002}
	fab := ibtest.NewFabric()
	a, b := newPortNode(t, fab, pkeys), newPortNode(t, fab, pkeys)
	base := a.port.Registered()
	var as, bs []*fakeHost
	for _, p := range pkeys {
		as, bs = append(as, a.add(t, p, 1)), append(bs, b.add(t, p, 2))
	}
	if l := as[0].slots.lay; l != primaryLayout || as[0].slots.own != nil {
		t.Errorf("the first interface on the port has rings %+v (own slab %v), want %+v in the port's", l, as[0].slots.own != nil, primaryLayout)
	}
	for _, h := range as[1:] {
		if l := h.slots.lay; l != childLayout || h.slots.own == nil {
			t.Errorf("%s has rings %+v (own slab %v), want %+v of its own", h.Name(), l, h.slots.own != nil, childLayout)
		}
		if h.pool != a.port {
			t.Errorf("%s is not on the port it was given", h.Name())
		}
	}
	if got, want := a.port.Registered()-base, int64(2*childLayout.size()); got != want {
		t.Errorf("two children registered %d octets, want %d", got, want)
	}
	for k := range pkeys {
		exchange(t, as[k], bs[k], 1000, byte(10*k)) // UD, resolving
	}
	for k := range pkeys {
		waitFor(t, fmt.Sprintf("%s's connection up", as[k].Name()), func() bool {
			n, _ := as[k].neighbor(bs[k].ip4)
			return n.Via == "RC"
		})
	}
	for k := range pkeys {
		exchange(t, as[k], bs[k], 60000, byte(10*k+5)) // RC, into the port's SRQ
	}
	for k := range pkeys {
		if got := as[k].count(rxPackets); got < 2 {
			t.Errorf("%s received %d packets, want its own 2", as[k].Name(), got)
		}
		as[k].quiet(t) // nothing of another partition's
	}
	as[1].Close()
	if got, want := a.port.Registered()-base, int64(childLayout.size()); got != want {
		t.Errorf("after a child closed %d octets are registered beyond the port's, want %d", got, want)
	}
	exchange(t, as[2], bs[2], 60000, 50)
	exchange(t, as[0], bs[0], 60000, 60)
}

// TestPortDispatchDoesNotAllocate: looking up a QP's owner is two atomic
// loads, without allocating.
func TestPortDispatchDoesNotAllocate(t *testing.T) {
	var tab qpTable
	i := &Interface{}
	tab.set(0xabcdef, i)
	if got := allocsPer(10, 1000, func() {
		if tab.get(0xabcdef) != i || tab.get(0x123) != nil {
			t.Fatal("wrong owner")
		}
	}); got != 0 {
		t.Fatalf("%v allocations a lookup", got)
	}
	tab.clear(0xabcdef, &Interface{}) // not the owner: stays
	if tab.get(0xabcdef) != i {
		t.Fatal("a QPN cleared by an interface that did not own it")
	}
	tab.clear(0xabcdef, i)
	if tab.get(0xabcdef) != nil {
		t.Fatal("a QPN still owned after its owner cleared it")
	}
}
