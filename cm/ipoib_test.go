package cm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/mad"
)

func TestIPoIBServiceID(t *testing.T) {
	tests := []struct {
		qpn  ib.QPN
		wire string // big-endian, as REQ payload octets 8-15 carry it
	}{
		{0x000048, "10 00 00 00 00 00 00 48"},
		{0x000001, "10 00 00 00 00 00 00 01"},
		{0xabcdef, "10 00 00 00 00 ab cd ef"},
		{0xffffff, "10 00 00 00 00 ff ff ff"},
	}
	for _, tt := range tests {
		id := IPoIBServiceID(tt.qpn)
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], id)
		if got := hexSpaced(b[:]); got != tt.wire {
			t.Errorf("IPoIBServiceID(%v) = %s, want %s", tt.qpn, got, tt.wire)
		}
		q, err := ParseIPoIBServiceID(id)
		if err != nil || q != tt.qpn {
			t.Errorf("ParseIPoIBServiceID(%#x) = %v, %v", id, q, err)
		}
	}
	if id := IPoIBServiceID(0x1000048); id != 0x1000000000000048 {
		t.Errorf("over-wide QPN: %#x", id)
	}
	bad := []struct {
		id    uint64
		field string
	}{
		{0x0000000000000048, "prefix"},
		{0x2000000000000048, "prefix"},
		{0x1100000000000048, "prefix"},
		{0x1000000001000048, "reserved"},
		{0x1001000000000048, "reserved"},
		{0x10000000ff000048, "reserved"},
	}
	for _, tt := range bad {
		t.Run(fmt.Sprintf("%#016x", tt.id), func(t *testing.T) {
			_, err := ParseIPoIBServiceID(tt.id)
			testutil.WantField(t, err, "IPoIB-CM service ID", tt.field)
		})
	}
}

func hexSpaced(b []byte) string {
	const digits = "0123456789abcdef"
	var s []byte
	for i, o := range b {
		if i > 0 {
			s = append(s, ' ')
		}
		s = append(s, digits[o>>4], digits[o&15])
	}
	return string(s)
}

func TestPrivateData(t *testing.T) {
	linux := []byte{0x00, 0x00, 0x00, 0x48, 0x00, 0x00, 0xff, 0xf4} // UD QPN 0x48, receive MTU 65524
	want := PrivateData{UDQPN: 0x48, ReceiveMTU: LinuxReceiveMTU}
	// In the REQ golden vector the private data starts at payload offset 140.
	d, err := DecodePrivateData(goldenREQ[mad.HeaderLen+140:])
	if err != nil || d != want {
		t.Fatalf("decode REQ private data = %+v, %v", d, err)
	}
	area := bytes.Repeat([]byte{0xee}, REQPrivateDataLen)
	if err := want.Encode(area); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(area[:8], linux) || !bytes.Equal(area[8:], bytes.Repeat([]byte{0xee}, REQPrivateDataLen-8)) {
		t.Errorf("encode = % x", area)
	}
	// The reserved top octet of the QPN word is ignored.
	d, err = DecodePrivateData([]byte{0xff, 0x00, 0x00, 0x48, 0x00, 0x00, 0xff, 0xf4})
	if err != nil || d != want {
		t.Errorf("reserved octet set: %+v, %v", d, err)
	}
	// The smallest usable receive MTU leaves one octet of IP.
	d, err = DecodePrivateData([]byte{0, 0, 0, 0x48, 0, 0, 0, 5})
	if err != nil || d.ReceiveMTU != 5 {
		t.Errorf("receive MTU 5: %+v, %v", d, err)
	}
	for _, mtu := range []byte{0, 1, 4} {
		_, err := DecodePrivateData([]byte{0, 0, 0, 0x48, 0, 0, 0, mtu})
		testutil.WantField(t, err, "IPoIB-CM private data", "receive MTU")
		testutil.WantField(t, PrivateData{UDQPN: 0x48, ReceiveMTU: uint32(mtu)}.Encode(make([]byte, 8)), "IPoIB-CM private data", "receive MTU")
	}
	_, err = DecodePrivateData(linux[:7])
	testutil.WantField(t, err, "IPoIB-CM private data", "private data")
	testutil.WantField(t, want.Encode(make([]byte, 7)), "IPoIB-CM private data", "buffer")
	testutil.WantField(t, PrivateData{UDQPN: 1 << 24, ReceiveMTU: LinuxReceiveMTU}.Encode(make([]byte, 8)), "IPoIB-CM private data", "UD QPN")
}

// TestPrivateDataMark: ipoibd's mark, octets 8–11, round-trips; Linux's
// zeros, anything else there, or private data cut before it, is no mark.
func TestPrivateDataMark(t *testing.T) {
	marked := PrivateData{UDQPN: 0x48, ReceiveMTU: LinuxReceiveMTU, BothWays: true}
	area := make([]byte, REQPrivateDataLen)
	if err := marked.Encode(area); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(area[8:12], []byte("ipd\x01")) || !bytes.Equal(area[12:], make([]byte, REQPrivateDataLen-12)) {
		t.Errorf("marked encode = % x", area)
	}
	testutil.WantField(t, marked.Encode(make([]byte, 11)), "IPoIB-CM private data", "buffer")
	for _, tc := range []struct {
		name string
		pd   []byte
		want bool
	}{
		{"ipoibd's", area, true},
		{"Linux's zeros", append(area[:8:8], make([]byte, 84)...), false},
		{"another version octet", append(area[:8:8], 'i', 'p', 'd', 2), false},
		{"cut after the MTU", area[:8], false},
		{"cut inside the mark", area[:11], false},
	} {
		d, err := DecodePrivateData(tc.pd)
		if err != nil || d.BothWays != tc.want || d.UDQPN != 0x48 {
			t.Errorf("%s: %+v, %v; want BothWays %v", tc.name, d, err, tc.want)
		}
	}
}
