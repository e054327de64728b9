package ipoib

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibtest"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/netdev/netdevtest"
)

// lidHosts are n hosts on a LID-routed ibtest fabric (host k at LID
// 0x10+k), served by f, which knows their paths, and configured by mods
// if any; it returns the fabric too, for a third party to send from.
func lidHosts(t *testing.T, f *fakeSA, n int, mods ...func(k int, c *Config)) ([]*fakeHost, *ibtest.Fabric) {
	t.Helper()
	fab := ibtest.NewFabric()
	hosts := make([]*fakeHost, n)
	for k := range n {
		dev, err := fab.Open(ibtest.Config{LID: uint16(0x10 + k)})
		if err != nil {
			t.Fatal(err)
		}
		h := &fakeHost{ibdev: dev, nd: netdevtest.New(),
			ip4: netip.AddrFrom4([4]byte{10, 9, 0, byte(k + 1)}),
			ip6: netip.MustParseAddr(fmt.Sprintf("fd00:9::%d", k+1))}
		f.mu.Lock()
		f.paths[dev.Port().GID] = uint16(0x10 + k)
		f.mu.Unlock()
		cfg := Config{Name: "ib0", Device: dev, Queues: 1, Subnet: f,
			Addrs: []netip.Prefix{netip.PrefixFrom(h.ip4, 24), netip.PrefixFrom(h.ip6, 64)},
			Log:   slog.New(slog.NewTextHandler(io.Discard, nil))}
		for _, m := range mods {
			m(k, &cfg)
		}
		if h.Interface, err = newOnFake(h.nd, cfg); err != nil {
			_ = dev.Close()
			t.Fatal(err)
		}
		h.Start()
		t.Cleanup(func() { h.Close(); _ = dev.Close() })
		hosts[k] = h
	}
	return hosts, fab
}

// rawPort is a third port on the fabric that sends hand-made datagrams.
type rawPort struct {
	dev *ibtest.Device
	mr  ib.MR
	qp  ib.QP
	cq  ib.CQ
}

func newRawPort(t *testing.T, fab *ibtest.Fabric, lid uint16, qkey ib.QKey) *rawPort {
	t.Helper()
	dev, err := fab.Open(ibtest.Config{LID: lid})
	if err != nil {
		t.Fatal(err)
	}
	s, err := ib.NewSlab(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close(); _ = s.Close() })
	mr, _ := dev.RegisterMemory(s)
	cq, _ := dev.CreateCQ(16)
	qp, err := dev.CreateQP(ib.QPAttr{Type: ib.UD, SendCQ: cq, RecvCQ: cq, MaxSend: 16, MaxRecv: 16})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []ib.QPModify{{State: ib.StateInit, PKey: ib.DefaultPKey, QKey: qkey}, {State: ib.StateRTR}, {State: ib.StateRTS}} {
		if err := qp.Modify(m); err != nil {
			t.Fatal(err)
		}
	}
	return &rawPort{dev: dev, mr: mr, qp: qp, cq: cq}
}

// link is the port's own link address.
func (r *rawPort) link() ib.LinkAddr { return ib.LinkAddr{QPN: r.qp.Num(), GID: r.dev.Port().GID} }

// solicit sends an ARP request (IPv4 target) or a neighbor solicitation
// (IPv6) for target, claiming sender is at claimed, to h by its LID, with
// a GRH or not.
func (r *rawPort) solicit(t *testing.T, h *fakeHost, claimed ib.LinkAddr, sender, target netip.Addr, grh bool, qkey ib.QKey) {
	t.Helper()
	r.sendNeigh(t, h, neigh.ARPRequest, claimed, sender, target, grh, qkey)
}

// sendNeigh sends ARP operation op (IPv4 target) or a neighbor
// solicitation (IPv6) from sender, claiming claimed, to h by its LID.
func (r *rawPort) sendNeigh(t *testing.T, h *fakeHost, op uint16, claimed ib.LinkAddr, sender, target netip.Addr, grh bool, qkey ib.QKey) {
	t.Helper()
	buf := r.mr.Slab().Bytes()
	n := neigh.ARPLen
	if target.Is4() {
		a := neigh.ARP{Op: op, SenderHW: claimed, SenderIP: sender, TargetIP: target}
		if op == neigh.ARPReply {
			a.TargetHW = h.port.local
		}
		if err := a.Encode(buf[encap.HeaderLen:]); err != nil {
			t.Fatal(err)
		}
		_ = encap.PutHeader(buf, encap.EtherTypeARP)
	} else {
		m := neigh.NeighborMessage{Type: neigh.TypeNeighborSolicitation, Target: target, LinkAddr: claimed, HasLinkAddr: true}
		var err error
		if n, err = m.EncodeIPv6(buf[encap.HeaderLen:], sender, neigh.SolicitedNode(target)); err != nil {
			t.Fatal(err)
		}
		_ = encap.PutHeader(buf, encap.EtherTypeIPv6)
	}
	ah, err := r.dev.CreateAH(ib.AHAttr{DestGID: h.port.local.GID, Path: ib.Path{DLID: h.ibdev.Port().LID, GRH: grh, HopLimit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	wr := ib.SendWR{ID: 1, SGE: ib.SGE{MR: r.mr, Offset: 0, Length: encap.HeaderLen + n}, AH: ah, RemoteQPN: h.port.local.QPN, RemoteQKey: qkey}
	if _, err := r.qp.PostSend([]ib.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
}

// TestVouchedByLID: on an InfiniBand subnet an ARP request's or neighbor
// solicitation's claimed link
// address is believed only when the SA's path for the claimed GID leads to
// the LID the datagram came from (and, with a GRH, the path for its source
// GID too). What fails is neither learned nor answered and is counted by
// cause; a claim whose path is not known yet is checked once it comes.
func TestVouchedByLID(t *testing.T) {
	for _, tc := range []vouchCase{
		{"its own address, no GRH", func(m *rawPort, _ *fakeHost) ib.LinkAddr { return m.link() }, false, 0x30, learnCandidates, true},
		{"its own address with a GRH", func(m *rawPort, _ *fakeHost) ib.LinkAddr { return m.link() }, true, 0x30, learnCandidates, true},
		{"another host's address, no GRH", func(_ *rawPort, b *fakeHost) ib.LinkAddr { return b.port.local }, false, 0x30, learnLIDMismatch, false},
		{"its own address, the SA puts its GID elsewhere", func(m *rawPort, _ *fakeHost) ib.LinkAddr { return m.link() }, true, 0x31, learnGRHMismatch, false},
		{"its own address, no GRH, the SA puts its GID elsewhere", func(m *rawPort, _ *fakeHost) ib.LinkAddr { return m.link() }, false, 0x31, learnLIDMismatch, false},
		{"a GID the SA has no path for", func(m *rawPort, _ *fakeHost) ib.LinkAddr { return m.link() }, false, 0, learnNoPath, false},
	} {
		for _, v6 := range []bool{false, true} {
			name, sender := "ARP: "+tc.name, netip.MustParseAddr("10.9.0.50")
			if v6 {
				name, sender = "NS: "+tc.name, netip.MustParseAddr("fd00:9::50")
			}
			t.Run(name, func(t *testing.T) { tc.run(t, sender) })
		}
	}
}

// vouchCase is a claim from a third port at LID 0x30, sent to host a.
type vouchCase struct {
	name    string
	claim   func(m *rawPort, b *fakeHost) ib.LinkAddr
	grh     bool
	mPath   uint16 // the LID the SA gives for m's GID (0: none)
	cause   counter
	learned bool
}

func (tc vouchCase) run(t *testing.T, sender netip.Addr) {
	const qkey = 0x0b1b
	f := newFakeSA(qkey)
	h, fab := lidHosts(t, f, 2)
	a, b := h[0], h[1]
	m := newRawPort(t, fab, 0x30, qkey)
	if tc.mPath != 0 {
		f.mu.Lock()
		f.paths[m.dev.Port().GID] = tc.mPath
		f.mu.Unlock()
	}
	before := a.count(tc.cause)
	target := a.ip4
	if sender.Is6() {
		target = a.ip6
	}
	m.solicit(t, a, tc.claim(m, b), sender, target, tc.grh, qkey)
	waitFor(t, "the solicitation is judged", func() bool { return a.count(tc.cause) > before })
	n, ok := a.neighbor(sender)
	if ok != tc.learned || (ok && (n.State != "CANDIDATE" || n.LinkAddr != m.link().String())) {
		t.Errorf("a's neighbor %v: %+v (present %v), want learned %v at %v", sender, n, ok, tc.learned, m.link())
	}
	for _, c := range []counter{learnLIDMismatch, learnGRHMismatch, learnNoPath, learnLinkMismatch} {
		if c != tc.cause && a.count(c) != 0 {
			t.Errorf("%s = %d, want 0", counterNames[c], a.count(c))
		}
	}
	// An answer goes to the claim only when it was believed (m posted
	// no receive: its device counts what arrives).
	answered := func() bool { return m.dev.Counter("rx_drop_no_recv_buffer") > 0 }
	if tc.learned {
		waitFor(t, "a answers m", answered)
	} else {
		a.ibdev.Settle()
		m.dev.Settle()
		if answered() {
			t.Error("a answered a claim it did not believe")
		}
	}
}

// TestVouchedReplies: an ARP reply resolves a neighbor we asked for only
// when its claim is the sender's own: one that names another host's link
// address from a GRH-less source is counted and leaves the neighbor
// unresolved; the sender's own answer then resolves it.
func TestVouchedReplies(t *testing.T) {
	const qkey = 0x0b1b
	f := newFakeSA(qkey)
	h, fab := lidHosts(t, f, 2)
	a, b := h[0], h[1]
	m := newRawPort(t, fab, 0x30, qkey)
	f.mu.Lock()
	f.paths[m.dev.Port().GID] = 0x30
	f.mu.Unlock()
	ghost := netip.MustParseAddr("10.9.0.60")
	a.send(packetTo(a.ip4, ghost, 300, 1))
	waitFor(t, "a asks for the address", func() bool { _, ok := a.neighbor(ghost); return ok })

	m.sendNeigh(t, a, neigh.ARPReply, b.port.local, ghost, a.ip4, false, qkey)
	waitFor(t, "the false reply is judged", func() bool { return a.count(learnLIDMismatch) == 1 })
	if n, _ := a.neighbor(ghost); n.LinkAddr != "" {
		t.Fatalf("a's neighbor %v after a reply claiming b's address: %+v", ghost, n)
	}
	m.sendNeigh(t, a, neigh.ARPReply, m.link(), ghost, a.ip4, false, qkey)
	waitFor(t, "the sender's own reply resolves the neighbor", func() bool {
		n, _ := a.neighbor(ghost)
		return n.LinkAddr == m.link().String()
	})
}
