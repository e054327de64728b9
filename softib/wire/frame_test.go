package wire

import (
	"net/netip"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

// The datapath's incremental ICRC equals the ICRC over the IP header Linux
// writes for an unconnected DF datagram (ID 0).
func TestDatapathICRCMatchesRealHeader(t *testing.T) {
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	pkt := make([]byte, BTHLen+DETHLen+40+ICRCLen)
	bth := BTH{Opcode: OpUDSendOnly, PKey: 0xffff, DestQP: 0x48, PSN: 7}
	bth.Encode(pkt)
	(&DETH{QKey: 0x0b1b, SrcQP: 0x49}).Encode(pkt[BTHLen:])
	hdr := testutil.Unhex(t, `45 00 00 5c 00 00 40 00 40 11 00 00 c0 00 02 01 c0 00 02 02
		12 b7 12 b7 00 48 00 00`)
	want, err := ICRC(hdr[:IPv4HeaderLen], hdr[IPv4HeaderLen:], pkt[:len(pkt)-ICRCLen])
	if err != nil {
		t.Fatal(err)
	}
	if got := DatagramICRC(pkt, netip.AddrPortFrom(src, UDPPort), dst, UDPPort); got != want {
		t.Fatalf("datapath ICRC %08x, real-header ICRC %08x", got, want)
	}
}
