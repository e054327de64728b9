package neigh

import (
	"bytes"
	"encoding/binary"
	"net/netip"

	"github.com/ipoibd/ipoibd/ib"
)

// wordSum is an independent ICMPv6 checksum for the tests: it lays out the
// RFC 8200 §8.1 pseudo-header octet by octet and adds 16-bit words one at
// a time, so that it shares no code with ICMPv6Checksum. It returns the
// folded sum over pseudo-header and msg as they are: 0xffff when msg
// carries a right checksum.
func wordSum(src, dst netip.Addr, msg []byte) uint16 {
	s, d := src.As16(), dst.As16()
	var ph []byte
	ph = append(ph, s[:]...)
	ph = append(ph, d[:]...)
	ph = binary.BigEndian.AppendUint32(ph, uint32(len(msg)))
	ph = append(ph, 0, 0, 0, 58)
	all := append(ph, msg...)
	if len(all)%2 == 1 {
		all = append(all, 0)
	}
	var sum uint32
	for i := 0; i < len(all); i += 2 {
		sum += uint32(all[i])<<8 | uint32(all[i+1])
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

// fixSum rewrites msg's checksum with wordSum, for tests that change a
// golden message on purpose.
func fixSum(src, dst netip.Addr, msg []byte) []byte {
	msg[2], msg[3] = 0, 0
	binary.BigEndian.PutUint16(msg[2:4], ^wordSum(src, dst, msg))
	return msg
}

// patched returns a copy of golden with v written at off: a vector with
// one field broken.
func patched(golden []byte, off int, v ...byte) []byte {
	b := bytes.Clone(golden)
	copy(b[off:], v)
	return b
}

// The two hosts of every golden vector. A is a Linux node with connected
// mode (flags 0x80), B a datagram-only node (flags 0x00).
var (
	hwA = ib.LinkAddr{Flags: ib.FlagRC, QPN: 0x000048, GID: ib.GID(netip.MustParseAddr("fe80::2:c903:a:bcde").As16())}
	hwB = ib.LinkAddr{Flags: 0, QPN: 0x00040a, GID: ib.GID(netip.MustParseAddr("fe80::2:c903:b:1234").As16())}

	ip4A = netip.MustParseAddr("192.168.100.1")
	ip4B = netip.MustParseAddr("192.168.100.2")

	// Link-local addresses as Linux forms them from the port GUID (spec
	// §2: GID octets 12-19 with 0x02 set in the first).
	llA = netip.MustParseAddr("fe80::202:c903:a:bcde")
	llB = netip.MustParseAddr("fe80::202:c903:b:1234")
	snB = netip.MustParseAddr("ff02::1:ff0b:1234") // B's solicited-node group

	allNodes    = netip.MustParseAddr("ff02::1")
	unspecified = netip.IPv6Unspecified()
)

// Link addresses in wire form: flags | QPN | GID.
const (
	wireA    = "80 | 00 00 48 | fe 80 00 00 00 00 00 00 00 02 c9 03 00 0a bc de"
	wireB    = "00 | 00 04 0a | fe 80 00 00 00 00 00 00 00 02 c9 03 00 0b 12 34"
	wireZero = "00 | 00 00 00 | 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
)
