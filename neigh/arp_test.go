package neigh

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// ARP goldens, written from spec §3.
var arpGoldens = []struct {
	name string
	wire string
	arp  ARP
}{
	{
		name: "request A→B",
		wire: `00 20        # hardware type 32 (InfiniBand)
		       08 00        # protocol type IPv4
		       14           # hardware address length 20
		       04           # protocol address length 4
		       00 01        # opcode: request
		       ` + wireA + ` # sender hardware address
		       c0 a8 64 01  # sender protocol address 192.168.100.1
		       ` + wireZero + ` # target hardware address: unknown
		       c0 a8 64 02  # target protocol address 192.168.100.2`,
		arp: ARP{Op: ARPRequest, SenderHW: hwA, SenderIP: ip4A, TargetIP: ip4B},
	},
	{
		name: "reply B→A",
		wire: `00 20 | 08 00 | 14 | 04
		       00 02        # opcode: reply
		       ` + wireB + ` # sender hardware address
		       c0 a8 64 02  # sender protocol address 192.168.100.2
		       ` + wireA + ` # target hardware address
		       c0 a8 64 01  # target protocol address 192.168.100.1`,
		arp: ARP{Op: ARPReply, SenderHW: hwB, SenderIP: ip4B, TargetHW: hwA, TargetIP: ip4A},
	},
	{
		name: "gratuitous request",
		wire: `00 20 | 08 00 | 14 | 04 | 00 01
		       ` + wireA + ` | c0 a8 64 01
		       ` + wireZero + ` | c0 a8 64 01`,
		arp: ARP{Op: ARPRequest, SenderHW: hwA, SenderIP: ip4A, TargetIP: ip4A},
	},
	{
		name: "reply from a host on two ports",
		wire: `00 20 | 08 00 | 14 | 04 | 00 02
		       ` + wireA + ` | c0 a8 64 01
		       ` + wireB + ` | c0 a8 64 02
		       49 50 44 01  # sibling trailer: "IPD", version 1
		       ` + wireB + ` # the sender's other port`,
		arp: ARP{Op: ARPReply, SenderHW: hwA, SenderIP: ip4A, TargetHW: hwB, TargetIP: ip4B, Sibling: hwB, HasSibling: true},
	},
}

func TestARPGolden(t *testing.T) {
	for _, tt := range arpGoldens {
		wire := testutil.Unhex(t, tt.wire)
		if len(wire) != tt.arp.Len() {
			t.Fatalf("%s: golden is %d octets", tt.name, len(wire))
		}
		got, err := DecodeARP(wire)
		if err != nil || got != tt.arp {
			t.Errorf("%s: decoded %+v, %v, want %+v", tt.name, got, err, tt.arp)
		}
		b := bytes.Repeat([]byte{0xa5}, tt.arp.Len())
		if err := tt.arp.Encode(b); err != nil || !bytes.Equal(b, wire) {
			t.Errorf("%s: encoded\n% x, %v, want\n% x", tt.name, b, err, wire)
		}
		// Trailing octets (receive padding) are ignored.
		if got, err := DecodeARP(append(bytes.Clone(wire), 0, 0, 0, 0)); err != nil || got != tt.arp {
			t.Errorf("%s with trailer: decoded %+v, %v", tt.name, got, err)
		}
		// A trailer without the tag is padding, not a sibling.
		if !tt.arp.HasSibling {
			padded := append(bytes.Clone(wire), bytes.Repeat([]byte{0x49}, ARPSiblingLen)...)
			if got, err := DecodeARP(padded); err != nil || got != tt.arp {
				t.Errorf("%s with untagged padding: decoded %+v, %v", tt.name, got, err)
			}
		}
		// Reserved link-address flag bits are ignored.
		wire[8] |= 0x3f
		wire[32] |= 0x3f
		if got, err := DecodeARP(wire); err != nil || got != tt.arp {
			t.Errorf("%s with reserved flags: decoded %+v, %v", tt.name, got, err)
		}
	}
}

func TestDecodeARPErrors(t *testing.T) {
	golden := testutil.Unhex(t, arpGoldens[0].wire)
	tests := []struct {
		name  string
		in    []byte
		field string
	}{
		{"empty", nil, "hardware type"},
		{"1 octet", golden[:1], "hardware type"},
		{"3 octets", golden[:3], "protocol type"},
		{"7 octets", golden[:7], "opcode"},
		{"8 octets", golden[:8], "sender hardware address"},
		{"30 octets", golden[:30], "sender protocol address"},
		{"40 octets", golden[:40], "target hardware address"},
		{"55 octets", golden[:55], "target protocol address"},
		{"Ethernet", patched(golden, 0, 0x00, 0x01), "hardware type"},
		{"IEEE 802", patched(golden, 0, 0x00, 0x06), "hardware type"},
		{"IPv6 protocol", patched(golden, 2, 0x86, 0xdd), "protocol type"},
		{"hlen 6", patched(golden, 4, 6), "hardware address length"},
		{"plen 16", patched(golden, 5, 16), "protocol address length"},
		{"opcode 0", patched(golden, 6, 0, 0), "opcode"},
		{"opcode 3 (RARP)", patched(golden, 6, 0, 3), "opcode"},
		{"opcode 0x0101", patched(golden, 6, 1, 1), "opcode"},
		// An Ethernet ARP is reported by its hardware type, not as short.
		{"Ethernet ARP", testutil.Unhex(t, "0001 0800 06 04 0001 020000000001 c0a86401 000000000000 c0a86402"), "hardware type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := DecodeARP(tt.in)
			if a != (ARP{}) {
				t.Errorf("returned %+v with the error", a)
			}
			testutil.WantField(t, err, "ARP", tt.field)
		})
	}
}

func TestEncodeARPErrors(t *testing.T) {
	good := arpGoldens[1].arp
	tests := []struct {
		name  string
		edit  func(*ARP)
		n     int
		field string
	}{
		{"short buffer", func(*ARP) {}, ARPLen - 1, "buffer"},
		{"opcode 0", func(a *ARP) { a.Op = 0 }, ARPLen, "opcode"},
		{"opcode 4", func(a *ARP) { a.Op = 4 }, ARPLen, "opcode"},
		{"sender QPN", func(a *ARP) { a.SenderHW.QPN = 1 << 24 }, ARPLen, "sender hardware address"},
		{"target QPN", func(a *ARP) { a.TargetHW.QPN = 0xffffffff }, ARPLen, "target hardware address"},
		{"sender IPv6", func(a *ARP) { a.SenderIP = llA }, ARPLen, "sender protocol address"},
		{"sender 4in6", func(a *ARP) { a.SenderIP = netip.AddrFrom16(ip4A.As16()) }, ARPLen, "sender protocol address"},
		{"target zero", func(a *ARP) { a.TargetIP = netip.Addr{} }, ARPLen, "target protocol address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := good
			tt.edit(&a)
			b := bytes.Repeat([]byte{0xa5}, tt.n)
			testutil.WantField(t, a.Encode(b), "ARP", tt.field)
			if !bytes.Equal(b, bytes.Repeat([]byte{0xa5}, tt.n)) {
				t.Errorf("a failed Encode wrote % x", b)
			}
		})
	}
	// Reserved flag bits are not sent.
	a := good
	a.SenderHW.Flags = 0xff
	var b [ARPLen]byte
	if err := a.Encode(b[:]); err != nil || b[8] != byte(ib.FlagRC|ib.FlagUC) {
		t.Errorf("flags 0xff encoded as %#02x, %v", b[8], err)
	}
}

func TestARPAllocs(t *testing.T) {
	a := arpGoldens[1].arp
	var b [ARPLen]byte
	if n := testing.AllocsPerRun(100, func() {
		_ = a.Encode(b[:])
		_, _ = DecodeARP(b[:])
	}); n != 0 {
		t.Errorf("%v allocations per ARP round trip, want 0", n)
	}
}
