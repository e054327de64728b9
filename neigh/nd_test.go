package neigh

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// ND goldens: whole IPv6 packets written from RFC 4861 §4.3/§4.4 and spec
// §4. Their checksums were computed outside this code and are verified by
// wordSum in TestNDGolden (and by tshark in TestTsharkDecodesOurPackets).
var ndGoldens = []struct {
	name     string
	wire     string
	src, dst netip.Addr
	msg      NeighborMessage
}{
	{
		name: "NS A→B with source LLA",
		wire: `60 00 00 00  # version 6, traffic class 0, flow label 0
		       00 30        # payload length 48
		       3a           # next header 58 (ICMPv6)
		       ff           # hop limit 255
		       fe80 0000 0000 0000 0202 c903 000a bcde # source fe80::202:c903:a:bcde
		       ff02 0000 0000 0000 0000 0001 ff0b 1234 # destination ff02::1:ff0b:1234
		       87           # type 135 (NS)
		       00           # code 0
		       00 61        # checksum
		       00 00 00 00  # reserved
		       fe80 0000 0000 0000 0202 c903 000b 1234 # target fe80::202:c903:b:1234
		       01           # option 1: source link-layer address
		       03           # length 3 (24 octets)
		       00 00        # pad
		       ` + wireA,
		src: llA, dst: snB,
		msg: NeighborMessage{Type: TypeNeighborSolicitation, Target: llB, LinkAddr: hwA, HasLinkAddr: true},
	},
	{
		name: "NA B→A, S+O, with target LLA",
		wire: `60 00 00 00 | 00 30 | 3a | ff
		       fe80 0000 0000 0000 0202 c903 000b 1234 # source fe80::202:c903:b:1234
		       fe80 0000 0000 0000 0202 c903 000a bcde # destination fe80::202:c903:a:bcde
		       88           # type 136 (NA)
		       00           # code 0
		       f9 c6        # checksum
		       60 00 00 00  # flags R=0 S=1 O=1, reserved
		       fe80 0000 0000 0000 0202 c903 000b 1234 # target
		       02           # option 2: target link-layer address
		       03           # length 3
		       00 00        # pad
		       ` + wireB,
		src: llB, dst: llA,
		msg: NeighborMessage{Type: TypeNeighborAdvertisement, Solicited: true, Override: true, Target: llB, LinkAddr: hwB, HasLinkAddr: true},
	},
	{
		name: "DAD NS",
		wire: `60 00 00 00 | 00 18 | 3a | ff  # payload length 24
		       0000 0000 0000 0000 0000 0000 0000 0000 # source :: (unspecified)
		       ff02 0000 0000 0000 0000 0001 ff0b 1234 # destination
		       87 | 00 | 8c a3 | 00 00 00 00
		       fe80 0000 0000 0000 0202 c903 000b 1234 # target, no option`,
		src: unspecified, dst: snB,
		msg: NeighborMessage{Type: TypeNeighborSolicitation, Target: llB},
	},
	{
		name: "unsolicited NA to all nodes, O",
		wire: `60 00 00 00 | 00 30 | 3a | ff
		       fe80 0000 0000 0000 0202 c903 000b 1234 # source
		       ff02 0000 0000 0000 0000 0000 0000 0001 # destination ff02::1
		       88 | 00 | c1 32
		       20 00 00 00  # flags R=0 S=0 O=1
		       fe80 0000 0000 0000 0202 c903 000b 1234
		       02 | 03 | 00 00 | ` + wireB,
		src: llB, dst: allNodes,
		msg: NeighborMessage{Type: TypeNeighborAdvertisement, Override: true, Target: llB, LinkAddr: hwB, HasLinkAddr: true},
	},
	{
		name: "unsolicited NA after a restart, naming the replaced link address",
		wire: `60 00 00 00 | 00 48 | 3a | ff  # payload length 72
		       fe80 0000 0000 0000 0202 c903 000b 1234 # source
		       ff02 0000 0000 0000 0000 0000 0000 0001 # destination ff02::1
		       88 | 00 | bf 5e
		       20 00 00 00  # flags O
		       fe80 0000 0000 0000 0202 c903 000b 1234
		       02 | 03 | 00 00 | ` + wireB + `
		       fd           # option 253 (RFC 4727 experimental): the replaced link address
		       03 | 00 00 | ` + wireA,
		src: llB, dst: allNodes,
		msg: NeighborMessage{Type: TypeNeighborAdvertisement, Override: true, Target: llB, LinkAddr: hwB, HasLinkAddr: true,
			Replaces: hwA, HasReplaces: true},
	},
	{
		name: "NS from a host on two ports, naming its other port",
		wire: `60 00 00 00 | 00 48 | 3a | ff
		       fe80 0000 0000 0000 0202 c903 000a bcde # source
		       ff02 0000 0000 0000 0000 0001 ff0b 1234 # destination
		       87 | 00 | 24 75 | 00 00 00 00
		       fe80 0000 0000 0000 0202 c903 000b 1234 # target
		       01 | 03 | 00 00 | ` + wireA + `
		       fe           # option 254 (RFC 4727 experimental): the sender's other port
		       03 | 00 00 | ` + wireB,
		src: llA, dst: snB,
		msg: NeighborMessage{Type: TypeNeighborSolicitation, Target: llB, LinkAddr: hwA, HasLinkAddr: true,
			Sibling: hwB, HasSibling: true},
	},
	{
		name: "failover NA: the port left and the one that would take over now",
		wire: `60 00 00 00 | 00 60 | 3a | ff
		       fe80 0000 0000 0000 0202 c903 000b 1234 # source
		       ff02 0000 0000 0000 0000 0000 0000 0001 # destination ff02::1
		       88 | 00 | bc 8a
		       20 00 00 00  # flags O
		       fe80 0000 0000 0000 0202 c903 000b 1234
		       02 | 03 | 00 00 | ` + wireB + `
		       fd | 03 | 00 00 | ` + wireA + `
		       fe | 03 | 00 00 | ` + wireA,
		src: llB, dst: allNodes,
		msg: NeighborMessage{Type: TypeNeighborAdvertisement, Override: true, Target: llB, LinkAddr: hwB, HasLinkAddr: true,
			Replaces: hwA, HasReplaces: true, Sibling: hwA, HasSibling: true},
	},
}

func TestNDGolden(t *testing.T) {
	for _, tt := range ndGoldens {
		t.Run(tt.name, func(t *testing.T) {
			wire := testutil.Unhex(t, tt.wire)
			icmp := wire[IPv6HeaderLen:]
			if s := wordSum(tt.src, tt.dst, icmp); s != 0xffff {
				t.Fatalf("golden checksum is wrong: independent sum %#04x", s)
			}
			if want := binary.BigEndian.Uint16(icmp[2:4]); ICMPv6Checksum(tt.src, tt.dst, icmp) != want {
				t.Errorf("ICMPv6Checksum = %#04x, want %#04x", ICMPv6Checksum(tt.src, tt.dst, icmp), want)
			}

			got, err := DecodeNeighborMessage(icmp, tt.src, tt.dst)
			if err != nil || got != tt.msg {
				t.Errorf("DecodeNeighborMessage = %+v, %v, want %+v", got, err, tt.msg)
			}
			src, dst, got, err := DecodeIPv6ND(wire)
			if err != nil || got != tt.msg || src != tt.src || dst != tt.dst {
				t.Errorf("DecodeIPv6ND = %v %v %+v, %v", src, dst, got, err)
			}

			b := bytes.Repeat([]byte{0xa5}, NDMaxLen+8)
			n, err := tt.msg.Encode(b, tt.src, tt.dst)
			if err != nil || n != tt.msg.Len() || !bytes.Equal(b[:n], icmp) {
				t.Errorf("Encode = %d, %v:\n% x, want\n% x", n, err, b[:n], icmp)
			}
			b = bytes.Repeat([]byte{0xa5}, IPv6HeaderLen+NDMaxLen+8)
			n, err = tt.msg.EncodeIPv6(b, tt.src, tt.dst)
			if err != nil || !bytes.Equal(b[:n], wire) {
				t.Errorf("EncodeIPv6 = %d, %v:\n% x, want\n% x", n, err, b[:n], wire)
			}
		})
	}
}

// options rebuilds the NS golden (A→B) with other options and a fresh
// checksum.
func nsWithOptions(t *testing.T, opts ...string) []byte {
	t.Helper()
	msg := testutil.Unhex(t, "87 00 0000 00000000 fe80 0000 0000 0000 0202 c903 000b 1234")
	for _, o := range opts {
		msg = append(msg, testutil.Unhex(t, o)...)
	}
	return fixSum(llA, snB, msg)
}

func naWithOptions(t *testing.T, flags byte, opts ...string) []byte {
	t.Helper()
	msg := testutil.Unhex(t, "88 00 0000 00000000 fe80 0000 0000 0000 0202 c903 000b 1234")
	msg[4] = flags
	for _, o := range opts {
		msg = append(msg, testutil.Unhex(t, o)...)
	}
	return fixSum(llB, llA, msg)
}

// Option handling follows Linux ndisc_parse_options/ndisc_opt_addr_data.
func TestNDOptions(t *testing.T) {
	const (
		slla       = "01 03 0000 " + wireA
		sllaB      = "01 03 0000 " + wireB
		tlla       = "02 03 0000 " + wireB
		ethSLLA    = "01 01 020000000001"  // an Ethernet-sized option
		nonce      = "0e 01 010203040506"  // RFC 3971 nonce: unknown here
		mtu        = "05 01 0000 00000800" // MTU option
		bigUnknown = "fe 02 0000000000000000000000000000"
		replaced   = "fd 03 0000 " + wireA
		sibling    = "fe 03 0000 " + wireB
	)
	ns := NeighborMessage{Type: TypeNeighborSolicitation, Target: llB}
	nsA := ns
	nsA.LinkAddr, nsA.HasLinkAddr = hwA, true
	na := NeighborMessage{Type: TypeNeighborAdvertisement, Target: llB}
	naB := na
	naB.LinkAddr, naB.HasLinkAddr = hwB, true
	naBReplacing := naB
	naBReplacing.Replaces, naBReplacing.HasReplaces = hwA, true
	nsASibling := nsA
	nsASibling.Sibling, nsASibling.HasSibling = hwB, true
	naBSibling := naB
	naBSibling.Sibling, naBSibling.HasSibling = hwB, true
	tests := []struct {
		name string
		msg  []byte
		src  netip.Addr
		dst  netip.Addr
		want NeighborMessage
	}{
		{"NS no options", nsWithOptions(t), llA, snB, ns},
		{"NS unknown options skipped", nsWithOptions(t, nonce, bigUnknown, slla, mtu), llA, snB, nsA},
		{"NS target LLA ignored", nsWithOptions(t, tlla), llA, snB, ns},
		{"NS target LLA then source LLA", nsWithOptions(t, tlla, slla), llA, snB, nsA},
		{"NS length-1 LLA ignored", nsWithOptions(t, ethSLLA), llA, snB, ns},
		{"NS first source LLA wins", nsWithOptions(t, slla, sllaB), llA, snB, nsA},
		{"NS first source LLA wins even when ignored", nsWithOptions(t, ethSLLA, slla), llA, snB, ns},
		{"NS pad not looked at", nsWithOptions(t, "01 03 ffff "+wireA), llA, snB, nsA},
		{"NS reserved ignored", func() []byte { b := nsWithOptions(t, slla); b[4] = 0xe0; return fixSum(llA, snB, b) }(), llA, snB, nsA},
		{"NA no options", naWithOptions(t, 0), llB, llA, na},
		{"NA source LLA ignored", naWithOptions(t, 0, slla), llB, llA, na},
		{"NA unknown then target LLA", naWithOptions(t, 0, mtu, tlla), llB, llA, naB},
		{"NA reserved flag bits ignored", naWithOptions(t, 0x1f), llB, llA, na},
		{"NA R", naWithOptions(t, 0x80), llB, llA, NeighborMessage{Type: TypeNeighborAdvertisement, Router: true, Target: llB}},
		{"NA replaced LLA", naWithOptions(t, 0, tlla, replaced), llB, llA, naBReplacing},
		{"NA replaced LLA first, then target LLA", naWithOptions(t, 0, replaced, tlla), llB, llA, naBReplacing},
		{"NA first replaced LLA wins", naWithOptions(t, 0, tlla, replaced, "fd 03 0000 "+wireB), llB, llA, naBReplacing},
		{"NS sibling", nsWithOptions(t, slla, sibling), llA, snB, nsASibling},
		{"NA sibling", naWithOptions(t, 0, tlla, sibling), llB, llA, naBSibling},
		{"NA first sibling wins", naWithOptions(t, 0, sibling, "fe 03 0000 "+wireA, tlla), llB, llA, naBSibling},
		{"NA short sibling ignored", naWithOptions(t, 0, tlla, bigUnknown), llB, llA, naB},
		{"NA replaced LLA of length 1 ignored", naWithOptions(t, 0, tlla, "fd 01 020000000001"), llB, llA, naB},
		{"NS replaced LLA ignored", nsWithOptions(t, replaced, slla), llA, snB, nsA},
		{"NA R+S+O", naWithOptions(t, 0xff, tlla), llB, llA, NeighborMessage{Type: TypeNeighborAdvertisement, Router: true, Solicited: true, Override: true, Target: llB, LinkAddr: hwB, HasLinkAddr: true}},
		// A DAD NS whose LLA option has the wrong size carries no
		// address as far as Linux is concerned, so it is not dropped.
		{"DAD NS with length-1 LLA", fixSum(unspecified, snB, nsWithOptions(t, ethSLLA)), unspecified, snB, ns},
	}
	for _, tt := range tests {
		got, err := DecodeNeighborMessage(tt.msg, tt.src, tt.dst)
		if err != nil || got != tt.want {
			t.Errorf("%s: decoded %+v, %v, want %+v", tt.name, got, err, tt.want)
		}
	}
}

func TestDecodeNeighborMessageErrors(t *testing.T) {
	golden := testutil.Unhex(t, ndGoldens[0].wire)[IPv6HeaderLen:]
	edit := func(f func([]byte) []byte) []byte { return fixSum(llA, snB, f(bytes.Clone(golden))) }
	tests := []struct {
		name     string
		msg      []byte
		src, dst netip.Addr
		field    string
	}{
		{"empty", nil, llA, snB, "length"},
		{"3 octets", golden[:3], llA, snB, "length"},
		{"23 octets", golden[:23], llA, snB, "length"},
		{"echo request", edit(func(b []byte) []byte { b[0] = 128; return b }), llA, snB, "type"},
		{"router solicitation", edit(func(b []byte) []byte { b[0] = 133; return b }), llA, snB, "type"},
		{"code 1", edit(func(b []byte) []byte { b[1] = 1; return b }), llA, snB, "code"},
		{"bad checksum", func() []byte { b := bytes.Clone(golden); b[3] ^= 1; return b }(), llA, snB, "checksum"},
		{"other source", golden, llB, snB, "checksum"},
		{"other destination", golden, llA, allNodes, "checksum"},
		{"truncated option", golden[:len(golden)-1], llA, snB, "checksum"}, // the sum covers the message: checked first
		{"source IPv4", golden, ip4A, snB, "source address"},
		{"destination invalid", golden, llA, netip.Addr{}, "destination address"},
		{"option length 0", nsWithOptions(t, "01 00 0000 "+wireA), llA, snB, "option length"},
		{"option past the end", nsWithOptions(t, "01 04 0000 "+wireA), llA, snB, "option length"},
		{"lone option octet", nsWithOptions(t, "01 03 0000 "+wireA, "01"), llA, snB, "option length"},
		{"option cut after length", nsWithOptions(t, "01 03 0000 "+wireA, "01 03 0000"), llA, snB, "option length"},
		{"unknown option length 0", nsWithOptions(t, "0e 00"), llA, snB, "option length"},
		{"multicast target", edit(func(b []byte) []byte { b[8] = 0xff; return b }), llA, snB, "target"},
		{"multicast source", fixSum(allNodes, snB, bytes.Clone(golden)), allNodes, snB, "source address"},
		{"DAD with source LLA", fixSum(unspecified, snB, bytes.Clone(golden)), unspecified, snB, "link-layer address option"},
		{"DAD to all nodes", fixSum(unspecified, allNodes, nsWithOptions(t)), unspecified, allNodes, "destination address"},
		{"DAD to unicast", fixSum(unspecified, llB, nsWithOptions(t)), unspecified, llB, "destination address"},
		{"solicited NA to multicast", fixSum(llB, allNodes, naWithOptions(t, 0x40)), llB, allNodes, "flags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeNeighborMessage(tt.msg, tt.src, tt.dst)
			if m != (NeighborMessage{}) {
				t.Errorf("returned %+v with the error", m)
			}
			testutil.WantField(t, err, "ICMPv6 ND", tt.field)
		})
	}
}

func TestDecodeIPv6NDErrors(t *testing.T) {
	golden := testutil.Unhex(t, ndGoldens[0].wire)
	tests := []struct {
		name   string
		in     []byte
		format string
		field  string
	}{
		{"empty", nil, "IPv6", "header"},
		{"39 octets", golden[:39], "IPv6", "header"},
		{"version 4", patched(golden, 0, 0x45), "IPv6", "version"},
		{"hop-by-hop header", patched(golden, 6, 0), "IPv6", "next header"},
		{"UDP", patched(golden, 6, 17), "IPv6", "next header"},
		{"hop limit 64", patched(golden, 7, 64), "IPv6", "hop limit"},
		{"hop limit 254 (forwarded once)", patched(golden, 7, 254), "IPv6", "hop limit"},
		{"payload length past the end", patched(golden, 4, 0, 49), "IPv6", "payload length"},
		{"truncated payload", golden[:len(golden)-1], "IPv6", "payload length"},
		{"payload length cuts the option", patched(golden, 4, 0, 47), "ICMPv6 ND", "checksum"},
		{"payload length 0", patched(golden, 4, 0, 0), "ICMPv6 ND", "length"},
		{"bad checksum", patched(golden, 42, 0x00, 0x62), "ICMPv6 ND", "checksum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, dst, m, err := DecodeIPv6ND(tt.in)
			if m != (NeighborMessage{}) || src.IsValid() || dst.IsValid() {
				t.Errorf("returned %v %v %+v with the error", src, dst, m)
			}
			testutil.WantField(t, err, tt.format, tt.field)
		})
	}
	// Traffic class, flow label and octets past the payload are ignored.
	b := patched(golden, 0, 0x6f, 0xff, 0xff, 0xff)
	b = append(b, 0xde, 0xad)
	if _, _, m, err := DecodeIPv6ND(b); err != nil || m != ndGoldens[0].msg {
		t.Errorf("with traffic class, flow label and trailer: %+v, %v", m, err)
	}
}

func TestEncodeNDErrors(t *testing.T) {
	ns := ndGoldens[0].msg
	na := ndGoldens[1].msg
	tests := []struct {
		name     string
		msg      NeighborMessage
		src, dst netip.Addr
		n        int
		field    string
	}{
		{"type 0", NeighborMessage{Target: llB}, llA, snB, NDMaxLen, "type"},
		{"type 134", NeighborMessage{Type: 134, Target: llB}, llA, snB, NDMaxLen, "type"},
		{"NS with S flag", func() NeighborMessage { m := ns; m.Solicited = true; return m }(), llA, snB, NDMaxLen, "flags"},
		{"NS with R flag", func() NeighborMessage { m := ns; m.Router = true; return m }(), llA, snB, NDMaxLen, "flags"},
		{"IPv4 target", func() NeighborMessage { m := ns; m.Target = ip4B; return m }(), llA, snB, NDMaxLen, "target"},
		{"no target", func() NeighborMessage { m := ns; m.Target = netip.Addr{}; return m }(), llA, snB, NDMaxLen, "target"},
		{"multicast target", func() NeighborMessage { m := ns; m.Target = snB; return m }(), llA, snB, NDMaxLen, "target"},
		{"QPN", func() NeighborMessage { m := ns; m.LinkAddr.QPN = 1 << 24; return m }(), llA, snB, NDMaxLen, "link-layer address option"},
		{"short buffer", ns, llA, snB, NDHeaderLen + LinkAddrOptLen - 1, "buffer"},
		{"short buffer, two options", ndGoldens[4].msg, llB, allNodes, NDHeaderLen + 2*LinkAddrOptLen - 1, "buffer"},
		{"replaced LLA in an NS", func() NeighborMessage { m := ns; m.Replaces, m.HasReplaces = hwB, true; return m }(), llA, snB, NDMaxLen, "replaced link-layer address option"},
		{"replaced LLA's QPN", func() NeighborMessage { m := na; m.Replaces, m.HasReplaces = ib.LinkAddr{QPN: 1 << 24}, true; return m }(), llB, llA, NDMaxLen, "replaced link-layer address option"},
		{"sibling's QPN", func() NeighborMessage { m := na; m.Sibling, m.HasSibling = ib.LinkAddr{QPN: 1 << 24}, true; return m }(), llB, llA, NDMaxLen, "sibling link-layer address option"},
		{"short buffer, no option", NeighborMessage{Type: TypeNeighborSolicitation, Target: llB}, llA, snB, NDHeaderLen - 1, "buffer"},
		{"IPv4 source", ns, ip4A, snB, NDMaxLen, "source address"},
		{"multicast source", ns, allNodes, snB, NDMaxLen, "source address"},
		{"IPv4 destination", ns, llA, ip4B, NDMaxLen, "destination address"},
		{"DAD with LLA", ns, unspecified, snB, NDMaxLen, "link-layer address option"},
		{"DAD to all nodes", NeighborMessage{Type: TypeNeighborSolicitation, Target: llB}, unspecified, allNodes, NDMaxLen, "destination address"},
		{"solicited NA to all nodes", na, llB, allNodes, NDMaxLen, "flags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bytes.Repeat([]byte{0xa5}, tt.n)
			n, err := tt.msg.Encode(b, tt.src, tt.dst)
			if n != 0 {
				t.Errorf("Encode returned %d with the error", n)
			}
			testutil.WantField(t, err, "ICMPv6 ND", tt.field)
			if !bytes.Equal(b, bytes.Repeat([]byte{0xa5}, tt.n)) {
				t.Errorf("a failed Encode wrote % x", b)
			}
			// EncodeIPv6 reports the same, and writes no header either.
			b = bytes.Repeat([]byte{0xa5}, IPv6HeaderLen+tt.n)
			if _, err := tt.msg.EncodeIPv6(b, tt.src, tt.dst); err == nil {
				t.Errorf("EncodeIPv6 accepted it")
			}
			if !bytes.Equal(b, bytes.Repeat([]byte{0xa5}, IPv6HeaderLen+tt.n)) {
				t.Errorf("a failed EncodeIPv6 wrote % x", b)
			}
		})
	}
	_, err := ns.EncodeIPv6(make([]byte, IPv6HeaderLen+ns.Len()-1), llA, snB)
	testutil.WantField(t, err, "IPv6", "buffer")
	// LinkAddr is not looked at without HasLinkAddr.
	m := NeighborMessage{Type: TypeNeighborSolicitation, Target: llB, LinkAddr: ib.LinkAddr{QPN: 1 << 30}}
	if n, err := m.Encode(make([]byte, NDHeaderLen), llA, snB); err != nil || n != NDHeaderLen {
		t.Errorf("Encode without option = %d, %v", n, err)
	}
}

func TestSolicitedNode(t *testing.T) {
	tests := []struct{ addr, want string }{
		{"fe80::202:c903:b:1234", "ff02::1:ff0b:1234"},
		{"2001:db8::1", "ff02::1:ff00:1"},
		{"fe80::2:c903:aabb:ccdd", "ff02::1:ffbb:ccdd"},
		{"::", "ff02::1:ff00:0"},
	}
	for _, tt := range tests {
		got := SolicitedNode(netip.MustParseAddr(tt.addr))
		if got != netip.MustParseAddr(tt.want) {
			t.Errorf("SolicitedNode(%s) = %v, want %s", tt.addr, got, tt.want)
		}
		if !isSolicitedNode(got) {
			t.Errorf("isSolicitedNode(%v) = false", got)
		}
	}
	if got := SolicitedNode(ip4A); got.IsValid() {
		t.Errorf("SolicitedNode(IPv4) = %v, want the zero Addr", got)
	}
	for _, a := range []string{"ff02::1", "ff02::1:fe00:1", "ff05::1:ff00:1", "fe80::1:ff00:1", "255.255.255.255"} {
		if isSolicitedNode(netip.MustParseAddr(a)) {
			t.Errorf("isSolicitedNode(%s) = true", a)
		}
	}
}

func TestNDAllocs(t *testing.T) {
	for _, g := range ndGoldens {
		m := g.msg
		var b [IPv6HeaderLen + NDMaxLen]byte
		if n := testing.AllocsPerRun(100, func() {
			n, _ := m.Encode(b[:], g.src, g.dst)
			_, _ = DecodeNeighborMessage(b[:n], g.src, g.dst)
			n, _ = m.EncodeIPv6(b[:], g.src, g.dst)
			_, _, _, _ = DecodeIPv6ND(b[:n])
		}); n != 0 {
			t.Errorf("%s: %v allocations per ND round trip, want 0", g.name, n)
		}
	}
}
