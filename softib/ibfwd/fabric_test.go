package ibfwd

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/softib"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// node is one softib port on the InfiniBand link layer, with memory and
// CQs.
type node struct {
	dev  *softib.Device
	lid  uint16
	guid uint64
	mr   ib.MR
	scq  ib.CQ
	rcq  ib.CQ
}

const (
	slotSize = 65536 + ib.GRHLen
	numSlots = 64
)

func (n *node) slot(i, size int) ib.SGE {
	return ib.SGE{MR: n.mr, Offset: (i % numSlots) * slotSize, Length: size}
}

func (n *node) bytes(s ib.SGE) []byte { b, _ := s.Bytes(); return b }

// subnet is a forwarder with its static tables and the ports on it.
type subnet struct {
	fwd    *Forwarder
	routes *Static
	nodes  []*node
}

// newSubnet brings up n ports on 127.88.<net>.1.. (LIDs 0x11, 0x12, ...,
// full members of the default partition and of those in pkeys[i]), all in
// the forwarder's unicast table.
func newSubnet(t *testing.T, net8 int, n int, pkeys ...[]ib.PKey) *subnet {
	t.Helper()
	s := &subnet{routes: NewStatic()}
	// The forwarder gets a copy of the tables after each change: Routes
	// handed to it are not to be changed.
	fwd, err := New(netip.MustParseAddrPort(fmt.Sprintf("127.88.%d.254:0", net8)), NewStatic())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fwd.Close() })
	s.fwd = fwd
	for i := range n {
		pk := []ib.PKey{ib.DefaultPKey}
		if i < len(pkeys) {
			pk = append(pk, pkeys[i]...)
		}
		s.add(t, net8, i+1, uint16(0x11+i), 0, pk)
	}
	return s
}

// add opens port host (127.88.<net8>.<host>) with LID lid and LMC lmc,
// routes its LIDs to it and registers it.
func (s *subnet) add(t *testing.T, net8, host int, lid uint16, lmc uint8, pk []ib.PKey) *node {
	t.Helper()
	n := s.addPort(t, net8, host, softib.IBConfig{LID: lid, LMC: lmc, SMLID: 0x11, GUID: 0x0002c90300000000 + uint64(host), Forwarder: s.fwd.Addr()}, pk)
	if err := s.routes.AddPort(n.guid, lid, lmc); err != nil {
		t.Fatal(err)
	}
	s.fwd.SetRoutes(s.routes.Clone())
	return n
}

// addPort opens port host with cfg and registers it, leaving the routes
// alone.
func (s *subnet) addPort(t *testing.T, net8, host int, cfg softib.IBConfig, pk []ib.PKey) *node {
	t.Helper()
	addr := netip.MustParseAddr(fmt.Sprintf("127.88.%d.%d", net8, host))
	dev, err := softib.Open(softib.Config{
		Name: fmt.Sprintf("softib%d", host), Addr: addr, Port: testutil.Port(14791), PKeys: pk,
		LinkLayer: softib.LinkInfiniBand, IB: cfg,
	})
	if err != nil {
		t.Fatal(err)
	}
	slab, err := ib.NewSlab(slotSize * numSlots)
	if err != nil {
		t.Fatal(err)
	}
	mr, _ := dev.RegisterMemory(slab)
	scq, _ := dev.CreateCQ(4096)
	rcq, _ := dev.CreateCQ(4096)
	t.Cleanup(func() {
		dev.Close()
		slab.Close()
	})
	nd := &node{dev: dev, lid: cfg.LID, guid: dev.Port().GUID, mr: mr, scq: scq, rcq: rcq}
	if err := s.fwd.Register(Port{GUID: nd.guid, LID: cfg.LID, LMC: cfg.LMC, Addr: netip.AddrPortFrom(addr, testutil.Port(14791))}); err != nil {
		t.Fatal(err)
	}
	s.nodes = append(s.nodes, nd)
	return nd
}

// poll waits for n completions on c.
func poll(t *testing.T, c ib.CQ, n int) []ib.Completion {
	t.Helper()
	out := make([]ib.Completion, 0, n)
	buf := make([]ib.Completion, 64)
	deadline := time.After(5 * time.Second)
	for len(out) < n {
		k := c.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k > 0 {
			continue
		}
		select {
		case <-c.Ready():
		case <-deadline:
			t.Fatalf("got %d of %d completions", len(out), n)
		}
	}
	return out
}

// quiet asserts that c gets no completion within d.
func quiet(t *testing.T, c ib.CQ, d time.Duration, what string) {
	t.Helper()
	buf := make([]ib.Completion, 8)
	deadline := time.After(d)
	for {
		if k := c.Poll(buf); k > 0 {
			t.Fatalf("%s: got %+v", what, buf[:k])
		}
		select {
		case <-c.Ready():
		case <-deadline:
			return
		}
	}
}

func udQP(t *testing.T, n *node, pkey ib.PKey, qkey ib.QKey) ib.QP {
	t.Helper()
	q, err := n.dev.CreateQP(ib.QPAttr{Type: ib.UD, SendCQ: n.scq, RecvCQ: n.rcq, MaxSend: 64, MaxRecv: 64})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []ib.QPModify{{State: ib.StateInit, PKey: pkey, QKey: qkey}, {State: ib.StateRTR}, {State: ib.StateRTS}} {
		if err := q.Modify(m); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

func postRecvs(t *testing.T, n *node, q ib.QP, first, count int) {
	t.Helper()
	for i := first; i < first+count; i++ {
		if _, err := q.PostRecv([]ib.RecvWR{{ID: uint64(i), SGE: n.slot(i, slotSize)}}); err != nil {
			t.Fatal(err)
		}
	}
}

func sendUD(t *testing.T, from *node, q ib.QP, slot int, size int, attr ib.AHAttr, qpn ib.QPN, qkey ib.QKey) {
	t.Helper()
	ah, err := from.dev.CreateAH(attr)
	if err != nil {
		t.Fatal(err)
	}
	msg := from.slot(slot, size)
	testutil.Fill(from.bytes(msg), slot)
	if _, err := q.PostSend([]ib.SendWR{{ID: uint64(slot), SGE: msg, AH: ah, RemoteQPN: qpn, RemoteQKey: qkey}}); err != nil {
		t.Fatal(err)
	}
	if wc := poll(t, from.scq, 1)[0]; wc.Status != ib.WCSuccess {
		t.Fatalf("send completion %+v", wc)
	}
}

func counter(cs []ib.Counter, name string) uint64 { return softib.CounterValue(cs, name) }

func TestPortAttributes(t *testing.T) {
	s := newSubnet(t, 1, 1)
	p := s.nodes[0].dev.Port()
	want := testutil.MustGID("fe80::2:c903:0:1")
	if p.LinkLayer != "InfiniBand" || p.LID != 0x11 || p.SMLID != 0x11 || p.LMC != 0 || p.GID != want || p.GUID != 0x0002c90300000001 {
		t.Fatalf("port %+v", p)
	}
}

func TestUDUnicastByLID(t *testing.T) {
	s := newSubnet(t, 2, 2)
	a, b := s.nodes[0], s.nodes[1]
	qa, qb := udQP(t, a, ib.DefaultPKey, 0x0b1b), udQP(t, b, ib.DefaultPKey, 0x0b1b)
	postRecvs(t, b, qb, 0, 4)
	for _, tc := range []struct {
		name string
		path ib.Path
	}{
		{"LID only", ib.Path{DLID: b.lid, SL: 3}},
		{"with GRH", ib.Path{DLID: b.lid, SL: 2, GRH: true, HopLimit: 1}},
	} {
		sendUD(t, a, qa, 1, 2044, ib.AHAttr{DestGID: b.dev.Port().GID, Path: tc.path}, qb.Num(), 0x0b1b)
		wc := poll(t, b.rcq, 1)[0]
		if wc.Status != ib.WCSuccess || wc.ByteLen != 2044+ib.GRHLen || wc.SrcQPN != qa.Num() || wc.SrcLID != a.lid || wc.SL != tc.path.SL || wc.GRH != tc.path.GRH {
			t.Fatalf("%s: receive completion %+v", tc.name, wc)
		}
		buf := b.bytes(b.slot(int(wc.ID), int(wc.ByteLen)))
		if !bytes.Equal(buf[ib.GRHLen:], a.bytes(a.slot(1, 2044))) {
			t.Fatalf("%s: payload differs", tc.name)
		}
		switch {
		case tc.path.GRH && (wc.SrcGID != a.dev.Port().GID || !bytes.Equal(buf[24:40], gidBytes(b.dev.Port().GID))):
			t.Fatalf("%s: source GID %v, GRH area % x", tc.name, wc.SrcGID, buf[:ib.GRHLen])
		case !tc.path.GRH && wc.SrcGID != (ib.GID{}):
			t.Fatalf("%s: no GRH but source GID %v", tc.name, wc.SrcGID)
		}
	}
	waitCounter(t, func() uint64 { return counter(s.fwd.Counters(), "tx_frames") }, 2, "forwarder tx_frames")
	waitCounter(t, func() uint64 { return counter(s.fwd.Counters(), "rx_frames") }, 2, "forwarder rx_frames")
}

func TestUDMulticastByMLID(t *testing.T) {
	s := newSubnet(t, 3, 3)
	a, b, c := s.nodes[0], s.nodes[1], s.nodes[2]
	const mlid, unjoined = 0xc001, 0xc002
	mgid := testutil.MustGID("ff12:401b:ffff::1")
	routes := s.routes.Clone()
	if err := routes.AddGroup(mlid, a.guid, b.guid, c.guid); err != nil {
		t.Fatal(err)
	}
	s.fwd.SetRoutes(routes)
	qa, qb, qc := udQP(t, a, ib.DefaultPKey, 0x0b1b), udQP(t, b, ib.DefaultPKey, 0x0b1b), udQP(t, c, ib.DefaultPKey, 0x0b1b)
	for _, m := range []struct {
		n *node
		q ib.QP
	}{{a, qa}, {b, qb}, {c, qc}} {
		postRecvs(t, m.n, m.q, 0, 4)
		if err := m.n.dev.AttachMulticast(m.q, mgid, mlid); err != nil {
			t.Fatal(err)
		}
	}
	group := ib.AHAttr{DestGID: mgid, Path: ib.Path{DLID: mlid, GRH: true, HopLimit: 1}}
	sendUD(t, a, qa, 5, 300, group, ib.MulticastQPN, 0x0b1b)
	for _, n := range []*node{b, c} {
		wc := poll(t, n.rcq, 1)[0]
		if wc.Status != ib.WCSuccess || wc.SrcLID != a.lid || !wc.GRH || wc.SrcGID != a.dev.Port().GID || wc.ByteLen != 300+ib.GRHLen {
			t.Fatalf("port %#x: completion %+v", n.lid, wc)
		}
	}
	quiet(t, a.rcq, 100*time.Millisecond, "the sender got its own multicast back from the switch")

	// An MLID without a forwarding entry (no SA join): the switch drops it.
	sendUD(t, a, qa, 6, 300, ib.AHAttr{DestGID: mgid, Path: ib.Path{DLID: unjoined, GRH: true}}, ib.MulticastQPN, 0x0b1b)
	// An MLID the switch forwards to a port whose QP left the group: the
	// port drops it.
	if err := c.dev.DetachMulticast(qc, mgid); err != nil {
		t.Fatal(err)
	}
	sendUD(t, a, qa, 7, 300, group, ib.MulticastQPN, 0x0b1b)
	if wc := poll(t, b.rcq, 1)[0]; wc.Status != ib.WCSuccess {
		t.Fatalf("member after the detach: %+v", wc)
	}
	waitCounter(t, func() uint64 { return counter(c.dev.Counters(), "rx_drop_not_member") }, 1, "port C rx_drop_not_member")
	waitCounter(t, func() uint64 { return counter(s.fwd.Counters(), "drop_no_mft_entry") }, 1, "forwarder drop_no_mft_entry")
	quiet(t, c.rcq, 50*time.Millisecond, "detached QP")
}

// waitCounter waits until get returns want; a counter that never gets
// there fails the test, one that goes past it too.
func waitCounter(t *testing.T, get func() uint64, want uint64, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := get()
		if v == want {
			return
		}
		if v > want || time.Now().After(deadline) {
			t.Fatalf("%s = %d, want %d", what, v, want)
		}
		time.Sleep(time.Millisecond) // polling a counter: there is no event to wait on
	}
}

// connect makes a connected pair of QPs of type typ between a and b
// addressed by LID, with paths on sl.
func connect(t *testing.T, typ ib.QPType, a, b *node, sl uint8) (ib.QP, ib.QP) {
	t.Helper()
	mk := func(n *node) ib.QP {
		q, err := n.dev.CreateQP(ib.QPAttr{Type: typ, SendCQ: n.scq, RecvCQ: n.rcq, MaxSend: 256, MaxRecv: 256})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Modify(ib.QPModify{State: ib.StateInit, PKey: ib.DefaultPKey}); err != nil {
			t.Fatal(err)
		}
		return q
	}
	qa, qb := mk(a), mk(b)
	up := func(q ib.QP, peer *node, pq ib.QP, rpsn, spsn uint32) {
		m := ib.QPModify{State: ib.StateRTR, DestGID: peer.dev.Port().GID, DestQPN: pq.Num(), PathMTU: ib.MTU4096, RecvPSN: rpsn, MinRNRTmr: 1,
			Path: ib.Path{DLID: peer.lid, SL: sl}}
		if err := q.Modify(m); err != nil {
			t.Fatal(err)
		}
		if err := q.Modify(ib.QPModify{State: ib.StateRTS, SendPSN: spsn, Timeout: 14, RetryCount: 7, RNRRetry: 7}); err != nil {
			t.Fatal(err)
		}
	}
	up(qa, b, qb, 0x100, 0xfffff0)
	up(qb, a, qa, 0xfffff0, 0x100)
	return qa, qb
}

func TestConnected64KiB(t *testing.T) {
	for _, typ := range []ib.QPType{ib.RC, ib.UC} {
		t.Run(typ.String(), func(t *testing.T) {
			s := newSubnet(t, 4+int(typ), 2)
			a, b := s.nodes[0], s.nodes[1]
			qa, qb := connect(t, typ, a, b, 0)
			const size, count = 65536, 16
			postRecvs(t, b, qb, 0, count)
			var wrs []ib.SendWR
			for i := range count {
				msg := a.slot(i, size)
				testutil.Fill(a.bytes(msg), i)
				wrs = append(wrs, ib.SendWR{ID: uint64(i), SGE: msg})
			}
			if n, err := qa.PostSend(wrs); err != nil || n != count {
				t.Fatalf("posted %d: %v", n, err)
			}
			for _, wc := range poll(t, a.scq, count) {
				if wc.Status != ib.WCSuccess {
					t.Fatalf("send %+v", wc)
				}
			}
			for _, wc := range poll(t, b.rcq, count) {
				if wc.Status != ib.WCSuccess || wc.ByteLen != size {
					t.Fatalf("receive %+v", wc)
				}
				if !bytes.Equal(b.bytes(b.slot(int(wc.ID), size)), a.bytes(a.slot(int(wc.ID), size))) {
					t.Fatalf("message %d differs", wc.ID)
				}
			}
		})
	}
}

// TestSLToVL15 is the QoS case of the issue: the SL-to-VL map sends SL 0
// to VL15; packets on SL 0 are dropped by the switch while the path's SL
// works.
func TestSLToVL15(t *testing.T) {
	s := newSubnet(t, 7, 2)
	a, b := s.nodes[0], s.nodes[1]
	routes := s.routes.Clone()
	routes.SL2VL[0], routes.SL2VL[1] = 15, 1
	s.fwd.SetRoutes(routes)
	qa, qb := udQP(t, a, ib.DefaultPKey, 0x0b1b), udQP(t, b, ib.DefaultPKey, 0x0b1b)
	postRecvs(t, b, qb, 0, 4)
	sendUD(t, a, qa, 1, 100, ib.AHAttr{Path: ib.Path{DLID: b.lid, SL: 0}}, qb.Num(), 0x0b1b)
	sendUD(t, a, qa, 2, 100, ib.AHAttr{Path: ib.Path{DLID: b.lid, SL: 1}}, qb.Num(), 0x0b1b)
	if wc := poll(t, b.rcq, 1)[0]; wc.SL != 1 || !bytes.Equal(b.bytes(b.slot(int(wc.ID), int(wc.ByteLen)))[ib.GRHLen:], a.bytes(a.slot(2, 100))) {
		t.Fatalf("completion %+v: not the SL 1 datagram", wc)
	}
	if v := counter(s.fwd.Counters(), "drop_vl15"); v != 1 {
		t.Fatalf("drop_vl15 = %d, want 1", v)
	}
	quiet(t, b.rcq, 50*time.Millisecond, "SL 0 datagram")

	// RC on the path's SL works through the same map.
	qa2, qb2 := connect(t, ib.RC, a, b, 1)
	postRecvs(t, b, qb2, 10, 1)
	msg := a.slot(20, 9000)
	testutil.Fill(a.bytes(msg), 20)
	if _, err := qa2.PostSend([]ib.SendWR{{ID: 20, SGE: msg}}); err != nil {
		t.Fatal(err)
	}
	if wc := poll(t, b.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.ByteLen != 9000 {
		t.Fatalf("RC on SL 1: %+v", wc)
	}
	if v := counter(s.fwd.Counters(), "drop_vl15"); v != 1 {
		t.Fatalf("drop_vl15 = %d after RC on SL 1, want 1", v)
	}
}

// TestMADsLIDRouted: QP1 MADs go to a LID without a GRH and arrive with
// the sender's LID and SL, no GID, as ib_umad reports them.
func TestMADsLIDRouted(t *testing.T) {
	s := newSubnet(t, 8, 2)
	a, b := s.nodes[0], s.nodes[1]
	ma, err := a.dev.MADs()
	if err != nil {
		t.Fatal(err)
	}
	defer ma.Close()
	mb, err := b.dev.MADs()
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	mad := make([]byte, 256)
	testutil.Fill(mad, 9)
	if err := ma.Send(ib.MADAddr{Path: ib.Path{DLID: b.lid, SL: 4}, QPN: ib.QP1}, mad); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-mb.Recv():
		want := ib.MADAddr{QPN: ib.QP1, PKey: ib.DefaultPKey, Path: ib.Path{DLID: a.lid, SL: 4}}
		if m.From != want || !bytes.Equal(m.Data[:], mad) {
			t.Fatalf("MAD from %+v, want %+v", m.From, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no MAD")
	}
	// The answer goes back to the LID it came from.
	if err := mb.Send(ib.MADAddr{Path: ib.Path{DLID: a.lid}, QPN: ib.QP1}, mad); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ma.Recv():
		if m.From.Path.DLID != b.lid || m.From.GID != (ib.GID{}) {
			t.Fatalf("answer from %+v", m.From)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer")
	}
	// A MAD addressed by GID alone goes to LID 0: the fabric drops it.
	if err := ma.Send(ib.MADAddr{GID: b.dev.Port().GID, QPN: ib.QP1}, mad); err != nil {
		t.Fatal(err)
	}
	waitCounter(t, func() uint64 { return counter(s.fwd.Counters(), "drop_dlid_zero") }, 1, "drop_dlid_zero")
}

// TestDropCauses: every cause a switch or a port drops for is counted
// once per frame, and nothing is delivered. Frames the sending port would
// never make (bad CRCs, DLID 0 past a switch) are written by the test from
// a socket registered as a port, or from the forwarder's own socket.
func TestDropCauses(t *testing.T) {
	s := newSubnet(t, 9, 2, []ib.PKey{0x8003})
	a, b := s.nodes[0], s.nodes[1]
	routes := s.routes.Clone()
	routes.LFT[0x55] = b.guid // a LID that routes to B, which does not have it
	routes.LFT[0x56] = 0x1234 // a port that never registered
	s.fwd.SetRoutes(routes)
	qa, qb := udQP(t, a, ib.DefaultPKey, 0x0b1b), udQP(t, b, ib.DefaultPKey, 0x0b1b)
	qa3 := udQP(t, a, 0x8003, 0x0b1b) // a partition B does not hold
	postRecvs(t, b, qb, 0, 8)

	// From a port's QPs, through the switch.
	sendUD(t, a, qa, 1, 64, ib.AHAttr{Path: ib.Path{DLID: 0}}, qb.Num(), 0x0b1b)
	sendUD(t, a, qa, 1, 64, ib.AHAttr{Path: ib.Path{DLID: 0x77}}, qb.Num(), 0x0b1b)
	sendUD(t, a, qa, 1, 64, ib.AHAttr{Path: ib.Path{DLID: 0x55}}, qb.Num(), 0x0b1b)
	sendUD(t, a, qa, 1, 64, ib.AHAttr{Path: ib.Path{DLID: 0x56}}, qb.Num(), 0x0b1b)
	sendUD(t, a, qa, 1, 64, ib.AHAttr{Path: ib.Path{DLID: 0xc005, GRH: true}}, ib.MulticastQPN, 0x0b1b)
	sendUD(t, a, qa3, 1, 64, ib.AHAttr{Path: ib.Path{DLID: b.lid}}, qb.Num(), 0x0b1b)

	// Crafted frames. good is a valid frame from A to B's QP.
	good := func() []byte {
		f := wire.IBFrame{LRH: wire.LRH{DLID: b.lid, SLID: a.lid}, Packet: wire.Packet{
			BTH:  wire.BTH{Opcode: wire.OpUDSendOnly, PKey: ib.DefaultPKey, DestQP: qb.Num()},
			DETH: wire.DETH{QKey: 0x0b1b, SrcQP: qa.Num()}, Payload: make([]byte, 32)}}
		out, err := wire.AppendIBFrame(nil, &f)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	reseal := func(b []byte) []byte { // a new VCRC, as a hop would write
		n := len(b) - wire.VCRCLen
		wire.PutVCRC(b[n:], wire.VCRC(b[:n]))
		return b
	}
	badVCRC := good()
	badVCRC[len(badVCRC)-1] ^= 1
	badICRC := good()
	badICRC[len(badICRC)-wire.VCRCLen-1] ^= 1
	reseal(badICRC)
	raw := reseal(append(good()[:1], append([]byte{good()[1] &^ 3}, good()[2:]...)...)) // LNH raw
	dlid0 := good()
	dlid0[2], dlid0[3] = 0, 0
	wire.SealIBFrame(dlid0, false) // the DLID is under the ICRC of a local packet

	udp := func() *net.UDPConn {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.88.9.100:0")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// A registered port that misbehaves, and a stranger.
	rogue, stranger := udp(), udp()
	if err := s.fwd.Register(Port{GUID: 0x99, LID: 0x99, Addr: rogue.LocalAddr().(*net.UDPAddr).AddrPort()}); err != nil {
		t.Fatal(err)
	}
	fwdAddr := s.fwd.Addr()
	for _, f := range [][]byte{badVCRC, raw[:5], raw[:len(raw)-4]} {
		if _, err := rogue.WriteToUDPAddrPort(f, fwdAddr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stranger.WriteToUDPAddrPort(good(), fwdAddr); err != nil {
		t.Fatal(err)
	}
	// Past the switch: from the forwarder's socket straight to B, and
	// from the stranger to B.
	bAddr := netip.AddrPortFrom(netip.MustParseAddr("127.88.9.2"), testutil.Port(14791))
	for _, f := range [][]byte{badVCRC, badICRC, raw, dlid0} {
		if _, err := s.fwd.conn.WriteToUDPAddrPort(f, bAddr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stranger.WriteToUDPAddrPort(good(), bAddr); err != nil {
		t.Fatal(err)
	}

	for name, want := range map[string]uint64{
		"drop_dlid_zero": 1, "drop_unrouted_lid": 1, "drop_no_port": 1, "drop_no_mft_entry": 1,
		"drop_bad_vcrc": 1, "drop_malformed": 2, "drop_unknown_source": 1, "drop_vl15": 0, "drop_tx_error": 0,
	} {
		waitCounter(t, func() uint64 { return counter(s.fwd.Counters(), name) }, want, "forwarder "+name)
	}
	for name, want := range map[string]uint64{
		"rx_drop_wrong_dlid": 1, "rx_drop_pkey": 1, "rx_drop_bad_vcrc": 1, "rx_drop_bad_icrc": 1,
		"rx_drop_malformed": 1, "rx_drop_dlid_zero": 1, "rx_drop_wrong_source": 1,
		"rx_drop_not_member": 0, "rx_drop_qkey": 0,
	} {
		waitCounter(t, func() uint64 { return counter(b.dev.Counters(), name) }, want, "port B "+name)
	}
	quiet(t, b.rcq, 50*time.Millisecond, "dropped frames")

	// And the good frame from the forwarder's address is taken: the
	// drops above were for their causes, not for being crafted.
	if _, err := s.fwd.conn.WriteToUDPAddrPort(good(), bAddr); err != nil {
		t.Fatal(err)
	}
	if wc := poll(t, b.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.SrcLID != a.lid || wc.SrcQPN != qa.Num() {
		t.Fatalf("crafted good frame: %+v", wc)
	}
}

func gidBytes(g ib.GID) []byte { return g[:] }

// TestDatapathDoesNotAllocate: a UD datagram from a port's QP through the
// forwarder into the other port's CQ, and an RC message with its ACK,
// allocate nothing in steady state, in any goroutine on the way.
func TestDatapathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not counted under the race detector")
	}
	s := newSubnet(t, 10, 2)
	a, b := s.nodes[0], s.nodes[1]
	qa, qb := udQP(t, a, ib.DefaultPKey, 0x0b1b), udQP(t, b, ib.DefaultPKey, 0x0b1b)
	ah, err := a.dev.CreateAH(ib.AHAttr{Path: ib.Path{DLID: b.lid, SL: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ra, rb := connect(t, ib.RC, a, b, 0)
	wc := make([]ib.Completion, 4)
	wait := func(c ib.CQ) {
		for c.Poll(wc[:1]) == 0 {
			<-c.Ready()
		}
		if wc[0].Status != ib.WCSuccess {
			t.Fatalf("completion %+v", wc[0])
		}
	}
	ud := []ib.SendWR{{ID: 1, SGE: a.slot(1, 1000), AH: ah, RemoteQPN: qb.Num(), RemoteQKey: 0x0b1b}}
	udRecv := []ib.RecvWR{{ID: 2, SGE: b.slot(2, 4096+ib.GRHLen)}}
	rc := []ib.SendWR{{ID: 3, SGE: a.slot(3, 9000)}}
	rcRecv := []ib.RecvWR{{ID: 4, SGE: b.slot(4, 9000)}}
	round := func() {
		if _, err := qb.PostRecv(udRecv); err != nil {
			t.Fatal(err)
		}
		if _, err := qa.PostSend(ud); err != nil {
			t.Fatal(err)
		}
		wait(a.scq)
		wait(b.rcq)
		if _, err := rb.PostRecv(rcRecv); err != nil {
			t.Fatal(err)
		}
		if _, err := ra.PostSend(rc); err != nil {
			t.Fatal(err)
		}
		wait(b.rcq)
		wait(a.scq)
	}
	for range 10 {
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%v allocations per round", n)
	}
}

// TestLMC: a port with LMC 2 answers to its four LIDs and sends from the
// one its path bits choose; a LID past its range is not its.
func TestLMC(t *testing.T) {
	s := newSubnet(t, 11, 1)
	a := s.nodes[0]
	b := s.add(t, 11, 2, 0x20, 2, []ib.PKey{ib.DefaultPKey})
	routes := s.routes.Clone()
	routes.LFT[0x24] = b.guid // next port's LID, wrongly routed to B
	s.fwd.SetRoutes(routes)
	qa, qb := udQP(t, a, ib.DefaultPKey, 0x0b1b), udQP(t, b, ib.DefaultPKey, 0x0b1b)
	postRecvs(t, b, qb, 0, 8)
	postRecvs(t, a, qa, 8, 8)
	for _, dlid := range []uint16{0x20, 0x21, 0x23} {
		sendUD(t, a, qa, 1, 64, ib.AHAttr{Path: ib.Path{DLID: dlid}}, qb.Num(), 0x0b1b)
		if wc := poll(t, b.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.SrcLID != a.lid {
			t.Fatalf("to LID %#x: %+v", dlid, wc)
		}
	}
	sendUD(t, a, qa, 1, 64, ib.AHAttr{Path: ib.Path{DLID: 0x24}}, qb.Num(), 0x0b1b)
	waitCounter(t, func() uint64 { return counter(b.dev.Counters(), "rx_drop_wrong_dlid") }, 1, "rx_drop_wrong_dlid")
	for _, bits := range []uint8{0, 2, 3, 7} { // 7: only the LMC's two bits count
		sendUD(t, b, qb, 2, 64, ib.AHAttr{Path: ib.Path{DLID: a.lid, SrcPathBits: bits}}, qa.Num(), 0x0b1b)
		if wc := poll(t, a.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.SrcLID != 0x20|uint16(bits&3) {
			t.Fatalf("path bits %d: %+v", bits, wc)
		}
	}
	if _, err := softib.Open(softib.Config{Addr: netip.MustParseAddr("127.88.11.3"), Port: testutil.Port(14791), LinkLayer: softib.LinkInfiniBand,
		IB: softib.IBConfig{LID: 0x21, LMC: 1, Forwarder: s.fwd.Addr()}}); err == nil {
		t.Fatal("a LID not aligned to its LMC was taken")
	}
}

// TestConnectedTakesOnlyItsPeersLID: an RC QP takes a packet only from
// the LID its path leads to, whatever the rest of the packet says.
func TestConnectedTakesOnlyItsPeersLID(t *testing.T) {
	s := newSubnet(t, 12, 2)
	a, b := s.nodes[0], s.nodes[1]
	_, qb := connect(t, ib.RC, a, b, 0)
	postRecvs(t, b, qb, 0, 2)
	send := func(slid uint16) {
		f := wire.IBFrame{LRH: wire.LRH{DLID: b.lid, SLID: slid}, Packet: wire.Packet{
			BTH: wire.BTH{Opcode: wire.OpRCSendOnly, PKey: ib.DefaultPKey, DestQP: qb.Num(), PSN: 0xfffff0}, Payload: make([]byte, 64)}}
		raw, err := wire.AppendIBFrame(nil, &f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.fwd.conn.WriteToUDPAddrPort(raw, netip.AddrPortFrom(netip.MustParseAddr("127.88.12.2"), testutil.Port(14791))); err != nil {
			t.Fatal(err)
		}
	}
	send(0x99)
	waitCounter(t, func() uint64 { return counter(b.dev.Counters(), "rx_drop_wrong_source") }, 1, "rx_drop_wrong_source")
	quiet(t, b.rcq, 50*time.Millisecond, "packet from another LID")
	send(a.lid)
	if wc := poll(t, b.rcq, 1)[0]; wc.Status != ib.WCSuccess || wc.ByteLen != 64 {
		t.Fatalf("packet from the peer's LID: %+v", wc)
	}
}
