package wire

import (
	"net/netip"
	"testing"
)

// pathICRC is the ICRC of ibp (ICRC slot excluded) behind the IP and UDP
// headers Linux writes, hashed whole: what a DatagramPath must give.
func pathICRC(t testing.TB, src, dst netip.Addr, srcPort, dstPort, id uint16, ibp []byte) (uint32, bool) {
	var h [IPv6HeaderLen + UDPHeaderLen]byte
	hdr, err := AppendIPUDPHeaders(h[:0], src, dst, srcPort, dstPort, 64, len(ibp)+ICRCLen)
	if err != nil {
		return 0, false
	}
	ipLen := len(hdr) - UDPHeaderLen
	if ipLen == IPv4HeaderLen {
		hdr[4], hdr[5] = byte(id>>8), byte(id)
	}
	crc, err := ICRC(hdr[:ipLen], hdr[ipLen:], ibp)
	if err != nil {
		t.Fatalf("ICRC of the whole headers: %v", err)
	}
	return crc, true
}

func TestDatagramPathMatchesWholeHeaders(t *testing.T) {
	v4a, v4b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.7")
	v6a, v6b := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("fd00:1:2:3::9")
	mapped := netip.MustParseAddr("::ffff:192.0.2.1")
	for _, tc := range []struct {
		name             string
		src, dst         netip.Addr
		srcPort, dstPort uint16
		id               uint16
		ibLen            int // BTH to ICRC inclusive
		ok               bool
	}{
		{"IPv4, an ACK", v4a, v4b, UDPPort, UDPPort, 0, BTHLen + AETHLen + ICRCLen, true},
		{"IPv4, a train's 37th packet", v4a, v4b, UDPPort, UDPPort, 36, BTHLen + 1464 + ICRCLen, true},
		{"IPv4, rxe's source port and an ID with both octets set", v4b, v4a, 49152 + 4711, UDPPort, 0xbeef, BTHLen + 4096 + ICRCLen, true},
		{"IPv4, the largest datagram", v4a, v4b, UDPPort, UDPPort, 0xffff, 0xffff - IPv4HeaderLen - UDPHeaderLen, true},
		{"IPv4, one octet too many", v4a, v4b, UDPPort, UDPPort, 0, 0xffff - IPv4HeaderLen - UDPHeaderLen + 1, false},
		{"IPv4-mapped source", mapped, v4b, UDPPort, UDPPort, 5, BTHLen + 100 + ICRCLen, true},
		{"IPv6", v6a, v6b, UDPPort, UDPPort, 0, BTHLen + 4096 + ICRCLen, true},
		{"IPv6, the ID does not count", v6a, v6b, UDPPort, UDPPort, 0x1234, BTHLen + 8 + ICRCLen, true},
		{"IPv6, the largest datagram", v6b, v6a, 50000, UDPPort, 0, 0xffff - UDPHeaderLen, true},
		{"IPv6, one octet too many", v6b, v6a, 50000, UDPPort, 0, 0xffff - UDPHeaderLen + 1, false},
		{"mixed families", v4a, v6b, UDPPort, UDPPort, 0, BTHLen + ICRCLen, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ibp := make([]byte, max(tc.ibLen-ICRCLen, BTHLen))
			for i := range ibp {
				ibp[i] = byte(i*7 + 3)
			}
			want, wantOK := pathICRC(t, tc.src, tc.dst, tc.srcPort, tc.dstPort, tc.id, ibp)
			p, ok := NewDatagramPath(tc.src, tc.dst, tc.srcPort, tc.dstPort)
			var d ICRCDigest
			if ok {
				d, ok = p.Start(tc.id, tc.ibLen)
			}
			if ok != tc.ok || wantOK != tc.ok {
				t.Fatalf("path ok %v, whole headers ok %v: want %v", ok, wantOK, tc.ok)
			}
			if !ok {
				return
			}
			d.Update(ibp)
			if d.Sum32() != want {
				t.Fatalf("ICRC from the path %08x, from the whole headers %08x", d.Sum32(), want)
			}
			// A receiver's check finds the packet good, and the ID it was sent with.
			pkt := append(ibp, 0, 0, 0, 0)
			PutICRC(pkt[len(pkt)-ICRCLen:], want)
			id, ok := p.Check(pkt, 0)
			if !ok || (p.v4 && id != tc.id) {
				t.Fatalf("Check: id %#x ok %v, want %#x true", id, ok, tc.id)
			}
		})
	}
}

func TestDatagramPathZeroValueStartsNothing(t *testing.T) {
	var p DatagramPath
	if _, ok := p.Start(0, BTHLen+ICRCLen); ok {
		t.Fatal("the zero DatagramPath started an ICRC")
	}
	if _, ok := p.Check(make([]byte, BTHLen+ICRCLen), 0); ok {
		t.Fatal("the zero DatagramPath passed a packet")
	}
}

func TestDatagramPathDoesNotAllocate(t *testing.T) {
	p, _ := NewDatagramPath(netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), UDPPort, UDPPort)
	pkt := make([]byte, BTHLen+1464+ICRCLen)
	if n := testing.AllocsPerRun(100, func() {
		d, _ := p.Start(3, len(pkt))
		d.Update(pkt[:len(pkt)-ICRCLen])
		p.Check(pkt, 0)
	}); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

func FuzzDatagramPath(f *testing.F) {
	f.Add([]byte{192, 0, 2, 1}, []byte{192, 0, 2, 2}, uint16(UDPPort), uint16(UDPPort), uint16(7), uint16(1500))
	f.Add(make([]byte, 16), []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, uint16(50000), uint16(UDPPort), uint16(0), uint16(65535))
	f.Fuzz(func(t *testing.T, s, d []byte, sp, dp, id, ibLen uint16) {
		src, ok1 := netip.AddrFromSlice(s)
		dst, ok2 := netip.AddrFromSlice(d)
		if !ok1 || !ok2 {
			return
		}
		ibp := make([]byte, max(int(ibLen)-ICRCLen, BTHLen))
		for i := range ibp {
			ibp[i] = byte(i) ^ byte(id)
		}
		want, wantOK := pathICRC(t, src, dst, sp, dp, id, ibp)
		p, ok := NewDatagramPath(src, dst, sp, dp)
		var dg ICRCDigest
		if ok {
			dg, ok = p.Start(id, len(ibp)+ICRCLen)
		}
		if ok != wantOK {
			t.Fatalf("path ok %v, whole headers ok %v", ok, wantOK)
		}
		if !ok {
			return
		}
		if dg.Update(ibp); dg.Sum32() != want {
			t.Fatalf("ICRC from the path %08x, from the whole headers %08x", dg.Sum32(), want)
		}
	})
}

// BenchmarkDatagramPathStart is the per-packet start of a kept path;
// BenchmarkStartDatagramICRC hashes the headers each time.
func BenchmarkDatagramPathStart(b *testing.B) {
	p, _ := NewDatagramPath(netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), UDPPort, UDPPort)
	var sink uint32
	for i := 0; b.Loop(); i++ {
		d, _ := p.Start(uint16(i), 1500)
		sink ^= d.Sum32()
	}
	_ = sink
}

func BenchmarkStartDatagramICRC(b *testing.B) {
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	var sink uint32
	for i := 0; b.Loop(); i++ {
		d, _ := StartDatagramICRC(src, dst, UDPPort, UDPPort, uint16(i), 1500)
		sink ^= d.Sum32()
	}
	_ = sink
}
