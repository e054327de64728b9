package neigh

import (
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

func BenchmarkARPEncode(b *testing.B) {
	a := arpGoldens[1].arp
	var buf [ARPLen]byte
	b.ReportAllocs()
	b.SetBytes(ARPLen)
	for b.Loop() {
		if err := a.Encode(buf[:]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkARPDecode(b *testing.B) {
	wire := testutil.Unhex(b, arpGoldens[1].wire)
	b.ReportAllocs()
	b.SetBytes(ARPLen)
	for b.Loop() {
		if _, err := DecodeARP(wire); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNDEncode(b *testing.B) {
	for _, g := range ndGoldens[:2] {
		b.Run(map[uint8]string{TypeNeighborSolicitation: "NS", TypeNeighborAdvertisement: "NA"}[g.msg.Type], func(b *testing.B) {
			m := g.msg
			var buf [IPv6HeaderLen + NDMaxLen]byte
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.EncodeIPv6(buf[:], g.src, g.dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNDDecode(b *testing.B) {
	for _, g := range ndGoldens[:2] {
		b.Run(map[uint8]string{TypeNeighborSolicitation: "NS", TypeNeighborAdvertisement: "NA"}[g.msg.Type], func(b *testing.B) {
			wire := testutil.Unhex(b, g.wire)
			b.ReportAllocs()
			b.SetBytes(int64(len(wire)))
			for b.Loop() {
				if _, _, _, err := DecodeIPv6ND(wire); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
