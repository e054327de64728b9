package ipoib

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/offload"
	"github.com/ipoibd/ipoibd/softib"
	"github.com/ipoibd/ipoibd/tun"
)

// The per-packet path measured without the kernel's TCP in the way: a
// packet already in a TUN slot is transmitted (route, neighbor, post on the
// RC QP), and the peer's receive loop writes it into its TUN. The packets
// go to an address no host owns, so the receiving kernel drops them
// quietly (no forwarding); the daemons' own paths are what is measured.

// pair is two interfaces over softib in two namespaces (newPair), or over
// ibtest with fake netdevs (newFakePair), a connected to b for the
// address sink.
type pair struct {
	a, b  *Interface
	sink  netip.Addr
	r     *txReader // a's first queue's slots, taken as its reader takes them
	net   *testnet.Net
	fa    *fakeHost // newFakePair's: a with its netdev
	fb    *fakeHost
	pings int         // fake pings so far
	logA  *syncBuffer // a's log
}

// syncBuffer is a log destination tests read while the daemon writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newOnTUN makes an interface on a real TUN in the calling thread's
// namespace, as the daemon does.
func newOnTUN(cfg Config) (*Interface, error) {
	nc, err := cfg.NetdevConfig()
	if err != nil {
		return nil, err
	}
	if cfg.Netdev, err = tun.OpenNetdev(nc, ""); err != nil {
		return nil, err
	}
	return New(cfg)
}

func newPair(tb testing.TB) *pair {
	tb.Helper()
	return newPairMode(tb, Connected)
}

// newPairMode is newPair in mode: in datagram mode a's sink is at b's link
// address over UD.
func newPairMode(tb testing.TB, mode Mode) *pair {
	tb.Helper()
	n := testnet.New(tb, testnet.Config{Hosts: 2})
	var ifs [2]*Interface
	logA := &syncBuffer{}
	for k := range 2 {
		var w io.Writer = io.Discard
		if k == 0 {
			w = logA
		}
		n.In(k, func() {
			dev, err := softib.Open(softib.Config{Addr: n.Hosts[k].Addr})
			if err != nil {
				tb.Fatal(err)
			}
			cfg := Config{Name: "ib0", Device: dev, Mode: mode, Log: slog.New(slog.NewTextHandler(w, nil)), Addrs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("192.168.9.%d/24", k+1)), netip.MustParsePrefix(fmt.Sprintf("fd00:9::%d/64", k+1))}}
			i, err := newOnTUN(cfg)
			if err != nil {
				tb.Fatal(err)
			}
			i.Start()
			tb.Cleanup(func() { i.Close(); _ = dev.Close() })
			ifs[k] = i
		})
	}
	p := &pair{a: ifs[0], b: ifs[1], net: n, logA: logA}
	if mode == Datagram {
		return resolveSink(tb, p)
	}
	return connectSink(tb, p)
}

// connectSink points p's sink at b's link address, connects a to it and
// waits for the RC path.
func connectSink(tb testing.TB, p *pair) *pair {
	tb.Helper()
	return aimSink(tb, p, "an RC connection", func(e *neigh.Entry) bool {
		p.a.ctl.connect(e)
		path := e.Path()
		return path != nil && path.QP != nil
	})
}

// resolveSink points p's sink at b's link address and waits until a
// reaches it over UD (datagram mode: no connection).
func resolveSink(tb testing.TB, p *pair) *pair {
	tb.Helper()
	return aimSink(tb, p, "a UD path", func(e *neigh.Entry) bool {
		path := e.Path()
		return path != nil && path.AH != nil
	})
}

// aimSink makes a's entry for p's sink "at" b's link address and waits
// until ready (run on a's control goroutine) says the entry has the path
// wanted.
func aimSink(tb testing.TB, p *pair, what string, ready func(*neigh.Entry) bool) *pair {
	tb.Helper()
	p.sink = netip.MustParseAddr("192.168.9.77")
	p.r = &txReader{slots: &p.a.slots.tx[0]}
	p.a.do(func() {
		e, _ := p.a.neigh.Create(p.sink, p.a.ctl.now)
		p.a.ctl.apply(e, e.Heard(p.b.LinkAddr(), p.a.ctl.now), ib.LinkAddr{})
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := false
		p.a.do(func() {
			if e := p.a.neigh.Get(p.sink); e != nil {
				ok = ready(e)
			}
		})
		if ok {
			return p
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no %s to the sink within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// txSlot takes a free TX slot as the TUN reader does, reaping completions
// and waiting for them when every slot is in flight.
func (p *pair) txSlot() uint32 {
	slot, ok := p.a.txSlot(p.r)
	if !ok {
		panic("the interface closed under the test")
	}
	return slot
}

// send transmits the n-octet packet in slot as the TUN reader does.
func (p *pair) send(slot uint32, buf []byte, n int) {
	p.a.transmit(&p.r.sends, slot, buf, n)
	p.a.postBatch(&p.r.sends)
}

// packet writes an IPv4 header for an n-octet packet to dst into a TX slot.
func (p *pair) packet(slot uint32, n int) []byte {
	buf := p.a.slots.bytes(slot)
	ip := buf[encap.HeaderLen : encap.HeaderLen+n]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], uint16(n))
	ip[8], ip[9] = 64, 253 // TTL, protocol for experiments
	copy(ip[12:16], []byte{192, 168, 9, 1})
	d := p.sink.As4()
	copy(ip[16:20], d[:])
	return buf
}

func benchmarkTransmit(b *testing.B, size int) {
	p := newPair(b)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		slot := p.txSlot()
		p.send(slot, p.packet(slot, size), size)
	}
	// Wait until the peer wrote them all, so that its work is in the time.
	for p.b.ctr[rxPackets].Load() < uint64(b.N) && p.b.ctr[rxDropTUN].Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(size*8*b.N)/b.Elapsed().Seconds()/1e9, "Gbit/s")
	if got := p.a.ctr[txConnected].Load(); got < uint64(b.N) {
		b.Fatalf("%d of %d sent over RC", got, b.N)
	}
}

// BenchmarkTransmitRC64K: slot → RC post → wire → completion → peer TUN.
func BenchmarkTransmitRC64K(b *testing.B) { benchmarkTransmit(b, 65520) }

// BenchmarkTransmitRC1500 is the same with Ethernet-sized packets.
func BenchmarkTransmitRC1500(b *testing.B) { benchmarkTransmit(b, 1500) }

// TestDatapathDoesNotAllocate: in steady state, sending a packet over RC
// and receiving it at the peer allocates nothing on either side, the
// connections' counters of what they carried included.
func TestDatapathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	p := newPair(t)
	send := func() {
		slot := p.txSlot()
		p.send(slot, p.packet(slot, 9000), 9000)
	}
	allocs := allocsPer(1000, 1000, send)
	// The receiver must have taken the packets through its TUN, too.
	if got := p.received(6000); got < 6000 {
		t.Fatalf("peer received %d of 6000 packets\nsender %v\nreceiver %v\nneighbors %+v\nconns a %+v\nconns b %+v", got, p.a.Stats(), p.b.Stats(), p.a.Neighbors(), p.a.Connections(), p.b.Connections())
	}
	if allocs > 0.01 {
		t.Errorf("%.3f allocations per packet on the datapath, want 0", allocs)
	}
	// Every packet sent and received was counted on its connection.
	var sent, received uint64
	for _, c := range p.a.Connections() {
		sent += c.TxBytes
	}
	for _, c := range p.b.Connections() {
		received += c.RxBytes
	}
	if want := uint64(6000 * 9000); sent < want || received < want {
		t.Errorf("connections counted %d octets sent, %d received; want at least %d each", sent, received, want)
	}
}

// allocsPer calls f warm times (pools, rings, goroutine stacks fill up),
// then counts the allocations of n more calls, per call, in five rounds,
// and returns the fewest. Counted by hand: testing.AllocsPerRun would pin
// GOMAXPROCS to 1 and starve the receive goroutines this path depends on.
// The count covers every goroutine, so the control goroutine's periodic
// work (netlink dumps, /proc reads) can land in a round; an allocation on
// the datapath lands in all of them.
func allocsPer(warm, n int, f func()) float64 {
	for range warm {
		f()
	}
	fewest := math.Inf(1)
	for range 5 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			f()
		}
		runtime.ReadMemStats(&after)
		fewest = min(fewest, float64(after.Mallocs-before.Mallocs)/float64(n))
	}
	return fewest
}

// received waits up to 5 s for b to count want received packets and
// returns how many it counted. The counter is the only sign; it is polled.
func (p *pair) received(want uint64) uint64 {
	deadline := time.Now().Add(5 * time.Second)
	for p.b.ctr[rxPackets].Load() < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return p.b.ctr[rxPackets].Load()
}

// superPacket writes a TCPv4 super-packet of n payload octets to the sink
// into a TX slot, as a TUN with TSO hands it over, and returns its length
// and virtio-net header.
func (p *pair) superPacket(slot uint32, n, mss int) (int, offload.Hdr) {
	buf := p.a.slots.bytes(slot)
	ip := buf[encap.HeaderLen : encap.HeaderLen+40+n]
	clear(ip[:40])
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], uint16(len(ip)))
	ip[8], ip[9] = 64, 6 // TTL, TCP
	copy(ip[12:16], []byte{192, 168, 9, 1})
	d := p.sink.As4()
	copy(ip[16:20], d[:])
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:2], 40000)
	binary.BigEndian.PutUint16(tcp[2:4], 5201)
	binary.BigEndian.PutUint32(tcp[4:8], 1000)
	binary.BigEndian.PutUint32(tcp[8:12], 1)
	tcp[12], tcp[13] = 5<<4, 0x10 // data offset, ACK
	binary.BigEndian.PutUint16(tcp[14:16], 65535)
	return len(ip), offload.Hdr{Flags: offload.FlagNeedsCsum, GSOType: offload.GSOTCPv4, HdrLen: 40, GSOSize: uint16(mss), CsumStart: 20, CsumOffset: 16}
}

// TestOffloadDatapathDoesNotAllocate: a TSO super-packet cut into wire
// packets on one side and coalesced back on the other allocates nothing
// either, over a connection or UD.
func TestOffloadDatapathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	for _, tc := range []struct {
		mode          Mode
		mss, segments int
		sentOn        counter
	}{
		{Connected, 8948, 7, txConnected},
		{Datagram, 4040, 15, txUD},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			p := newPairMode(t, tc.mode)
			send := func() {
				slot := p.txSlot()
				n, h := p.superPacket(slot, 60000, tc.mss)
				p.r.hdr = h
				p.a.transmitSegments(p.r, slot, n)
				p.a.postBatch(&p.r.sends)
			}
			// Per wire packet, as the other test counts: a rare allocation
			// (sync.Pool refilled after a GC) is not one per packet.
			allocs := allocsPer(1000, 200, send) / float64(tc.segments)
			want := uint64(2000 * tc.segments)
			got := p.received(want)
			// UD has no flow control: this flood outruns the peer's
			// UDP socket buffer (about half arrive), as a UD sender can
			// outrun any receiver.
			if got < want && (tc.mode == Connected || got == 0) {
				t.Fatalf("peer received %d of %d segments\nsender %v\nreceiver %v", got, want, p.a.Stats(), p.b.Stats())
			}
			if got := p.a.ctr[tc.sentOn].Load(); got < want {
				t.Errorf("%s %d, want %d", counterNames[tc.sentOn], got, want)
			}
			if got := p.a.ctr[txSuperPackets].Load(); got != 2000 {
				t.Errorf("tx_super_packets %d, want 2000", got)
			}
			if p.b.ctr[rxCoalesced].Load() == 0 {
				t.Error("the peer coalesced no segments")
			}
			if allocs > 0.01 {
				t.Errorf("%.3f allocations per wire packet on the datapath, want 0", allocs)
			}
		})
	}
}

// benchmarkTransmitTSO sends TSO super-packets of 64 KiB cut into
// mss-octet TCP segments over RC, as the TUN reader does, and reports how
// often the reader had to wait for send completions (RC completes a send
// on its acknowledgement: slots held by small segments run out first).
func benchmarkTransmitTSO(b *testing.B, mss int) {
	p := newPair(b)
	const payload = 65535 - 40
	segs := (payload + mss - 1) / mss
	b.SetBytes(payload)
	b.ReportAllocs()
	waits := p.a.ctr[txSlotWaits].Load()
	b.ResetTimer()
	for range b.N {
		slot := p.txSlot()
		n, h := p.superPacket(slot, payload, mss)
		p.r.hdr = h
		p.a.transmitSegments(p.r, slot, n)
		p.a.postBatch(&p.r.sends)
	}
	want := uint64(b.N * segs)
	for p.b.ctr[rxPackets].Load() < want && p.b.ctr[rxDropTUN].Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(payload*8*b.N)/b.Elapsed().Seconds()/1e9, "Gbit/s")
	b.ReportMetric(float64(p.a.ctr[txSlotWaits].Load()-waits)/float64(b.N), "slot-waits/op")
	if got := p.a.ctr[txConnected].Load(); got < want {
		b.Fatalf("%d of %d segments sent over RC", got, want)
	}
}

// BenchmarkTransmitRCTSO1460: super-packets of 1460-octet segments
// (iperf3 -M 1460 over a 65520 MTU), slot → segments → RC → peer TUN.
func BenchmarkTransmitRCTSO1460(b *testing.B) { benchmarkTransmitTSO(b, 1460) }

// BenchmarkTransmitRCTSO8948 is the same with segments of a 9000 MTU.
func BenchmarkTransmitRCTSO8948(b *testing.B) { benchmarkTransmitTSO(b, 8948) }
