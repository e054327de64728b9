package offload

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzSplit: any header and packet. Split never panics, and when it
// accepts, every segment is a valid packet of at most MaxLen octets and
// the segments' payloads make up the super-packet's.
func FuzzSplit(f *testing.F) {
	seed := func(h Hdr, pkt []byte) {
		b := make([]byte, HdrLen, HdrLen+len(pkt))
		h.Encode(b)
		f.Add(append(b, pkt...))
	}
	seed(super(spec{sport: 1, dport: 2, flags: tcpACK | tcpPSH | tcpCWR, tcpOpts: tsOpts}, pattern(3000, 1), 1000))
	seed(super(spec{sport: 1, dport: 2, flags: tcpACK, ipOpts: []byte{1, 1, 1, 0}}, pattern(999, 1), 100))
	seed(super(spec{v6: true, sport: 1, dport: 2, flags: tcpACK | tcpFIN}, pattern(2001, 2), 500))
	seed(super(spec{udp: true, sport: 1, dport: 2}, pattern(1001, 3), 300))
	seed(super(spec{v6: true, udp: true, sport: 1, dport: 2}, pattern(7, 4), 2))
	seed(super(spec{sport: 1, dport: 2, flags: tcpACK}, nil, 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Hdr
		if h.Decode(data) != nil {
			return
		}
		pkt := data[HdrLen:]
		s, err := Split(h, pkt)
		if err != nil {
			return
		}
		if s.Len() < 1 || s.Len() > len(pkt) {
			t.Fatalf("%d segments of a %d-octet packet", s.Len(), len(pkt))
		}
		orig := bytes.Clone(pkt)
		dst := make([]byte, s.MaxLen())
		var payload []byte
		for k := range s.Len() {
			n := s.Put(k, dst)
			if err := checkPacket(dst[:n]); err != nil {
				t.Fatalf("segment %d: %v", k, err)
			}
			payload = append(payload, payloadOf(dst[:n])...)
		}
		if !bytes.Equal(payload, payloadOf(orig)) {
			t.Fatal("the segments' payloads differ from the super-packet's")
		}
		if !bytes.Equal(pkt, orig) {
			t.Fatal("the super-packet changed")
		}
	})
}

// FuzzCoalescer: any sequence of packets, each a record of a control
// octet, a 16-bit length and the packet; control bit 0 makes its checksums
// valid first, so that mutated headers get past them. The Coalescer never
// panics, a single packet comes back unchanged, and a merged one says its
// length, segments back into valid packets and carries the held packets'
// payloads.
func FuzzCoalescer(f *testing.F) {
	record := func(pkts [][]byte, ctl byte) []byte {
		var b []byte
		for _, p := range pkts {
			b = append(b, ctl)
			b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
			b = append(b, p...)
		}
		return b
	}
	a4 := spec{sport: 1, dport: 2, flags: tcpACK, tcpOpts: tsOpts}
	a6 := spec{v6: true, sport: 1, dport: 2, flags: tcpACK}
	f.Add(record(segs(a4, 100, 100, 100, 50), 1))
	f.Add(record(segs(a6, 64, 64, 64), 0))
	f.Add(record(append(segs(a4, 30, 30), segs(a6, 30, 30)...), 1))
	f.Add(record(segsWith(a4, []int{40, 40, 40}, func(i int, s *spec) { s.flags |= tcpPSH * uint8(i&1) }), 1))
	f.Add(record(segsWith(a4, []int{40, 40, 40}, func(i int, s *spec) { s.noDF = true; s.id = 3 }), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		var pkts [][]byte
		for len(data) >= 3 {
			ctl, n := data[0], int(binary.BigEndian.Uint16(data[1:]))
			data = data[3:]
			n = min(n, len(data))
			p := bytes.Clone(data[:n])
			data = data[n:]
			if ctl&1 != 0 {
				fix(p)
			}
			pkts = append(pkts, p)
		}
		var pristine [][]byte
		for _, p := range pkts {
			pristine = append(pristine, bytes.Clone(p))
		}
		var c Coalescer
		var held []int // indices of the held packets
		flush := func() {
			h, parts := c.Flush()
			if len(parts) != len(held) {
				t.Fatalf("%d parts for %d held", len(parts), len(held))
			}
			if len(parts) == 1 {
				if h != (Hdr{}) || !bytes.Equal(parts[0], pristine[held[0]]) {
					t.Fatalf("a single packet comes back changed, header %+v", h)
				}
			} else {
				w := written{h, concat(parts), len(parts)}
				if err := checkMerged(w); err != nil {
					t.Fatal(err)
				}
				back, err := resegment(w)
				if err != nil {
					t.Fatalf("merged packet does not segment: %v", err)
				}
				var got, want []byte
				for _, p := range back {
					if err := checkPacket(p); err != nil {
						t.Fatal(err)
					}
					got = append(got, payloadOf(p)...)
				}
				for _, i := range held {
					want = append(want, payloadOf(pristine[i])...)
				}
				if !bytes.Equal(got, want) {
					t.Fatal("the merged payload differs from the held packets'")
				}
			}
			held = held[:0]
		}
		for i, p := range pkts {
			if !c.Add(p) {
				if c.Held() == 0 {
					continue
				}
				flush()
				if !c.Add(p) {
					continue
				}
			}
			held = append(held, i)
			if c.Held() != len(held) || c.Held() > MaxParts {
				t.Fatalf("Held %d, want %d", c.Held(), len(held))
			}
		}
		if c.Held() > 0 {
			flush()
		}
	})
}
