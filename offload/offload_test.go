package offload

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

func TestHdrCodec(t *testing.T) {
	for _, tt := range []struct {
		name string
		h    Hdr
	}{
		{"zero", Hdr{}},
		{"TSO IPv4", Hdr{Flags: FlagNeedsCsum, GSOType: GSOTCPv4, HdrLen: 52, GSOSize: 1448, CsumStart: 20, CsumOffset: 16}},
		{"TSO IPv6 ECN", Hdr{Flags: FlagNeedsCsum, GSOType: GSOTCPv6 | GSOECN, HdrLen: 72, GSOSize: 0xfff0, CsumStart: 40, CsumOffset: 16}},
		{"data valid", Hdr{Flags: FlagDataValid}},
	} {
		b := bytes.Repeat([]byte{0xee}, HdrLen+2)
		tt.h.Encode(b)
		// The layout of struct virtio_net_hdr, in the host's byte order.
		want := []byte{tt.h.Flags, tt.h.GSOType}
		for _, v := range []uint16{tt.h.HdrLen, tt.h.GSOSize, tt.h.CsumStart, tt.h.CsumOffset} {
			want = binary.NativeEndian.AppendUint16(want, v)
		}
		want = append(want, 0xee, 0xee)
		if !bytes.Equal(b, want) {
			t.Errorf("%s: encoded % x, want % x", tt.name, b, want)
		}
		var got Hdr
		if err := got.Decode(b); err != nil || got != tt.h {
			t.Errorf("%s: decoded %+v, %v; want %+v", tt.name, got, err, tt.h)
		}
	}
	var h Hdr
	testutil.WantField(t, h.Decode(make([]byte, HdrLen-1)), "virtio_net_hdr", "header")
}

func TestComplete(t *testing.T) {
	tcp4 := spec{sport: 1, dport: 2, seq: 100, flags: tcpACK | tcpPSH, tcpOpts: tsOpts}
	udp6 := spec{v6: true, udp: true, sport: 3, dport: 4}
	for _, tt := range []struct {
		name    string
		s       spec
		payload []byte
		zero    bool // craft the payload so that the checksum computes to 0
	}{
		{"TCPv4", tcp4, pattern(1001, 1), false},
		{"TCPv4 no payload", tcp4, nil, false},
		{"UDPv6", udp6, pattern(300, 2), false},
		{"UDPv6 odd", udp6, pattern(7, 3), false},
		{"UDPv6 checksum 0 sent as 0xffff", udp6, pattern(64, 4), true},
	} {
		h, pkt := super(tt.s, tt.payload, 4000)
		h.GSOType = GSONone
		if tt.zero {
			// Adjust a payload word so that the data sums to 0xffff.
			p := pkt[len(pkt)-len(tt.payload):]
			sum := refFold(pkt[h.CsumStart:])
			w := binary.BigEndian.Uint16(p)
			s := uint32(w) + uint32(^sum)
			binary.BigEndian.PutUint16(p, uint16(s&0xffff+s>>16))
			if refFold(pkt[h.CsumStart:]) != 0xffff {
				t.Fatalf("%s: crafting failed", tt.name)
			}
		}
		if err := Complete(h, pkt); err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if err := checkPacket(pkt); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		if c := binary.BigEndian.Uint16(pkt[h.CsumStart+h.CsumOffset:]); tt.zero && c != 0xffff {
			t.Errorf("%s: checksum %#04x, want 0xffff", tt.name, c)
		}
	}

	// Without NEEDS_CSUM nothing is touched.
	_, pkt := super(tcp4, pattern(100, 5), 4000)
	before := bytes.Clone(pkt)
	if err := Complete(Hdr{}, pkt); err != nil || !bytes.Equal(pkt, before) {
		t.Errorf("no NEEDS_CSUM: %v, packet changed %v", err, !bytes.Equal(pkt, before))
	}

	for _, tt := range []struct {
		name  string
		h     Hdr
		field string
	}{
		{"field beyond the end", Hdr{Flags: FlagNeedsCsum, CsumStart: 20, CsumOffset: uint16(len(pkt) - 21)}, "csum_start"},
		{"start beyond the end", Hdr{Flags: FlagNeedsCsum, CsumStart: 0xffff, CsumOffset: 0xffff}, "csum_start"},
		{"odd offset", Hdr{Flags: FlagNeedsCsum, CsumStart: 20, CsumOffset: 15}, "csum_offset"},
		{"GSO", Hdr{Flags: FlagNeedsCsum, GSOType: GSOTCPv4, CsumStart: 20, CsumOffset: 16}, "gso_type"},
	} {
		b := bytes.Clone(pkt)
		testutil.WantField(t, Complete(tt.h, b), "virtio_net_hdr", tt.field)
		if !bytes.Equal(b, pkt) {
			t.Errorf("%s: the packet changed", tt.name)
		}
	}
}
