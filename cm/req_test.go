package cm

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
	"github.com/ipoibd/ipoibd/mad"
)

// goldenREQ follows IBA Table 106 (docs/ib-cm-messages.md) octet by octet; offsets in the
// comments are payload offsets (MAD offset - 24).
var goldenREQ = madHex(
	hdr("0123456789abcdef", "0010"),
	"11223344",         // 0 Local Communication ID
	"00000000",         // 4 reserved
	"1000000000000048", // 8 Service ID: IPoIB, UD QPN 0x48
	"0002c90300abcdef", // 16 Local CA GUID
	"00000000",         // 24 reserved
	"a1b2c3d4",         // 28 Local Q_Key
	"12fe34", "05",     // 32 Local QPN; 35 Responder Resources
	"0eec01", "06", // 36 Local EECN; 39 Initiator Depth
	"0eec02",       // 40 Remote EECN
	"9b",           // 43 Remote CM Response Timeout 0x13<<3 | UC<<1 | End-to-End Flow Control 1
	"abcdef",       // 44 Starting PSN
	"ad",           // 47 Local CM Response Timeout 0x15<<3 | Retry Count 5
	"8123",         // 48 Partition Key
	"4b",           // 50 Path MTU 4 (2048)<<4 | RDC Exists 1<<3 | RNR Retry Count 3
	"cd",           // 51 Max CM Retries 12<<4 | SRQ 1<<3 | Extended Transport Type 5
	"1a2b", "3c4d", // 52 Primary Local LID; 54 Primary Remote LID
	"fe80000000000000 0002c903000abcde", // 56 Primary Local GID fe80::2:c903:a:bcde
	"0000000000000000 0000ffffc0000207", // 72 Primary Remote GID ::ffff:192.0.2.7
	"abcde015",                          // 88 Primary Flow Label 0xabcde<<12 | 6 reserved bits | Packet Rate 0x15
	"1c", "40",                          // 92 Primary Traffic Class; 93 Primary Hop Limit
	"98",           // 94 Primary SL 9<<4 | Subnet Local 1<<3
	"90",           // 95 Primary Local ACK Timeout 0x12<<3
	"5e6f", "7081", // 96 Alternate Local LID; 98 Alternate Remote LID
	"20010db800000000 0000000000000001", // 100 Alternate Local GID 2001:db8::1
	"20010db800000000 0000000000000002", // 116 Alternate Remote GID 2001:db8::2
	"12345007",                          // 132 Alternate Flow Label 0x12345<<12 | Packet Rate 7
	"b8", "02",                          // 136 Alternate Traffic Class; 137 Alternate Hop Limit
	"38",                             // 138 Alternate SL 3<<4 | Subnet Local 1<<3
	"70",                             // 139 Alternate Local ACK Timeout 0x0e<<3
	"00000048 0000fff4", z(83), "5a", // 140 Private Data: IPoIB {UD QPN 0x48, receive MTU 65524}, last octet 0x5a
)

var wantREQ = REQ{
	LocalCommID:             0x11223344,
	ServiceID:               0x1000000000000048,
	LocalCAGUID:             0x0002c90300abcdef,
	LocalQKey:               0xa1b2c3d4,
	LocalQPN:                0x12fe34,
	ResponderResources:      5,
	LocalEECN:               0x0eec01,
	InitiatorDepth:          6,
	RemoteEECN:              0x0eec02,
	RemoteCMResponseTimeout: 0x13,
	TransportType:           TransportUC,
	EndToEndFlowControl:     true,
	StartingPSN:             0xabcdef,
	LocalCMResponseTimeout:  0x15,
	RetryCount:              5,
	PKey:                    0x8123,
	PathMTU:                 ib.MTU2048,
	RDCExists:               true,
	RNRRetryCount:           3,
	MaxCMRetries:            12,
	SRQ:                     true,
	ExtendedTransportType:   5,
	Primary: Path{
		LocalLID: 0x1a2b, RemoteLID: 0x3c4d,
		LocalGID: testutil.MustGID("fe80::2:c903:a:bcde"), RemoteGID: testutil.MustGID("::ffff:192.0.2.7"),
		FlowLabel: 0xabcde, PacketRate: 0x15, TrafficClass: 0x1c, HopLimit: 0x40,
		SL: 9, SubnetLocal: true, LocalACKTimeout: 0x12,
	},
	Alternate: Path{
		LocalLID: 0x5e6f, RemoteLID: 0x7081,
		LocalGID: testutil.MustGID("2001:db8::1"), RemoteGID: testutil.MustGID("2001:db8::2"),
		FlowLabel: 0x12345, PacketRate: 7, TrafficClass: 0xb8, HopLimit: 2,
		SL: 3, SubnetLocal: true, LocalACKTimeout: 0x0e,
	},
	PrivateData: [REQPrivateDataLen]byte{3: 0x48, 6: 0xff, 7: 0xf4, 91: 0x5a},
}

var reservedREQ = concat(
	rsv(4, 4), rsv(24, 4),
	[]mask{{90, 0x0f}, {91, 0xc0}, {94, 0x07}, {95, 0x07}},     // primary path
	[]mask{{134, 0x0f}, {135, 0xc0}, {138, 0x07}, {139, 0x07}}, // alternate path
)

func concat(ms ...[]mask) []mask {
	var all []mask
	for _, m := range ms {
		all = append(all, m...)
	}
	return all
}

func TestREQEncodeErrors(t *testing.T) {
	tests := []struct {
		field string
		edit  func(*REQ)
	}{
		{"Local Communication ID", func(m *REQ) { m.LocalCommID = 0 }},
		{"Local QPN", func(m *REQ) { m.LocalQPN = 1 << 24 }},
		{"Local EECN", func(m *REQ) { m.LocalEECN = 1 << 24 }},
		{"Remote EECN", func(m *REQ) { m.RemoteEECN = 1 << 24 }},
		{"Remote CM Response Timeout", func(m *REQ) { m.RemoteCMResponseTimeout = 32 }},
		{"Transport Service Type", func(m *REQ) { m.TransportType = 4 }},
		{"Starting PSN", func(m *REQ) { m.StartingPSN = 1 << 24 }},
		{"Local CM Response Timeout", func(m *REQ) { m.LocalCMResponseTimeout = 32 }},
		{"Retry Count", func(m *REQ) { m.RetryCount = 8 }},
		{"Path Packet Payload MTU", func(m *REQ) { m.PathMTU = 0 }},
		{"Path Packet Payload MTU", func(m *REQ) { m.PathMTU = 6 }},
		{"RNR Retry Count", func(m *REQ) { m.RNRRetryCount = 8 }},
		{"Max CM Retries", func(m *REQ) { m.MaxCMRetries = 16 }},
		{"Extended Transport Type", func(m *REQ) { m.ExtendedTransportType = 8 }},
		{"Primary Flow Label", func(m *REQ) { m.Primary.FlowLabel = 1 << 20 }},
		{"Primary Packet Rate", func(m *REQ) { m.Primary.PacketRate = 64 }},
		{"Primary SL", func(m *REQ) { m.Primary.SL = 16 }},
		{"Primary Local ACK Timeout", func(m *REQ) { m.Primary.LocalACKTimeout = 32 }},
		{"Alternate Flow Label", func(m *REQ) { m.Alternate.FlowLabel = 1 << 20 }},
		{"Alternate Packet Rate", func(m *REQ) { m.Alternate.PacketRate = 64 }},
		{"Alternate SL", func(m *REQ) { m.Alternate.SL = 16 }},
		{"Alternate Local ACK Timeout", func(m *REQ) { m.Alternate.LocalACKTimeout = 32 }},
	}
	for _, tt := range tests {
		m := wantREQ
		tt.edit(&m)
		testEncodeError(t, &m, tt.field)
	}
}

func TestREQDecodeErrors(t *testing.T) {
	testDecodeErrors(t, "REQ", []decodeErrorCase{
		{"Local Communication ID", map[int]byte{0: 0, 1: 0, 2: 0, 3: 0}},
		{"Path Packet Payload MTU", map[int]byte{50: 0x0b}}, // MTU code 0
		{"Path Packet Payload MTU", map[int]byte{50: 0x6b}}, // MTU code 6
		{"Path Packet Payload MTU", map[int]byte{50: 0xfb}}, // MTU code 15
	}, func(p []byte) error { _, err := DecodeREQ(p); return err })
}

// A REQ as Linux IPoIB sends it (docs/ipoib-cm.md) round-trips with the
// values it documents.
func TestREQLinuxIPoIB(t *testing.T) {
	m := REQ{
		LocalCommID: 0x7b1f0a22, ServiceID: IPoIBServiceID(0x48), LocalCAGUID: 0x0002c90300000001,
		LocalQPN: 0x000412, ResponderResources: 4, RemoteCMResponseTimeout: 20,
		TransportType: TransportRC, LocalCMResponseTimeout: 20, PKey: ib.DefaultPKey,
		PathMTU: ib.MTU4096, MaxCMRetries: 15, SRQ: true,
		Primary: Path{LocalLID: 0xffff, RemoteLID: 0xffff, HopLimit: 64, LocalACKTimeout: 18},
	}
	if err := (PrivateData{UDQPN: 0x49, ReceiveMTU: LinuxReceiveMTU}).Encode(m.PrivateData[:]); err != nil {
		t.Fatal(err)
	}
	var b [MADLen]byte
	if err := m.MarshalMAD(b[:], 0x12345678_7b1f0a22); err != nil {
		t.Fatal(err)
	}
	p := b[mad.HeaderLen:]
	// Octets 43, 47, 50, 51 carry the packed fields: 20<<3|RC|no flow control,
	// 20<<3|retry 0, MTU 5<<4|RNR 0, max CM retries 15<<4|SRQ.
	if p[43] != 0xa0 || p[47] != 0xa0 || p[50] != 0x50 || p[51] != 0xf8 {
		t.Errorf("packed octets 43/47/50/51 = %#02x %#02x %#02x %#02x", p[43], p[47], p[50], p[51])
	}
	got, err := DecodeREQ(p)
	if err != nil || got != m {
		t.Fatalf("DecodeREQ = %+v, %v", got, err)
	}
}
