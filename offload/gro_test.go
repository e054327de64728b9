package offload

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
)

// segsWith builds in-order segments of flow s with payloads of the given
// lengths, seq and IPv4 ID counting up; edit, if any, changes the spec of
// segment i before it is built.
func segsWith(s spec, lens []int, edit func(i int, s *spec)) [][]byte {
	var out [][]byte
	seq := s.seq
	for i, n := range lens {
		si := s
		si.seq, si.id = seq, s.id+uint16(i)
		if edit != nil {
			edit(i, &si)
		}
		out = append(out, build(si, pattern(n, byte(i))))
		seq += uint32(n)
	}
	return out
}

func segs(s spec, lens ...int) [][]byte { return segsWith(s, lens, nil) }

func repeat(n, size int) []int { return slices.Repeat([]int{size}, n) }

// fix makes pkt's IPv4 header and TCP or UDP checksums valid again after
// an edit, as far as its headers can be read.
func fix(pkt []byte) {
	if len(pkt) < 20 {
		return
	}
	ipLen, proto := 40, byte(0)
	switch pkt[0] >> 4 {
	case 4:
		ipLen, proto = int(pkt[0]&0xf)*4, pkt[9]
		if ipLen < 20 || len(pkt) < ipLen {
			return
		}
		pkt[10], pkt[11] = 0, 0
		binary.BigEndian.PutUint16(pkt[10:], ^refFold(pkt[:ipLen]))
	case 6:
		if len(pkt) < 40 {
			return
		}
		proto = pkt[6]
	default:
		return
	}
	l4 := pkt[ipLen:]
	off := 16
	if proto == 17 {
		off = 6
	}
	if len(l4) < off+2 {
		return
	}
	l4[off], l4[off+1] = 0, 0
	binary.BigEndian.PutUint16(l4[off:], ^refFold(refPseudo(pkt), l4))
}

func fixed(p []byte) []byte { fix(p); return p }

// written is what a Coalescer's user writes to the TUN: a header and the
// concatenated parts, and how many packets went into it.
type written struct {
	h   Hdr
	pkt []byte
	n   int
}

// coalesce runs pkts through c as the datapath does and returns what it
// writes. It checks Held and that Flush's parts are the held packets'
// buffers, whole for the first, payload only for the others.
func coalesce(t testing.TB, c *Coalescer, pkts [][]byte) []written {
	var out []written
	var held [][]byte
	flush := func() {
		h, parts := c.Flush()
		if len(parts) != len(held) || c.Held() != 0 {
			t.Fatalf("Flush returned %d parts for %d held, %d still held", len(parts), len(held), c.Held())
		}
		for i, p := range parts {
			hp := held[i]
			if len(p) == 0 || len(p) > len(hp) || &p[0] != &hp[len(hp)-len(p)] || i == 0 && len(p) != len(hp) {
				t.Fatalf("part %d (%d octets) is not the held packet's tail (%d)", i, len(p), len(hp))
			}
		}
		out = append(out, written{h, concat(parts), len(parts)})
		held = held[:0]
	}
	for _, p := range pkts {
		if c.Add(p) {
			held = append(held, p)
		} else {
			if c.Held() > 0 {
				flush()
				if c.Add(p) {
					held = append(held, p)
					continue
				}
			}
			out = append(out, written{Hdr{}, bytes.Clone(p), 1})
		}
		if c.Held() != len(held) {
			t.Fatalf("Held %d, want %d", c.Held(), len(held))
		}
	}
	if c.Held() > 0 {
		flush()
	}
	return out
}

// resegment is what the kernel does with a write: a GSO packet is cut
// (checked with our own Split); any other goes as it is.
func resegment(w written) ([][]byte, error) {
	if w.h.GSOType == GSONone {
		return [][]byte{w.pkt}, nil
	}
	s, err := Split(w.h, w.pkt)
	if err != nil {
		return nil, err
	}
	return splitAll(&s), nil
}

// checkMerged checks a merged write: its header describes it, and its
// checksum field holds the pseudo-header sum, so that finishing the
// checksum as the kernel would gives a valid packet.
func checkMerged(w written) error {
	if w.h.GSOType == GSONone {
		if w.h != (Hdr{}) || w.n != 1 {
			return fmt.Errorf("header %+v for %d packets", w.h, w.n)
		}
		return nil
	}
	ipLen, typ := 20, uint8(GSOTCPv4)
	if w.pkt[0]>>4 == 6 {
		ipLen, typ = 40, GSOTCPv6
	}
	hdrs := ipLen + int(w.pkt[ipLen+12]>>4)*4
	want := Hdr{Flags: FlagNeedsCsum, GSOType: typ, HdrLen: uint16(hdrs), GSOSize: w.h.GSOSize, CsumStart: uint16(ipLen), CsumOffset: 16}
	if w.h != want || w.n < 2 || int(w.h.GSOSize) >= len(w.pkt)-hdrs {
		return fmt.Errorf("header %+v for %d packets, %d octets; want %+v", w.h, w.n, len(w.pkt), want)
	}
	p := bytes.Clone(w.pkt)
	binary.BigEndian.PutUint16(p[ipLen+16:], ^refFold(p[ipLen:]))
	return checkPacket(p)
}

func TestCoalescer(t *testing.T) {
	a4 := spec{sport: 40000, dport: 5201, id: 100, seq: 1000, ack: 55, flags: tcpACK, win: 500, tcpOpts: tsOpts}
	b4 := a4
	b4.sport = 40001
	a6 := spec{v6: true, sport: 40000, dport: 5201, tos: 0x28, flow: 0x12345, seq: 0xffffff00, ack: 9, flags: tcpACK, tcpOpts: tsOpts}
	at := func(idx int, f func(s *spec)) func(int, *spec) {
		return func(i int, s *spec) {
			if i == idx {
				f(s)
			}
		}
	}
	from := func(idx int, f func(s *spec)) func(int, *spec) {
		return func(i int, s *spec) {
			if i >= idx {
				f(s)
			}
		}
	}
	pick := func(pkts [][]byte, order ...int) [][]byte {
		var out [][]byte
		for _, i := range order {
			out = append(out, pkts[i])
		}
		return out
	}
	edit := func(pkts [][]byte, i int, f func(p []byte), refix bool) [][]byte {
		f(pkts[i])
		if refix {
			fix(pkts[i])
		}
		return pkts
	}
	for _, tt := range []struct {
		name  string
		pkts  [][]byte
		want  []int // packets per write
		loose bool  // resegmenting changes IPv4 IDs or windows, as Linux's GRO also does
	}{
		{"TCPv4 train", segs(a4, repeat(5, 1448)...), []int{5}, false},
		{"TCPv6 train, last short", segs(a6, 1428, 1428, 1428, 100), []int{4}, false},
		{"odd sizes", segs(a4, 1001, 1001, 1001, 999), []int{4}, false},
		{"one segment", segs(a4, 1448), []int{1}, false},
		{"short segment closes the train", segs(a4, 1000, 1000, 500, 1000, 1000), []int{3, 2}, false},
		{"longer than the first", segs(a4, 500, 1000, 1000), []int{1, 2}, false},
		{"PSH ends the train", segsWith(a4, repeat(5, 1000), at(2, func(s *spec) { s.flags |= tcpPSH })), []int{3, 2}, false},
		{"PSH on the first", segsWith(a4, repeat(5, 1000), at(0, func(s *spec) { s.flags |= tcpPSH })), []int{1, 4}, false},
		{"PSH on the last", segsWith(a4, repeat(5, 1000), at(4, func(s *spec) { s.flags |= tcpPSH })), []int{5}, false},
		{"FIN is no candidate", segsWith(a4, repeat(5, 1000), at(2, func(s *spec) { s.flags |= tcpFIN })), []int{2, 1, 2}, false},
		{"SYN is no candidate", segsWith(a4, repeat(5, 1000), at(2, func(s *spec) { s.flags |= tcpSYN })), []int{2, 1, 2}, false},
		{"RST is no candidate", segsWith(a4, repeat(5, 1000), at(2, func(s *spec) { s.flags |= tcpRST })), []int{2, 1, 2}, false},
		{"URG is no candidate", segsWith(a4, repeat(5, 1000), at(2, func(s *spec) { s.flags |= tcpURG })), []int{2, 1, 2}, false},
		{"CWR is no candidate", segsWith(a4, repeat(5, 1000), at(0, func(s *spec) { s.flags |= tcpCWR })), []int{1, 4}, false},
		{"ECE is no candidate", segsWith(a4, repeat(5, 1000), at(2, func(s *spec) { s.flags |= tcpECE })), []int{2, 1, 2}, false},
		{"no ACK is no candidate", segsWith(a4, repeat(3, 1000), func(i int, s *spec) { s.flags = 0 }), []int{1, 1, 1}, false},
		{"pure ACK is no candidate", segs(a4, 1000, 1000, 0, 1000), []int{2, 1, 1}, false},
		{"out of order", pick(segs(a4, repeat(5, 1000)...), 0, 1, 3, 2, 4), []int{2, 1, 1, 1}, false},
		{"retransmission", pick(segs(a4, repeat(3, 1000)...), 0, 1, 1, 2), []int{2, 2}, false},
		{"ACK differs", segsWith(a4, repeat(5, 1000), from(2, func(s *spec) { s.ack++ })), []int{2, 3}, false},
		{"options differ", segsWith(a4, repeat(5, 1000), from(2, func(s *spec) {
			s.tcpOpts = slices.Clone(tsOpts)
			s.tcpOpts[7]++
		})), []int{2, 3}, false},
		{"option length differs", segsWith(a4, repeat(5, 1000), from(2, func(s *spec) { s.tcpOpts = nil })), []int{2, 3}, false},
		{"window may differ", segsWith(a4, repeat(5, 1000), at(2, func(s *spec) { s.win++ })), []int{5}, true},
		{"two flows interleaved", pick(append(segs(a4, 1000, 1000), segs(b4, 1000, 1000)...), 0, 2, 1, 3), []int{1, 1, 1, 1}, false},
		{"two flows in turn", append(segs(a4, 1000, 1000), segs(b4, 1000, 1000)...), []int{2, 2}, false},
		{"IPv4 and IPv6", append(segs(a4, 1000, 1000), segs(a6, 1000, 1000)...), []int{2, 2}, false},
		{"destination differs", segsWith(a4, repeat(5, 1000), from(2, func(s *spec) { s.dst, s.src = "10.0.0.3", "10.0.0.1" })), []int{2, 3}, false},
		{"bad TCP checksum is not held", edit(segs(a4, repeat(5, 1000)...), 2, func(p []byte) { p[len(p)-1]++ }, false), []int{2, 1, 2}, false},
		{"bad TCP checksum alone", edit(segs(a4, 1000), 0, func(p []byte) { p[60]++ }, false), []int{1}, false},
		{"bad IPv4 header checksum", edit(segs(a4, repeat(5, 1000)...), 2, func(p []byte) { p[10]++ }, false), []int{2, 1, 2}, false},
		{"IPv4 options", segsWith(a4, repeat(3, 1000), func(i int, s *spec) { s.ipOpts = []byte{1, 1, 1, 0} }), []int{1, 1, 1}, false},
		{"IPv4 fragment", edit(segs(a4, repeat(3, 1000)...), 1, func(p []byte) { p[6] |= 0x20 }, true), []int{1, 1, 1}, false},
		{"IPv4 trailing octets", edit(segs(a4, repeat(3, 1000)...), 1, func(p []byte) { binary.BigEndian.PutUint16(p[2:], uint16(len(p)-1)) }, true), []int{1, 1, 1}, false},
		{"TCP header truncated", [][]byte{fixed(shorten(build(spec{}, nil)[:30]))}, []int{1}, false},
		{"TCP reserved bits", edit(segs(a4, repeat(3, 1000)...), 1, func(p []byte) { p[32] |= 1 }, true), []int{1, 1, 1}, false},
		{"IPv6 extension header", segsWith(a6, repeat(3, 1000), func(i int, s *spec) { s.nextHdr = 60 }), []int{1, 1, 1}, false},
		{"UDP", segsWith(a4, repeat(3, 1000), func(i int, s *spec) { s.udp = true }), []int{1, 1, 1}, false},
		{"TTL differs", segsWith(a4, repeat(5, 1000), from(2, func(s *spec) { s.ttl = 3 })), []int{2, 3}, false},
		{"TOS differs", segsWith(a4, repeat(5, 1000), from(2, func(s *spec) { s.tos = 4 })), []int{2, 3}, false},
		{"DF differs", segsWith(a4, repeat(5, 1000), from(2, func(s *spec) { s.noDF = true })), []int{2, 3}, false},
		{"no DF, IDs count up", segsWith(a4, repeat(5, 1000), func(i int, s *spec) { s.noDF = true }), []int{5}, false},
		{"no DF, ID out of step", segsWith(a4, repeat(5, 1000), func(i int, s *spec) { s.noDF = true; s.id += 7 * uint16(i&2) }), []int{2, 2, 1}, false},
		{"DF, ID fixed", segsWith(a4, repeat(5, 1000), func(i int, s *spec) { s.id = 9 }), []int{5}, true},
		{"IPv6 traffic class differs", segsWith(a6, repeat(5, 1000), from(2, func(s *spec) { s.tos = 0 })), []int{2, 3}, false},
		{"IPv6 flow label differs", segsWith(a6, repeat(5, 1000), from(2, func(s *spec) { s.flow = 1 })), []int{2, 3}, false},
		{"IPv6 hop limit differs", segsWith(a6, repeat(5, 1000), from(2, func(s *spec) { s.ttl = 1 })), []int{2, 3}, false},
		// 20+20 + 5*13099 = 65535, the most an IPv4 packet holds.
		{"IPv4 65535", segs(spec{sport: 1, dport: 2, flags: tcpACK}, repeat(6, 13099)...), []int{5, 1}, false},
		{"IPv4 65535 + 1", segs(spec{sport: 1, dport: 2, flags: tcpACK}, 13100, 13100, 13100, 13100, 13099), []int{4, 1}, false},
		// 20 + 5*13103 = 65535, the most an IPv6 payload length says.
		{"IPv6 65535", segs(spec{v6: true, sport: 1, dport: 2, flags: tcpACK}, repeat(6, 13103)...), []int{5, 1}, false},
		{"IPv6 65535 + 1", segs(spec{v6: true, sport: 1, dport: 2, flags: tcpACK}, 13104, 13104, 13104, 13104, 13103), []int{4, 1}, false},
		{"64 parts", segs(a4, repeat(70, 100)...), []int{64, 6}, false},
	} {
		var pristine [][]byte
		for _, p := range tt.pkts {
			pristine = append(pristine, bytes.Clone(p))
		}
		var c Coalescer
		ws := coalesce(t, &c, tt.pkts)
		var got []int
		var back [][]byte
		for i, w := range ws {
			got = append(got, w.n)
			if err := checkMerged(w); err != nil {
				t.Errorf("%s: write %d: %v", tt.name, i, err)
			}
			segs, err := resegment(w)
			if err != nil {
				t.Errorf("%s: write %d does not segment: %v", tt.name, i, err)
			}
			back = append(back, segs...)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: writes of %v packets, want %v", tt.name, got, tt.want)
			continue
		}
		if len(back) != len(pristine) {
			t.Errorf("%s: %d packets come back, want %d", tt.name, len(back), len(pristine))
			continue
		}
		for i, p := range back {
			want := pristine[i]
			if tt.loose {
				// Only IPv4 ID (and so the header checksum) and the
				// window, which the first segment's header sets for all.
				p, want = bytes.Clone(p), bytes.Clone(want)
				for _, q := range [][]byte{p, want} {
					clear(q[4:6])
					clear(q[10:12])
					clear(q[34:38])
				}
			}
			if !bytes.Equal(p, want) {
				t.Errorf("%s: packet %d comes back changed:\n% x\nwant\n% x", tt.name, i, p[:min(len(p), 64)], want[:min(len(want), 64)])
			}
		}
	}
}

// TestCoalescerFlushEmpty: Flush with nothing held returns nothing; a
// closed train takes nothing more, and Flush opens the coalescer again.
func TestCoalescerFlushEmpty(t *testing.T) {
	var c Coalescer
	if h, parts := c.Flush(); h != (Hdr{}) || parts != nil {
		t.Errorf("empty Flush: %+v, %d parts", h, len(parts))
	}
	pkts := segs(spec{sport: 1, dport: 2, flags: tcpACK}, 1000, 500, 1000)
	if !c.Add(pkts[0]) || !c.Add(pkts[1]) || c.Add(pkts[2]) || c.Held() != 2 {
		t.Fatalf("train of two, then closed: held %d", c.Held())
	}
	c.Flush()
	if !c.Add(pkts[2]) || c.Held() != 1 {
		t.Errorf("after Flush a new train does not start")
	}
}

// TestSplitCoalesceRoundTrip: a super-packet split and merged again is the
// super-packet the kernel gave, header and all.
func TestSplitCoalesceRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name    string
		s       spec
		payload int
		mss     int
	}{
		{"TCPv4", spec{sport: 1, dport: 2, id: 0xfff0, seq: 0xfffff000, ack: 3, flags: tcpACK, win: 9, tcpOpts: tsOpts}, 10000, 1448},
		{"TCPv4 PSH no DF", spec{noDF: true, sport: 1, dport: 2, flags: tcpACK | tcpPSH}, 4000, 1000},
		{"TCPv4 64 KiB", spec{sport: 1, dport: 2, flags: tcpACK | tcpPSH, tcpOpts: tsOpts}, 65535 - 52, 4052},
		{"TCPv6", spec{v6: true, sport: 1, dport: 2, flow: 77, flags: tcpACK | tcpPSH, tcpOpts: tsOpts}, 12345, 1428},
		{"TCPv6 64 KiB", spec{v6: true, sport: 1, dport: 2, flags: tcpACK}, 65535 - 20, 1100},
	} {
		h, pkt := super(tt.s, pattern(tt.payload, 3), tt.mss)
		orig := bytes.Clone(pkt)
		s, err := Split(h, pkt)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var c Coalescer
		for k, seg := range splitAll(&s) {
			if !c.Add(seg) {
				t.Fatalf("%s: segment %d not taken", tt.name, k)
			}
		}
		got, parts := c.Flush()
		if got != h || !bytes.Equal(concat(parts), orig) {
			t.Errorf("%s: merged into %+v, %d octets; want %+v, %d, the original", tt.name, got, len(concat(parts)), h, len(orig))
		}
	}
}

func TestCoalescerNoAllocs(t *testing.T) {
	pkts := segs(spec{sport: 1, dport: 2, flags: tcpACK, tcpOpts: tsOpts}, repeat(16, 1448)...)
	first := bytes.Clone(pkts[0])
	var c Coalescer
	if n := testing.AllocsPerRun(100, func() {
		copy(pkts[0], first) // Flush rewrote its headers
		for _, p := range pkts {
			c.Add(p)
		}
		if _, parts := c.Flush(); len(parts) != len(pkts) {
			panic("not merged")
		}
	}); n != 0 {
		t.Errorf("%v allocations per train", n)
	}
}

func BenchmarkCoalesce(b *testing.B) {
	// 16 segments at the gso_size of a 4096-octet MTU: 64 KiB a write.
	pkts := segs(spec{sport: 1, dport: 2, flags: tcpACK, tcpOpts: tsOpts}, repeat(16, 4052)...)
	first := bytes.Clone(pkts[0][:52])
	var n int64
	for _, p := range pkts {
		n += int64(len(p))
	}
	b.SetBytes(n)
	b.ReportAllocs()
	var c Coalescer
	for b.Loop() {
		copy(pkts[0], first)
		for _, p := range pkts {
			c.Add(p)
		}
		if _, parts := c.Flush(); len(parts) != len(pkts) {
			b.Fatal("not merged")
		}
	}
}

// A packet nothing could follow is not held, so its checksum is left to
// the kernel instead of being summed twice: a segment with PSH (the end of
// a write) and one with no room for a second of its size (RC's 64 KiB).
func TestLoneSegmentsAreNotHeld(t *testing.T) {
	a4 := spec{sport: 40000, dport: 5201, id: 100, seq: 1000, ack: 55, flags: tcpACK, win: 500, tcpOpts: tsOpts}
	psh := a4
	psh.flags |= tcpPSH
	a6 := a4
	a6.v6 = true
	for _, tt := range []struct {
		name string
		pkt  []byte
		held bool
	}{
		{"ACK, 1000 octets", segs(a4, 1000)[0], true},
		{"PSH", segs(psh, 1000)[0], false},
		{"IPv4, room for a second", segs(a4, 32700)[0], true},
		{"IPv4, no room for a second", segs(a4, 32800)[0], false},
		{"IPv6, room for a second", segs(a6, 32700)[0], true},
		{"IPv6, no room for a second", segs(a6, 32800)[0], false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var c Coalescer
			if got := c.Add(tt.pkt); got != tt.held {
				t.Errorf("Add = %v, want %v", got, tt.held)
			}
		})
	}
}
