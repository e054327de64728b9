package softib

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The two captured RoCEv2 packets of the framing spec, §9.
func TestICRCVectors(t *testing.T) {
	v1 := unhex(t, `45 00 00 bc 00 01 00 00 40 11 f8 da c0 a8 00 02 c0 a8 00 03
		12 b7 12 b7 00 a8 00 00
		0a 80 00 00 00 00 00 02 80 00 00 00
		00 00 7f 7e 91 00 00 00 01 70 9a 33 00 00 00 80`+strings.Repeat(" ff", 128)+` c6 87 22 98`)
	v2 := unhex(t, `45 00 00 00 00 00 00 00 40 11 7c e8 7f 00 00 03 7f 00 00 02
		12 b7 12 b7 00 20 00 00
		11 00 00 00 00 00 00 02 00 00 00 00
		00 00 00 00 00 00 00 00 00 00 00 00`)
	tests := []struct {
		name string
		pkt  []byte
		want []byte // as transmitted
	}{
		{"RDMA WRITE Only", v1, v1[len(v1)-4:]},
		{"RC ACK", v2, []byte{0x40, 0x21, 0xa3, 0xcf}},
	}
	for _, tt := range tests {
		crc, err := ICRC(tt.pkt[:28], tt.pkt[28:len(tt.pkt)-4])
		if err != nil {
			t.Fatal(err)
		}
		var got [4]byte
		binary.LittleEndian.PutUint32(got[:], crc)
		if string(got[:]) != string(tt.want) {
			t.Errorf("%s: ICRC % x, want % x", tt.name, got, tt.want)
		}
	}
}

// The datapath's incremental ICRC equals the ICRC over the IP header Linux
// writes for an unconnected DF datagram (ID 0).
func TestDatapathICRCMatchesRealHeader(t *testing.T) {
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	pkt := make([]byte, BTHLen+DETHLen+40+ICRCLen)
	bth := BTH{Opcode: OpUDSendOnly, PKey: 0xffff, DestQP: 0x48, PSN: 7}
	bth.Encode(pkt)
	(&DETH{QKey: 0x0b1b, SrcQP: 0x49}).Encode(pkt[BTHLen:])
	hdr := unhex(t, `45 00 00 5c 00 00 40 00 40 11 00 00 c0 00 02 01 c0 00 02 02
		12 b7 12 b7 00 48 00 00`)
	want, err := ICRC(hdr, pkt[:len(pkt)-ICRCLen])
	if err != nil {
		t.Fatal(err)
	}
	if got := checkICRCValue(pkt, src, dst, UDPPort); got != want {
		t.Fatalf("datapath ICRC %08x, real-header ICRC %08x", got, want)
	}
}
