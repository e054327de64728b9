package wire

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// wirePacket builds an IB packet of ibLen octets (ICRC included) as a
// foreign sender would, with the given IPv4 ID and source port, and
// returns it with its ICRC over the real headers.
func wirePacket(t testing.TB, rng *rand.Rand, src netip.AddrPort, dst netip.Addr, id uint16, ibLen int) []byte {
	t.Helper()
	b := make([]byte, ibLen)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	b[0] = byte(OpRCSendOnly)
	hdr, err := AppendIPUDPHeaders(nil, src.Addr(), dst, src.Port(), UDPPort, 64, ibLen)
	if err != nil {
		t.Fatal(err)
	}
	if src.Addr().Is4() {
		binary.BigEndian.PutUint16(hdr[4:6], id)
	}
	n := len(hdr) - UDPHeaderLen
	crc, err := ICRC(hdr[:n], hdr[n:], b[:ibLen-ICRCLen])
	if err != nil {
		t.Fatal(err)
	}
	PutICRC(b[ibLen-ICRCLen:], crc)
	return b
}

// The receiver recovers the sender's IPv4 ID from the ICRC, whatever the
// ID and the length, and from any source port; a corrupt packet has no
// ID that explains its ICRC.
func TestICRCSolvesIPv4ID(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src, dst := netip.MustParseAddrPort("192.0.2.1:49733"), netip.MustParseAddr("192.0.2.2")
	lengths := []int{BTHLen + ICRCLen, BTHLen + AETHLen + ICRCLen, 100, 1500, BTHLen + 4096 + ICRCLen, 9000, 65000}
	ids := []uint16{0, 1, 2, 0x00ff, 0x0100, 0x8000, 0xbeef, 0xffff}
	for range 8 {
		ids = append(ids, uint16(rng.Uint32()))
	}
	for _, l := range lengths {
		for _, id := range ids {
			b := wirePacket(t, rng, src, dst, id, l)
			for _, hint := range []uint16{0, id, id - 1, ^id} {
				if got, err := solveID(b, src, dst, hint); err != nil || got != id {
					t.Fatalf("length %d, ID %#x, hint %#x: got %#x, %v", l, id, hint, got, err)
				}
			}
			// Another source port is another packet.
			if got, err := solveID(b, netip.AddrPortFrom(src.Addr(), src.Port()+1), dst, id); err == nil && got == id {
				t.Fatalf("length %d: the ICRC ignores the source port", l)
			}
		}
	}
	// Corruption: a flipped bit anywhere, or a wrong ICRC, is caught (the
	// chance that some ID explains it is 2^-16; these are fixed cases).
	rejected := 0
	const trials = 400
	for i := range trials {
		l := lengths[i%len(lengths)]
		b := wirePacket(t, rng, src, dst, uint16(rng.Uint32()), l)
		bit := rng.IntN(l * 8)
		b[bit/8] ^= 1 << (bit % 8)
		if bit/8 == 4 { // BTH octet 4 is masked: not corruption
			rejected++
			continue
		}
		if _, err := solveID(b, src, dst, 0); err != nil {
			rejected++
		}
	}
	if rejected != trials {
		t.Errorf("%d of %d corrupt packets accepted", trials-rejected, trials)
	}
}

// IPv6 has no ID: only the exact ICRC is taken, from any source port.
func TestICRCIPv6AnySourcePort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src, dst := netip.MustParseAddrPort("[2001:db8::1]:50000"), netip.MustParseAddr("2001:db8::2")
	b := wirePacket(t, rng, src, dst, 0, 200)
	if _, err := solveID(b, src, dst, 0); err != nil {
		t.Fatalf("IPv6 packet from port 50000: %v", err)
	}
	b[100] ^= 1
	if _, err := solveID(b, src, dst, 0); err == nil {
		t.Fatal("corrupt IPv6 packet accepted")
	}
}

// The solver costs a few hundred operations and no allocation.
func TestICRCSolveAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	src, dst := netip.MustParseAddrPort("192.0.2.1:49733"), netip.MustParseAddr("192.0.2.2")
	b := wirePacket(t, rng, src, dst, 0x4242, 4112)
	if n := testing.AllocsPerRun(100, func() { CheckDatagramICRC(b, src, dst, UDPPort, 0) }); n != 0 {
		t.Errorf("%v allocs", n)
	}
}

func BenchmarkICRCSolve4K(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	src, dst := netip.MustParseAddrPort("192.0.2.1:49733"), netip.MustParseAddr("192.0.2.2")
	p := wirePacket(b, rng, src, dst, 0x4242, 4112)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		CheckDatagramICRC(p, src, dst, UDPPort, 0)
	}
}

// FuzzICRCSolvesID: for any packet, ID, source port and first guess, the
// receiver finds the ID the sender used.
func FuzzICRCSolvesID(f *testing.F) {
	f.Add([]byte{0x04, 0, 0xff, 0xff, 0, 0, 0, 2, 0, 0, 0, 1}, uint16(7), uint16(0xc0de), uint16(0))
	f.Add(make([]byte, 4096+BTHLen), uint16(0xffff), uint16(4791), uint16(0xfffe))
	f.Fuzz(func(t *testing.T, ibp []byte, id, port, hint uint16) {
		if len(ibp) < BTHLen || len(ibp) > 9000 {
			return
		}
		src, dst := netip.AddrPortFrom(netip.MustParseAddr("10.1.2.3"), port), netip.MustParseAddr("10.3.2.1")
		b := append(append([]byte(nil), ibp...), 0, 0, 0, 0)
		hdr, err := AppendIPUDPHeaders(nil, src.Addr(), dst, port, UDPPort, 64, len(b))
		if err != nil {
			t.Fatal(err)
		}
		binary.BigEndian.PutUint16(hdr[4:6], id)
		crc, err := ICRC(hdr[:IPv4HeaderLen], hdr[IPv4HeaderLen:], ibp)
		if err != nil {
			t.Fatal(err)
		}
		PutICRC(b[len(b)-ICRCLen:], crc)
		if got, ok := CheckDatagramICRC(b, src, dst, UDPPort, hint); !ok || got != id {
			t.Fatalf("ID %#x, hint %#x: got %#x, %v", id, hint, got, ok)
		}
	})
}

var errNoSolution = errors.New("no ID")

// solveID is CheckDatagramICRC's answer as an error, for table tests.
func solveID(b []byte, src netip.AddrPort, dst netip.Addr, hint uint16) (uint16, error) {
	id, ok := CheckDatagramICRC(b, src, dst, UDPPort, hint)
	if !ok {
		return 0, errNoSolution
	}
	return id, nil
}
