package ipoib

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib/ibtest"
	"github.com/ipoibd/ipoibd/offload"
)

// newFakePair is newPair as an ordinary user: the two interfaces are fake
// hosts (ibtest, netdevtest) with newPair's addresses, 192.168.9.k/24 and
// fd00:9::k/64, a connected to b for the sink. Its ping goes through the
// fake netdevs, with b's test answering in place of b's kernel.
func newFakePair(t *testing.T) *pair {
	t.Helper()
	return newFakePairOn(t, ibtest.Config{})
}

// newFakePairOn is newFakePair with devices opened as dev says.
func newFakePairOn(t *testing.T, dev ibtest.Config) *pair {
	t.Helper()
	return connectSink(t, newFakeHostPair(t, dev, Connected))
}

// newFakeDatagramPair is newFakePair in datagram mode: a's sink is at b's
// link address over UD.
func newFakeDatagramPair(t *testing.T) *pair {
	t.Helper()
	return resolveSink(t, newFakeHostPair(t, ibtest.Config{}, Datagram))
}

// newFakeHostPair makes newFakePair's two hosts in mode, its sink not yet
// set.
func newFakeHostPair(t *testing.T, dev ibtest.Config, mode Mode) *pair {
	t.Helper()
	logA := &syncBuffer{}
	addrs := func(k int, log *slog.Logger) func(*Config) {
		return func(c *Config) {
			c.Addrs = []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("192.168.9.%d/24", k)), netip.MustParsePrefix(fmt.Sprintf("fd00:9::%d/64", k))}
			c.Mode = mode
			if log != nil {
				c.Log = log
			}
		}
	}
	h := newFakeHostsOn(t, dev, 2, addrs(1, slog.New(slog.NewTextHandler(logA, nil))), addrs(2, nil))
	for k, x := range h {
		x.ip4 = netip.AddrFrom4([4]byte{192, 168, 9, byte(k + 1)})
		x.ip6 = netip.MustParseAddr(fmt.Sprintf("fd00:9::%d", k+1))
	}
	return &pair{a: h[0].Interface, b: h[1].Interface, fa: h[0], fb: h[1], logA: logA}
}

// fakePing sends a UDP packet from a to dst, b's address, and b's answer
// back, each within wait; seq tells rounds apart. It reports whether both
// arrived.
func (p *pair) fakePing(dst string, seq byte, wait time.Duration) error {
	to := netip.MustParseAddr(dst)
	for _, leg := range []struct {
		from, to *fakeHost
		pkt      []byte
	}{
		{p.fa, p.fb, packetTo(p.fa.ip4, to, 84, seq)},
		{p.fb, p.fa, packetTo(to, p.fa.ip4, 84, seq+1)},
	} {
		leg.from.send(leg.pkt)
		deadline := time.After(wait)
		for got := false; !got; {
			select {
			case b := <-leg.to.nd.Out:
				got = string(b) == string(leg.pkt) // an earlier round's late packet is passed over
			case <-deadline:
				return fmt.Errorf("%v got no packet from %v in %v", leg.to.ip4, leg.from.ip4, wait)
			}
		}
	}
	return nil
}

// TestFakeSegmentsShareSlots: the segments of a super-packet to a resolved
// neighbor, over its connection or UD, go packed into as few transmit slots
// as hold them (RC holds a slot until the peer acknowledges; over UD a
// slot to each segment cost a slot, a neighbor lookup and three counter
// updates a segment), arrive as the segments a NIC would have sent, in
// order, are counted on their path, and every slot comes back once they
// completed.
func TestFakeSegmentsShareSlots(t *testing.T) {
	const payload = 65535 - 40
	for _, tc := range []struct {
		mode       Mode
		mss, slots int
		counted    counter
	}{
		{Connected, 1460, 1, txConnected}, // 45 segments of 1504 octets with the IPoIB header
		{Connected, 536, 2, txConnected},  // 123 segments, 119 to a slot
		{Connected, 8948, 2, txConnected}, // 8 segments, 7 to a slot
		{Datagram, 1460, 1, txUD},
		{Datagram, 4040, 1, txUD}, // 17 segments of 4092 octets, 17 to a slot
		{Datagram, 536, 2, txUD},
	} {
		t.Run(fmt.Sprint(tc.mode, tc.mss), func(t *testing.T) {
			p := newFakePair(t)
			if tc.mode == Datagram {
				p = newFakeDatagramPair(t)
			}
			pool := p.r.slots
			slot := p.txSlot()
			n, h := p.superPacket(slot, payload, tc.mss)
			sp := p.a.slots.bytes(slot)[encap.HeaderLen : encap.HeaderLen+n]
			for k := 40; k < n; k++ {
				sp[k] = byte(k * 7)
			}
			// The segments as offload cuts them, from a copy.
			segs, err := offload.Split(h, slices.Clone(sp))
			if err != nil {
				t.Fatal(err)
			}
			want := make([][]byte, segs.Len())
			for k := range want {
				b := make([]byte, segs.MaxLen())
				want[k] = b[:segs.Put(k, b)]
			}
			before := pool.freeCount() + 1 // with the super-packet's slot
			p.r.hdr = h
			p.a.transmitSegments(p.r, slot, n)
			p.a.postBatch(&p.r.sends)
			// Nothing reaps in between: the reader of a waits in Read.
			if used := before - pool.freeCount(); used > tc.slots {
				t.Errorf("%d segments held %d transmit slots, want at most %d", len(want), used, tc.slots)
			}
			for k := range want {
				if got := p.fb.next(t); !bytes.Equal(got, want[k]) {
					t.Fatalf("segment %d of %d: got %d octets that differ from the %d cut", k, len(want), len(got), len(want[k]))
				}
			}
			if got := p.fa.count(tc.counted); got < uint64(len(want)) {
				t.Errorf("%s %d, want at least %d", counterNames[tc.counted], got, len(want))
			}
			// All but the one a's reader holds for its next Read.
			waitFor(t, "every transmit slot back in its pool", func() bool {
				p.a.reapSends(&p.r.wc)
				return pool.freeCount() == before
			})
		})
	}
}

// TestFakeSegmentsWithinGrantedDepth: on a device that grants a QP fewer
// send work requests than ipoib asks for (a verbs device's max_qp_wr), the
// segments packed into shared slots never overfill a send queue: every one
// of several super-packets' segments arrives, in order, and none is
// refused (tx_drop_post) or tears the connection down. ibtest refuses an
// RC send beyond the granted depth, as a device does.
func TestFakeSegmentsWithinGrantedDepth(t *testing.T) {
	const payload, mss, rounds = 65535 - 40, 1460, 4
	for _, maxWR := range []int{48, 100} {
		t.Run(fmt.Sprint(maxWR), func(t *testing.T) {
			p := newFakePairOn(t, ibtest.Config{MaxQPWR: maxWR})
			if b := int(p.a.slots.budget.Load()); b > maxWR {
				t.Fatalf("a budget of %d sends with QPs granted %d", b, maxWR)
			}
			var want [][]byte
			for r := range rounds {
				slot := p.txSlot()
				n, h := p.superPacket(slot, payload, mss)
				sp := p.a.slots.bytes(slot)[encap.HeaderLen : encap.HeaderLen+n]
				for k := 40; k < n; k++ {
					sp[k] = byte(k*7 + r)
				}
				segs, err := offload.Split(h, slices.Clone(sp))
				if err != nil {
					t.Fatal(err)
				}
				for k := range segs.Len() {
					b := make([]byte, segs.MaxLen())
					want = append(want, b[:segs.Put(k, b)])
				}
				p.r.hdr = h
				p.a.transmitSegments(p.r, slot, n)
				p.a.postBatch(&p.r.sends)
			}
			for k := range want {
				if got := p.fb.next(t); !bytes.Equal(got, want[k]) {
					t.Fatalf("segment %d of %d: got %d octets that differ from the %d cut", k, len(want), len(got), len(want[k]))
				}
			}
			for _, c := range []counter{txDropPost, txConnErrors, txErrors} {
				if got := p.fa.count(c); got != 0 {
					t.Errorf("%s %d, want 0", counterNames[c], got)
				}
			}
			// The connection's own figures count every packed segment.
			octets := 0
			for _, w := range want {
				octets += len(w)
			}
			path := p.a.neigh.Lookup(p.sink).Path()
			if got := path.Bytes.Load(); got < uint64(octets) {
				t.Errorf("the connection counts %d octets sent, want at least the %d of the segments", got, octets)
			}
		})
	}
}
