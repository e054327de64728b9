package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

func TestServiceID(t *testing.T) {
	tests := []struct {
		ps, port uint16
		want     uint64
	}{
		{psTCP, 7471, 0x0000000001061d2f}, // ucmatose's default port
		{psUDP, 1, 0x0000000001110001},
		{psIB, 0xffff, 0x00000000013fffff},
	}
	for _, tt := range tests {
		if got := serviceID(tt.ps, tt.port); got != tt.want {
			t.Errorf("serviceID(%#x, %d) = %#016x, want %#016x", tt.ps, tt.port, got, tt.want)
		}
		ps, port, ok := splitServiceID(tt.want)
		if !ok || ps != tt.ps || port != tt.port {
			t.Errorf("splitServiceID(%#016x) = %#x, %d, %v", tt.want, ps, port, ok)
		}
	}
	for _, sid := range []uint64{
		0x1000000000000123, // IPoIB connected mode (RFC 4755)
		0x0000000001020000, // port space 0x0102 does not exist
		0x0000000101061d2f, // something above the prefix
		0,
	} {
		if ps, port, ok := splitServiceID(sid); ok {
			t.Errorf("splitServiceID(%#016x) = %#x, %d, true; want not an rdma_cm service ID", sid, ps, port)
		}
	}
}

// The wire images are written out from struct cma_hdr (cma.c): version,
// IP version in the high nibble, the sender's port, then union cma_ip_addr
// twice (IPv4: 12 octets of padding, then the address).
func TestCMAHeaderWire(t *testing.T) {
	tests := []struct {
		name string
		h    cmaHeader
		wire string
	}{
		{
			name: "ipv4",
			h:    cmaHeader{Port: 0xc35a, Src: netip.MustParseAddr("198.51.100.2"), Dst: netip.MustParseAddr("198.51.100.1")},
			wire: "00" + "40" + "c35a" + strings.Repeat("00", 12) + "c6336402" + strings.Repeat("00", 12) + "c6336401",
		},
		{
			name: "ipv4-mapped addresses are written as IPv4",
			h:    cmaHeader{Port: 1, Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("::ffff:10.0.0.2")},
			wire: "00" + "40" + "0001" + strings.Repeat("00", 12) + "0a000001" + strings.Repeat("00", 12) + "0a000002",
		},
		{
			name: "ipv6",
			h:    cmaHeader{Port: 7471, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fe80::2")},
			wire: "00" + "60" + "1d2f" + "fd00" + strings.Repeat("00", 13) + "01" + "fe80" + strings.Repeat("00", 13) + "02",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := testutil.Unhex(t, tt.wire)
			if len(want) != cmaHeaderLen {
				t.Fatalf("bad test vector: %d octets", len(want))
			}
			b := bytes.Repeat([]byte{0xee}, cmaHeaderLen+4) // marshal must clear what it owns
			if err := tt.h.marshal(b); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b[:cmaHeaderLen], want) {
				t.Fatalf("marshal:\n got %x\nwant %x", b[:cmaHeaderLen], want)
			}
			if !bytes.Equal(b[cmaHeaderLen:], []byte{0xee, 0xee, 0xee, 0xee}) {
				t.Fatalf("marshal wrote past the header: %x", b[cmaHeaderLen:])
			}
			got, rest, err := parseCMAHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			wantH := cmaHeader{Port: tt.h.Port, Src: tt.h.Src.Unmap(), Dst: tt.h.Dst.Unmap()}
			if got != wantH {
				t.Fatalf("parse = %+v, want %+v", got, wantH)
			}
			if len(rest) != 4 || rest[0] != 0xee {
				t.Fatalf("consumer data after the header = %x, want the 4 octets after it", rest)
			}
		})
	}
}

func TestCMAHeaderErrors(t *testing.T) {
	v4 := netip.MustParseAddr("192.0.2.1")
	v6 := netip.MustParseAddr("2001:db8::1")
	for _, h := range []cmaHeader{
		{Src: v4, Dst: v6},
		{Src: v4},
		{Src: v6, Dst: netip.MustParseAddr("::ffff:192.0.2.1").Unmap()},
		{Src: netip.MustParseAddr("fe80::1%vcm0"), Dst: v6},
	} {
		if err := h.marshal(make([]byte, cmaHeaderLen)); err == nil {
			t.Errorf("marshal(%+v) succeeded", h)
		}
	}
	if err := (cmaHeader{Src: v4, Dst: v4}).marshal(make([]byte, cmaHeaderLen-1)); err == nil {
		t.Error("marshal into 35 octets succeeded")
	}

	good := make([]byte, cmaHeaderLen)
	if err := (cmaHeader{Src: v4, Dst: v4}).marshal(good); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func([]byte) []byte
		want   string
	}{
		{"short", func(b []byte) []byte { return b[:cmaHeaderLen-1] }, "need 36"},
		{"version", func(b []byte) []byte { b[0] = 1; return b }, "version 1"},
		{"ip version", func(b []byte) []byte { b[1] = 0x50; return b }, "IP version 5"},
		{"no ip version", func(b []byte) []byte { b[1] = 0x04; return b }, "IP version 0"},
	}
	for _, tt := range tests {
		b := tt.mutate(bytes.Clone(good))
		if _, _, err := parseCMAHeader(b); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one saying %q", tt.name, err, tt.want)
		}
	}
	// What the kernel ignores, so do we: the low nibble of the IP version
	// and the padding in front of an IPv4 address.
	b := bytes.Clone(good)
	b[1] |= 0x0f
	b[4] = 0xff
	if h, _, err := parseCMAHeader(b); err != nil || h.Src != v4 {
		t.Errorf("low nibble and padding set: %+v, %v; want them ignored", h, err)
	}
}

// FuzzCMAHeader: any private data either fails to parse or parses to a
// header that marshals back to the same octets, up to what the parser
// ignores (the low nibble of the IP version, IPv4 padding).
func FuzzCMAHeader(f *testing.F) {
	seed := make([]byte, cmaHeaderLen+8)
	_ = cmaHeader{Port: 7471, Src: netip.MustParseAddr("198.51.100.2"), Dst: netip.MustParseAddr("198.51.100.1")}.marshal(seed)
	f.Add(seed)
	seed6 := make([]byte, cmaHeaderLen)
	_ = cmaHeader{Port: 1, Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2")}.marshal(seed6)
	f.Add(seed6)
	f.Add([]byte{0, 0x40})
	f.Add(make([]byte, 92)) // a REQ's whole private data, zeroed
	f.Fuzz(func(t *testing.T, b []byte) {
		h, rest, err := parseCMAHeader(b)
		if err != nil {
			return
		}
		if len(rest) != len(b)-cmaHeaderLen {
			t.Fatalf("rest is %d octets of %d", len(rest), len(b))
		}
		out := make([]byte, cmaHeaderLen)
		if err := h.marshal(out); err != nil {
			t.Fatalf("parsed %+v but cannot marshal it: %v", h, err)
		}
		if h.Src.Is4In6() && h.Dst.Is4In6() {
			// An IPv6 header with two IPv4-mapped addresses is written back
			// as IPv4: check the addresses survive.
			h2, _, err := parseCMAHeader(out)
			if err != nil || h2.Port != h.Port || h2.Src != h.Src.Unmap() || h2.Dst != h.Dst.Unmap() {
				t.Fatalf("mapped addresses: reparse %+v, %v; from %+v", h2, err, h)
			}
			return
		}
		want := bytes.Clone(b[:cmaHeaderLen])
		want[1] &= 0xf0
		if want[1] == 0x40 {
			clear(want[4:16])
			clear(want[20:32])
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("round trip:\n got %x\nwant %x", out, want)
		}
	})
}
