package neigh

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

// FuzzDecodeARP: DecodeARP never panics, and what it accepts encodes back
// to the same 56 octets (reserved link-address flag bits cleared) and
// decodes to the same ARP.
func FuzzDecodeARP(f *testing.F) {
	for _, g := range arpGoldens {
		w := testutil.Unhex(f, g.wire)
		for _, n := range []int{0, 1, 7, 8, 27, 28, 52, ARPLen - 1, ARPLen} {
			f.Add(w[:n])
		}
		f.Add(append(bytes.Clone(w), 0xff))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := DecodeARP(in)
		if err != nil {
			return
		}
		b := make([]byte, a.Len())
		if err := a.Encode(b); err != nil {
			t.Fatalf("decoded %+v does not encode: %v", a, err)
		}
		want := bytes.Clone(in[:a.Len()])
		want[8] &= 0xc0 // only RC and UC are defined
		want[32] &= 0xc0
		if a.HasSibling {
			want[ARPLen+4] &= 0xc0
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("re-encoded\n% x from\n% x", b, want)
		}
		if again, err := DecodeARP(b); err != nil || again != a {
			t.Fatalf("round trip: %+v, %v, want %+v", again, err, a)
		}
	})
}

// fuzzAddrs are the address pairs FuzzDecodeNeighborMessage chooses from:
// those of the goldens, plus the cases the validity rules single out.
var fuzzAddrs = [...][2]netip.Addr{
	{llA, snB},
	{llB, llA},
	{unspecified, snB},
	{llB, allNodes},
	{llA, llB},
	{allNodes, snB},
	{unspecified, llB},
}

// FuzzDecodeNeighborMessage: DecodeNeighborMessage never panics, and what
// it accepts encodes and decodes to the same message. When fix is set the
// checksum is made right first, so that the fuzzer gets past it into the
// options and the validity rules.
func FuzzDecodeNeighborMessage(f *testing.F) {
	for _, g := range ndGoldens {
		w := testutil.Unhex(f, g.wire)[IPv6HeaderLen:]
		var pair uint8
		for i, p := range fuzzAddrs {
			if p == [2]netip.Addr{g.src, g.dst} {
				pair = uint8(i)
			}
		}
		for _, n := range []int{0, 3, 4, 23, NDHeaderLen, NDHeaderLen + 1, NDHeaderLen + 2, len(w) - 1, len(w)} {
			if n <= len(w) {
				f.Add(w[:n], pair, false)
				f.Add(w[:n], pair, true)
			}
		}
		f.Add(append(bytes.Clone(w), 0x0e, 0x01, 1, 2, 3, 4, 5, 6), pair, true)
	}
	f.Fuzz(func(t *testing.T, in []byte, pair uint8, fix bool) {
		p := fuzzAddrs[int(pair)%len(fuzzAddrs)]
		src, dst := p[0], p[1]
		if fix && len(in) >= 4 {
			in = bytes.Clone(in)
			binary.BigEndian.PutUint16(in[2:4], ICMPv6Checksum(src, dst, in))
		}
		m, err := DecodeNeighborMessage(in, src, dst)
		if err != nil {
			return
		}
		var b [NDMaxLen]byte
		n, err := m.Encode(b[:], src, dst)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", m, err)
		}
		if n != m.Len() {
			t.Fatalf("Encode wrote %d octets, Len says %d", n, m.Len())
		}
		if again, err := DecodeNeighborMessage(b[:n], src, dst); err != nil || again != m {
			t.Fatalf("round trip: %+v, %v, want %+v", again, err, m)
		}
	})
}

// FuzzDecodeIPv6ND: DecodeIPv6ND never panics, and what it accepts
// encodes as an IPv6 packet that decodes to the same addresses and
// message. fix makes the ICMPv6 checksum right, as above.
func FuzzDecodeIPv6ND(f *testing.F) {
	for _, g := range ndGoldens {
		w := testutil.Unhex(f, g.wire)
		for _, n := range []int{0, 7, IPv6HeaderLen - 1, IPv6HeaderLen, IPv6HeaderLen + 4, IPv6HeaderLen + NDHeaderLen, len(w) - 1, len(w)} {
			if n <= len(w) {
				f.Add(w[:n], false)
			}
		}
		f.Add(append(bytes.Clone(w), 0, 0), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, fix bool) {
		if fix && len(in) >= IPv6HeaderLen+4 {
			if end := IPv6HeaderLen + int(binary.BigEndian.Uint16(in[4:6])); end >= IPv6HeaderLen+4 && end <= len(in) {
				in = bytes.Clone(in)
				src, dst := netip.AddrFrom16([16]byte(in[8:24])), netip.AddrFrom16([16]byte(in[24:40]))
				msg := in[IPv6HeaderLen:end]
				binary.BigEndian.PutUint16(msg[2:4], ICMPv6Checksum(src, dst, msg))
			}
		}
		src, dst, m, err := DecodeIPv6ND(in)
		if err != nil {
			return
		}
		var b [IPv6HeaderLen + NDMaxLen]byte
		n, err := m.EncodeIPv6(b[:], src, dst)
		if err != nil {
			t.Fatalf("decoded %v→%v %+v does not encode: %v", src, dst, m, err)
		}
		if !bytes.Equal(b[8:40], in[8:40]) {
			t.Fatalf("addresses re-encoded as % x from % x", b[8:40], in[8:40])
		}
		s2, d2, m2, err := DecodeIPv6ND(b[:n])
		if err != nil || s2 != src || d2 != dst || m2 != m {
			t.Fatalf("round trip: %v→%v %+v, %v, want %v→%v %+v", s2, d2, m2, err, src, dst, m)
		}
	})
}
