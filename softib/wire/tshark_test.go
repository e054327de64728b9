package wire

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/neigh"
)

// TestTsharkDecodesRoCEv2 is an independent wire check of the RoCEv2
// framing: packets made by our encoders (AppendPacket, PutHeaders, the
// BTH/DETH/AETH encoders, AppendIPUDPHeaders, the ICRC as softib's
// sender computes it, the cm MADs, the IPoIB header, ARP and ND) are written to a pcap as
// Ethernet/IPv4/UDP 4791 frames, and Wireshark's InfiniBand dissector must
// read back every value we put in: BTH, DETH, AETH, the CM messages, and
// the ARP and IPv6 ND packets inside IPoIB. For every frame each field of
// the union of asserted fields must be exactly as wanted, or absent where
// the frame does not carry it (no DETH on RC, no AETH on a SEND, ...), and
// tshark must report nothing malformed and no expert warning or error.
//
// What tshark 4.0.17 cannot check, and this test does instead or leaves
// out:
//   - It does not verify the ICRC (it has no status field for it and a
//     corrupted ICRC raises no expert info): the test recomputes each ICRC
//     from spec §9 with hash/crc32 (tsharkICRC) and asserts that tshark
//     finds it in the last four octets (infiniband.invariant.crc shows the
//     octets as a big-endian number, our value is sent LSB first).
//   - It does not strip the pad: data.len of an RC SEND counts the payload
//     and its pad octets.
//   - It misdecodes the REQ's flow label and packet rate, and does not
//     dissect MRA, LAP, APR or SIDR: none of these is asserted or sent.
//   - It does not know the IPoIB pad of the ND link-layer address option:
//     it shows the two pad octets as part of the address.
//   - IPoIB inside RoCE needs no decode-as: its "EtherType encapsulated"
//     payload heuristic (EtherType, 2 zero octets: exactly the IPoIB header)
//     hands the payload to the ARP and IPv6 dissectors. It does not say
//     that this is IPoIB, and the IPoIB link address is not parsed into
//     flags, QPN and GID: it is checked as 20 raw octets.
func TestTsharkDecodesRoCEv2(t *testing.T) {
	frames := tsharkFrames(t)

	var raw [][]byte
	for _, f := range frames {
		b := tsharkEthernet(t, &f.pkt)
		want, got := tsharkICRC(b)
		if want != got {
			t.Fatalf("%s: ICRC %#08x, spec §9 gives %#08x", f.name, got, want)
		}
		// Fields every frame is checked on, from the packet as built.
		bth := f.pkt.BTH
		for k, v := range map[string]string{
			"udp.dstport":              "4791",
			"udp.length":               strconv.Itoa(len(b) - 14 - IPv4HeaderLen),
			"infiniband.bth.se":        tsharkBool(bth.SE),
			"infiniband.bth.padcnt":    strconv.Itoa(int(PadCount(len(f.pkt.Payload)))),
			"infiniband.bth.p_key":     strconv.Itoa(int(bth.PKey)),
			"infiniband.bth.destqp":    fmt.Sprintf("0x%06x", uint32(bth.DestQP)),
			"infiniband.bth.a":         tsharkBool(bth.AckReq),
			"infiniband.bth.psn":       strconv.Itoa(int(bth.PSN)),
			"infiniband.invariant.crc": fmt.Sprintf("0x%08x", binary.BigEndian.Uint32(b[len(b)-ICRCLen:])),
		} {
			if _, ok := f.want[k]; !ok {
				f.want[k] = v
			}
		}
		raw = append(raw, b)
	}

	file := testutil.WritePcap(t, "rocev2.pcap", testutil.LinkTypeEthernet, raw)
	// SOFTIB_TSHARK_PCAP=path keeps a copy of the capture to look at.
	if keep := os.Getenv("SOFTIB_TSHARK_PCAP"); keep != "" {
		if err := os.WriteFile(keep, testutil.Pcap(testutil.LinkTypeEthernet, raw), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	union := map[string]bool{}
	for _, f := range frames {
		for k := range f.want {
			union[k] = true
		}
	}
	fields := slices.Sorted(maps.Keys(union))
	for i, got := range testutil.TsharkFields(t, file, len(frames), fields, "-E", "occurrence=a") {
		f := frames[i]
		if len(got) != len(fields) {
			t.Fatalf("frame %d (%s): %d fields, want %d: %s", i+1, f.name, len(got), len(fields), strings.Join(got, "|"))
		}
		ok := true
		for j, name := range fields {
			if got[j] != f.want[name] {
				t.Errorf("frame %d (%s): %s = %q, want %q", i+1, f.name, name, got[j], f.want[name])
				ok = false
			}
		}
		if ok && testing.Verbose() {
			t.Logf("frame %d %-16s %d fields as wanted", i+1, f.name, len(f.want))
		}
	}

	// Nothing malformed, no expert warning or error; and, so that an empty
	// answer means something, the same filter does flag a truncated copy
	// of the first frame.
	const bad = "_ws.malformed || _ws.expert.severity >= warning"
	if out := testutil.Tshark(t, "-r", file, "-Y", bad); len(out) != 0 {
		t.Errorf("tshark reports malformed or expert findings:\n%s", strings.Join(out, "\n"))
	}
	cut := testutil.WritePcap(t, "truncated.pcap", testutil.LinkTypeEthernet, [][]byte{raw[0][:200]})
	if out := testutil.Tshark(t, "-r", cut, "-Y", bad); len(out) != 1 {
		t.Errorf("the filter %q does not flag a truncated frame: %q", bad, out)
	}
}

// tsharkFrame is one packet of the wire check and the fields tshark must
// decode from it (tshark field name → value as `-T fields` prints it).
type tsharkFrame struct {
	name string
	pkt  Packet
	want map[string]string
}

var (
	tsharkSrc = netip.MustParseAddr("192.0.2.1")
	tsharkDst = netip.MustParseAddr("192.0.2.2")
)

// tsharkFrames builds the frames: a CM exchange over QP1, IPoIB ARP and ND
// over UD, and an RC SEND of three packets with its ACK. Opcodes and the
// well-known CM values are written as literals from the spec, not taken
// from our constants.
func tsharkFrames(t *testing.T) []tsharkFrame {
	t.Helper()
	const (
		reqCommID = 0x11223344
		repCommID = 0x55667788
		udQPNA    = 0x000123 // the requester's IPoIB UD QPN
		udQPNB    = 0x000321 // the responder's IPoIB UD QPN
		rcQPNA    = 0x000456
		rcQPNB    = 0x000789
		pkey      = 0x8001 // full member of partition 1
	)
	req := cm.REQ{
		LocalCommID: reqCommID, ServiceID: cm.IPoIBServiceID(udQPNA), LocalCAGUID: 0x0002c90300abcdef,
		LocalQPN: rcQPNA, StartingPSN: 0x00abcd, TransportType: cm.TransportRC, PKey: pkey, PathMTU: ib.MTU4096,
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, RetryCount: 7, RNRRetryCount: 7, MaxCMRetries: 15,
		SRQ: true,
		Primary: cm.Path{
			LocalGID: ib.GIDFromAddr(tsharkSrc), RemoteGID: ib.GIDFromAddr(tsharkDst),
			HopLimit: 64, SL: 3, LocalACKTimeout: 14,
		},
	}
	if err := (cm.PrivateData{UDQPN: udQPNA, ReceiveMTU: cm.LinuxReceiveMTU}).Encode(req.PrivateData[:]); err != nil {
		t.Fatal(err)
	}
	rep := cm.REP{
		LocalCommID: repCommID, RemoteCommID: reqCommID, LocalQPN: rcQPNB, StartingPSN: 0x00beef,
		RNRRetryCount: 7, SRQ: true, LocalCAGUID: 0x0002c90300fedcba,
	}
	if err := (cm.PrivateData{UDQPN: udQPNB, ReceiveMTU: cm.LinuxReceiveMTU}).Encode(rep.PrivateData[:]); err != nil {
		t.Fatal(err)
	}
	rtu := cm.RTU{LocalCommID: reqCommID, RemoteCommID: repCommID}
	rejConsumer := cm.REJ{RemoteCommID: reqCommID, MessageRejected: cm.MsgREQ, Reason: cm.RejConsumerReject}
	rejStale := cm.REJ{LocalCommID: repCommID, RemoteCommID: reqCommID, MessageRejected: cm.MsgREP, Reason: cm.RejStaleConnection}
	dreq := cm.DREQ{LocalCommID: reqCommID, RemoteCommID: repCommID, RemoteQPN: rcQPNB}
	drep := cm.DREP{LocalCommID: repCommID, RemoteCommID: reqCommID}

	// IPoIB payloads: the 4-octet header, then ARP or an IPv6 NS.
	hwA := ib.LinkAddr{Flags: 0x80, QPN: udQPNA, GID: ib.GIDFromAddr(tsharkSrc)}
	arp := neigh.ARP{
		Op: neigh.ARPRequest, SenderHW: hwA,
		SenderIP: netip.MustParseAddr("10.0.0.1"), TargetIP: netip.MustParseAddr("10.0.0.2"),
	}
	arpMsg := make([]byte, encap.HeaderLen+neigh.ARPLen)
	if err := encap.PutHeader(arpMsg, encap.EtherTypeARP); err != nil {
		t.Fatal(err)
	}
	if err := arp.Encode(arpMsg[encap.HeaderLen:]); err != nil {
		t.Fatal(err)
	}
	llA := netip.MustParseAddr("fe80::202:c903:a:bcde")
	llB := netip.MustParseAddr("fe80::202:c903:b:1234")
	ns := neigh.NeighborMessage{Type: neigh.TypeNeighborSolicitation, Target: llB, LinkAddr: hwA, HasLinkAddr: true}
	nsMsg := make([]byte, encap.HeaderLen+40+ns.Len())
	if err := encap.PutHeader(nsMsg, encap.EtherTypeIPv6); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.EncodeIPv6(nsMsg[encap.HeaderLen:], llA, neigh.SolicitedNode(llB)); err != nil {
		t.Fatal(err)
	}
	hwAWire := hwA.Bytes()
	hwAHex := hex.EncodeToString(hwAWire[:])

	mad := func(m interface{ MarshalMAD([]byte, uint64) error }, tid uint64) []byte {
		b := make([]byte, 256)
		if err := m.MarshalMAD(b, tid); err != nil {
			t.Fatal(err)
		}
		return b
	}
	// A CM MAD as softib's MAD service sends it: UD SEND Only from QP1 to
	// QP1 with the GSI Q_Key (spec §10).
	cmFrame := func(name string, psn PSN, m interface{ MarshalMAD([]byte, uint64) error }, tid uint64, attr string, want map[string]string) tsharkFrame {
		want["infiniband.bth.opcode"] = "100"
		want["infiniband.bth.destqp"] = "0x000001"
		want["infiniband.deth.q_key"] = "0x0000000080010000"
		want["infiniband.deth.srcqp"] = "0x00000001"
		want["infiniband.mad.mgmtclass"] = "0x07"
		want["infiniband.mad.method"] = "0x03"
		want["infiniband.mad.transactionid"] = fmt.Sprintf("0x%016x", tid)
		want["infiniband.mad.attributeid"] = attr
		return tsharkFrame{name: name, want: want, pkt: Packet{
			BTH:     BTH{Opcode: OpUDSendOnly, SE: true, PKey: pkey, DestQP: ib.QP1, PSN: psn},
			DETH:    DETH{QKey: ib.GSIQKey, SrcQP: ib.QP1},
			Payload: mad(m, tid),
		}}
	}
	ipoib := func(name string, psn PSN, payload []byte, want map[string]string) tsharkFrame {
		want["infiniband.bth.opcode"] = "100"
		want["infiniband.deth.q_key"] = "0x0000000000000b1b"
		want["infiniband.deth.srcqp"] = fmt.Sprintf("0x%08x", udQPNA)
		return tsharkFrame{name: name, want: want, pkt: Packet{
			BTH:     BTH{Opcode: OpUDSendOnly, PKey: pkey, DestQP: udQPNB, PSN: psn},
			DETH:    DETH{QKey: 0x0b1b, SrcQP: udQPNA},
			Payload: payload,
		}}
	}
	seg := make([]byte, 1024) // one packet at path MTU 1024
	for i := range seg {
		seg[i] = byte(i)
	}
	// tshark shows the payload and the pad as data of dataLen octets.
	rc := func(name string, op Opcode, literal string, psn PSN, payload []byte, padCnt, dataLen string) tsharkFrame {
		return tsharkFrame{name: name,
			want: map[string]string{
				"infiniband.bth.opcode": literal,
				"infiniband.bth.padcnt": padCnt,
				"data.len":              dataLen,
			},
			pkt: Packet{BTH: BTH{Opcode: op, PKey: 0x8001, DestQP: rcQPNB, PSN: psn, AckReq: op == OpRCSendLast}, Payload: payload},
		}
	}

	return []tsharkFrame{
		cmFrame("CM REQ", 0x000010, &req, 1, "0x0010", map[string]string{
			"infiniband.cm.req":                     "0x11223344", // Local Communication ID
			"infiniband.cm.req.serviceid":           "0x1000000000000123",
			"infiniband.cm.req.localcaguid":         "0x0002c90300abcdef",
			"infiniband.cm.req.localqpn":            "0x000456",
			"infiniband.cm.req.startpsn":            "0x00abcd",
			"infiniband.cm.req.transpsvctype":       "0x00",
			"infiniband.cm.req.pkey":                "0x8001",
			"infiniband.cm.req.pppmtu":              "0x05",
			"infiniband.cm.req.srq":                 "0x01",
			"infiniband.cm.req.prim_localgid_ipv4":  "192.0.2.1",
			"infiniband.cm.req.prim_remotegid_ipv4": "192.0.2.2",
			"infiniband.cm.req.prim_hoplim":         "0x40",
			"infiniband.cm.req.prim_sl":             "0x03",
			"infiniband.cm.req.prim_localacktout":   "0x0e",
			// IPoIB-CM private data: UD QPN 0x000123, receive MTU 65524.
			"infiniband.cm.req.private": "000001230000fff4" + strings.Repeat("00", cm.REQPrivateDataLen-8),
		}),
		cmFrame("CM REP", 0x000020, &rep, 1, "0x0013", map[string]string{
			"infiniband.cm.rep":              "0x55667788", // Local Communication ID
			"infiniband.cm.rep.remotecommid": "0x11223344",
			"infiniband.cm.rep.localqpn":     "0x000789",
			"infiniband.cm.rep.startpsn":     "0x00beef",
			"infiniband.cm.rep.srq":          "0x01",
			"infiniband.cm.rep.localcaguid":  "0x0002c90300fedcba",
			"infiniband.cm.rep.private":      "000003210000fff4" + strings.Repeat("00", cm.REPPrivateDataLen-8),
		}),
		cmFrame("CM RTU", 0x000011, &rtu, 1, "0x0014", map[string]string{
			"infiniband.cm.rtu.localcommid":  "0x11223344",
			"infiniband.cm.rtu.remotecommid": "0x55667788",
		}),
		cmFrame("CM REJ consumer", 0x000012, &rejConsumer, 2, "0x0012", map[string]string{
			"infiniband.cm.rej.localcommid":  "0x00000000",
			"infiniband.cm.rej.remotecommid": "0x11223344",
			"infiniband.cm.rej.msgrej":       "0x00",   // REQ
			"infiniband.cm.rej.reason":       "0x001c", // 28 Consumer Reject
		}),
		cmFrame("CM REJ stale", 0x000021, &rejStale, 3, "0x0012", map[string]string{
			"infiniband.cm.rej.localcommid":  "0x55667788",
			"infiniband.cm.rej.remotecommid": "0x11223344",
			"infiniband.cm.rej.msgrej":       "0x01",   // REP
			"infiniband.cm.rej.reason":       "0x000a", // 10 Stale Connection
		}),
		cmFrame("CM DREQ", 0x000013, &dreq, 4, "0x0015", map[string]string{
			"infiniband.cm.dreq.localcommid":  "0x11223344",
			"infiniband.cm.dreq.remotecommid": "0x55667788",
			"infiniband.cm.req.remoteqpneecn": "0x000789", // tshark's name for the DREQ's Remote QPN
		}),
		cmFrame("CM DREP", 0x000022, &drep, 4, "0x0016", map[string]string{
			"infiniband.cm.drsp.localcommid":  "0x55667788",
			"infiniband.cm.drsp.remotecommid": "0x11223344",
		}),
		ipoib("IPoIB ARP", 0x000100, arpMsg, map[string]string{
			"infiniband.rwh.etype": "0x0806",
			"arp.hw.type":          "32",
			"arp.proto.type":       "0x0800",
			"arp.hw.size":          "20",
			"arp.proto.size":       "4",
			"arp.opcode":           "1",
			"arp.src.hw":           hwAHex,
			"arp.src.proto_ipv4":   "10.0.0.1",
			"arp.dst.hw":           strings.Repeat("00", ib.LinkAddrLen),
			"arp.dst.proto_ipv4":   "10.0.0.2",
		}),
		ipoib("IPoIB IPv6 NS", 0x000101, nsMsg, map[string]string{
			"infiniband.rwh.etype":        "0x86dd",
			"ipv6.src":                    "fe80::202:c903:a:bcde",
			"ipv6.dst":                    "ff02::1:ff0b:1234",
			"ipv6.hlim":                   "255",
			"icmpv6.type":                 "135",
			"icmpv6.checksum.status":      "1", // good
			"icmpv6.nd.ns.target_address": "fe80::202:c903:b:1234",
			"icmpv6.opt.type":             "1",
			"icmpv6.opt.linkaddr":         "0000" + hwAHex, // pad shown as address
		}),
		// A 3049-octet message at path MTU 1024, its PSNs wrapping.
		rc("RC SEND First", OpRCSendFirst, "0", 0xfffffe, seg, "0", "1024"),
		rc("RC SEND Middle", OpRCSendMiddle, "1", 0xffffff, seg, "0", "1024"),
		rc("RC SEND Last", OpRCSendLast, "2", 0x000000, seg[:1001], "3", "1004"),
		{name: "RC ACK", pkt: Packet{BTH: BTH{Opcode: OpRCAck, PKey: 0x8001, DestQP: rcQPNA, PSN: 0x000000}, AETH: ACK(0x000042)},
			want: map[string]string{
				"infiniband.bth.opcode":                 "17",
				"infiniband.aeth.syndrome":              "31", // ACK, credits 0x1F (unlimited)
				"infiniband.aeth.syndrome.opcode":       "0",  // ACK
				"infiniband.aeth.syndrome.credit_count": "31",
				"infiniband.aeth.msn":                   "66",
			}},
	}
}

// tsharkBool is how tshark prints a boolean field.
func tsharkBool(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// tsharkEthernet frames an IB packet as our sender puts it on the wire:
// Ethernet, IPv4 and UDP headers (AppendIPUDPHeaders), the packet
// (AppendPacket) and its ICRC (StartDatagramICRC, as softib's sender
// computes it).
func tsharkEthernet(t *testing.T, p *Packet) []byte {
	t.Helper()
	pkt, err := AppendPacket(nil, p)
	if err != nil {
		t.Fatal(err)
	}
	crc, _ := StartDatagramICRC(tsharkSrc, tsharkDst, UDPPort, UDPPort, 0, len(pkt))
	crc.Update(pkt[:len(pkt)-ICRCLen])
	PutICRC(pkt[len(pkt)-ICRCLen:], crc.Sum32())
	if _, ok := CheckDatagramICRC(pkt, netip.AddrPortFrom(tsharkSrc, UDPPort), tsharkDst, UDPPort, 0); !ok {
		t.Fatal("CheckDatagramICRC refuses our own packet")
	}
	var back Packet
	if err := ParsePacket(pkt, &back); err != nil {
		t.Fatalf("ParsePacket refuses our own packet: %v", err)
	}
	b := []byte{
		0x02, 0, 0, 0, 0, 0x02, // destination MAC
		0x02, 0, 0, 0, 0, 0x01, // source MAC
		0x08, 0x00, // IPv4
	}
	b, err = AppendIPUDPHeaders(b, tsharkSrc, tsharkDst, UDPPort, UDPPort, 64, len(pkt))
	if err != nil {
		t.Fatal(err)
	}
	return append(b, pkt...)
}

// tsharkICRC recomputes the ICRC of an Ethernet/IPv4/UDP/IB frame from
// spec §9 alone, sharing no code with ICRCDigest: eight 0xFF octets, then
// a masked copy of everything from the IP header up to the ICRC, through
// hash/crc32. It returns that and the ICRC the frame carries (LSB first).
func tsharkICRC(frame []byte) (want, got uint32) {
	s := slices.Concat(make([]byte, 8), frame[14:len(frame)-ICRCLen])
	for i := range 8 {
		s[i] = 0xff
	}
	ip := s[8:]
	ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff // TOS, TTL, header checksum
	ip[20+6], ip[20+7] = 0xff, 0xff                       // UDP checksum
	ip[20+8+4] = 0xff                                     // BTH FECN, BECN, reserved
	return crc32.ChecksumIEEE(s), binary.LittleEndian.Uint32(frame[len(frame)-ICRCLen:])
}
