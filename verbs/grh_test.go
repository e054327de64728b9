package verbs

import (
	"encoding/binary"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// ipv4Header builds a 20-octet IPv4 header from src to dst with a valid
// checksum, as soft-RoCE copies it into the last 20 octets of the GRH area.
func ipv4Header(src, dst [4]byte) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], 20+8+12+4)
	h[8], h[9] = 64, 17 // TTL, UDP
	copy(h[12:16], src[:])
	copy(h[16:20], dst[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
	return h
}

// grh builds an IB GRH / IPv6 header from src to dst.
func grh(src, dst ib.GID) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	h[6], h[7] = 0x1b, 64
	copy(h[8:24], src[:])
	copy(h[24:40], dst[:])
	return h
}

func TestSrcGIDFromGRH(t *testing.T) {
	v4src := ib.GID{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1}
	ibsrc, _ := ib.ParseGID("fe80::2:c903:a:bcde")
	mgid, _ := ib.ParseGID("ff12:401b:ffff::ffff:ffff")

	roce4 := append(make([]byte, 20), ipv4Header([4]byte{192, 0, 2, 1}, [4]byte{192, 0, 2, 2})...)
	badSum := append([]byte(nil), roce4...)
	badSum[20+10] ^= 0xff
	// An IPv6 GRH whose last 20 octets happen to start with 0x45 still
	// reads as IPv6 unless they also carry a valid IPv4 checksum.
	lookalike := grh(ib.GID{15: 1}, ib.GID{4: 0x45})
	lookalikeSrc := ib.GID{15: 1}

	for _, c := range []struct {
		name string
		in   []byte
		want ib.GID
		ok   bool
	}{
		{"RoCEv2 over IPv4", roce4, v4src, true},
		{"InfiniBand GRH", grh(ibsrc, mgid), ibsrc, true},
		{"RoCEv2 over IPv6", grh(mgid, ibsrc), mgid, true},
		{"IPv6 look-alike", lookalike, lookalikeSrc, true},
		{"IPv4 with a bad checksum and no GRH", badSum, ib.GID{}, false},
		{"zeros", make([]byte, 40), ib.GID{}, false},
		{"short", grh(ibsrc, mgid)[:39], ib.GID{}, false},
		{"longer buffer", append(grh(ibsrc, mgid), "payload"...), ibsrc, true},
	} {
		got, ok := srcGIDFromGRH(c.in)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: got %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
