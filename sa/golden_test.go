package sa

import (
	"bytes"
	"sort"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

var gid = testutil.MustGID

// golden is one MAD written octet by octet from the layouts in IBA ch.15
// (as umad_sa.h / umad_sa_mcm.h transcribe them), with the header and the
// record it must decode to.
type golden struct {
	hex  string
	hdr  Header
	rec  Record
	resv map[int]byte // reserved bits of the record, by record octet
}

// mad is the golden's MAD: its vector (testutil.Unhex) padded with zeros,
// since a vector stops where its record does.
func (g golden) mad(tb testing.TB) []byte {
	tb.Helper()
	b := testutil.Unhex(tb, g.hex)
	if len(b) > MADLen {
		tb.Fatalf("golden of %d octets", len(b))
	}
	return append(b, make([]byte, MADLen-len(b))...)
}

var (
	bcastMGID = "ff12:401b:ffff::ffff:ffff"
	hostA     = "fe80::2:c903:0:1"
	hostB     = "fe80::2:c903:0:2"
)

var pathResv = map[int]byte{44: 0x70, 58: 0xff, 59: 0xff, 60: 0xff, 61: 0xff, 62: 0xff, 63: 0xff}
var mcmResv = map[int]byte{49: 0x7f, 50: 0xff, 51: 0xff, 52: 0xff, 53: 0xff, 54: 0xff, 55: 0xff}

func saHdr(m Method, tid uint64, attr AttrID, status Status, offset uint16, mask uint64) Header {
	return Header{BaseVersion: 1, MgmtClass: 3, ClassVersion: 2, Method: m, Status: status,
		TransactionID: tid, AttributeID: attr, RMPP: RMPP{Version: 1}, AttributeOffset: offset, ComponentMask: mask}
}

func goldens(t testing.TB) map[string]golden {
	return map[string]golden{
		// ipoib's path query: DGID, SGID, NumbPath, P_Key, Reversible.
		"path get": {
			hex: `01 03 02 01 | 0000 | 0000 | 0102030405060708 | 0035 | 0000 | 00000000
			      01 00 00 00 | 00000000 | 00000000
			      0000000000000000 | 0000 | 0000 | 000000000000380c
			      0000000000000000
			      fe800000000000000002c90300000002
			      fe800000000000000002c90300000001
			      0000 | 0000 | 00000000 | 00 | 81 | ffff | 0000 | 00 00 00 00 | 000000000000`,
			hdr: saHdr(MethodGet, 0x0102030405060708, AttrPathRecord, 0, 0, PathDGID|PathSGID|PathReversible|PathNumbPath|PathPKey),
			rec: &PathRecord{DGID: gid(hostB), SGID: gid(hostA), Reversible: true, NumbPath: 1, PKey: 0xffff},
		},
		// An answer with every field set to a distinct value.
		"path getresp": {
			hex: `01 03 02 81 | 0000 | 0000 | 0102030405060708 | 0035 | 0000 | 00000000
			      01 00 00 00 | 00000000 | 00000000
			      0000000000000000 | 0008 | 0000 | 000000000000380c
			      1122334455667788
			      fe800000000000000002c90300000002
			      fe800000000000000002c90300000001
			      0002 | 0001 | 81234540 | a0 | ff | 8001 | abc5 | 84 87 92 01 | 000000000000`,
			hdr: saHdr(MethodGetResp, 0x0102030405060708, AttrPathRecord, 0, 8, PathDGID|PathSGID|PathReversible|PathNumbPath|PathPKey),
			rec: &PathRecord{ServiceID: 0x1122334455667788, DGID: gid(hostB), SGID: gid(hostA), DLID: 2, SLID: 1,
				RawTraffic: true, FlowLabel: 0x12345, HopLimit: 0x40, TClass: 0xa0, Reversible: true, NumbPath: 0x7f,
				PKey: 0x8001, QoSClass: 0xabc, SL: 5, MTU: Selected{Exactly, 4}, Rate: Selected{Exactly, 7},
				Lifetime: Selected{Exactly, 0x12}, Preference: 1},
			resv: pathResv,
		},
		// The broadcast group's join with the create components, as the
		// kernel sends for a group that may be new.
		"mcmember set": {
			hex: `01 03 02 02 | 0000 | 0000 | 00000000deadbeef | 0038 | 0000 | 00000000
			      01 00 00 00 | 00000000 | 00000000
			      0000000000000000 | 0000 | 0000 | 00000000000173f7
			      ff12401bffff000000000000ffffffff
			      fe800000000000000002c90300000001
			      00000b1b | 0000 | 84 | 00 | ffff | 83 | 00 | 00000000 | 21 | 00 | 0000 | 00000000`,
			hdr: saHdr(MethodSet, 0xdeadbeef, AttrMCMemberRecord, 0, 0,
				MCMGID|MCMPortGID|MCMQKey|MCMMTUSelector|MCMMTU|MCMTClass|MCMPKey|MCMRateSelector|MCMRate|MCMSL|MCMFlowLabel|MCMHopLimit|MCMJoinState),
			rec: &MCMemberRecord{MGID: gid(bcastMGID), PortGID: gid(hostA), QKey: 0x0b1b, MTU: Selected{Exactly, 4},
				PKey: 0xffff, Rate: Selected{Exactly, 3}, Scope: 2, JoinState: FullMember},
		},
		// OpenSM's answer, every field distinct.
		"mcmember getresp": {
			hex: `01 03 02 81 | 0000 | 0000 | 00000000deadbeef | 0038 | 0000 | 00000000
			      01 00 00 00 | 00000000 | 00000000
			      0000000000000000 | 0007 | 0000 | 0000000000010003
			      ff12401b800100000000000000000001
			      fe800000000000000002c90300000001
			      00000b1b | c000 | 84 | 12 | 8001 | 83 | 90 | 3abcde05 | 29 | 80 | 0000 | 00000000`,
			hdr: saHdr(MethodGetResp, 0xdeadbeef, AttrMCMemberRecord, 0, 7, MCMGID|MCMPortGID|MCMJoinState),
			rec: &MCMemberRecord{MGID: gid("ff12:401b:8001::1"), PortGID: gid(hostA), QKey: 0x0b1b, MLID: 0xc000,
				MTU: Selected{Exactly, 4}, TClass: 0x12, PKey: 0x8001, Rate: Selected{Exactly, 3}, Lifetime: Selected{Exactly, 0x10},
				SL: 3, FlowLabel: 0xabcde, HopLimit: 5, Scope: 2, JoinState: FullMember | SendOnlyFullMember, ProxyJoin: true},
			resv: mcmResv,
		},
		// A leave: Delete with the MGID, PortGID and JoinState.
		"mcmember delete": {
			hex: `01 03 02 15 | 0000 | 0000 | 0000000000000042 | 0038 | 0000 | 00000000
			      01 00 00 00 | 00000000 | 00000000
			      0000000000000000 | 0000 | 0000 | 0000000000010003
			      ff12601bffff00000000000000000001
			      fe800000000000000002c90300000002
			      00000000 | 0000 | 00 | 00 | 0000 | 00 | 00 | 00000000 | 01 | 00 | 0000 | 00000000`,
			hdr: saHdr(MethodDelete, 0x42, AttrMCMemberRecord, 0, 0, MCMGID|MCMPortGID|MCMJoinState),
			rec: &MCMemberRecord{MGID: gid("ff12:601b:ffff::1"), PortGID: gid(hostB), JoinState: FullMember},
		},
		// A join refused for its Q_Key: status 0x0200, the request echoed.
		"mcmember refused": {
			hex: `01 03 02 81 | 0200 | 0000 | 0000000000000043 | 0038 | 0000 | 00000000
			      01 00 00 00 | 00000000 | 00000000
			      0000000000000000 | 0007 | 0000 | 0000000000010007
			      ff12401bffff000000000000ffffffff
			      fe800000000000000002c90300000002
			      12345678 | 0000 | 00 | 00 | 0000 | 00 | 00 | 00000000 | 01 | 00 | 0000 | 00000000`,
			hdr: saHdr(MethodGetResp, 0x43, AttrMCMemberRecord, StatusReqInvalid, 7, MCMGID|MCMPortGID|MCMQKey|MCMJoinState),
			rec: &MCMemberRecord{MGID: gid(bcastMGID), PortGID: gid(hostB), QKey: 0x12345678, JoinState: FullMember},
		},
	}
}

func goldenNames(g map[string]golden) []string {
	var n []string
	for k := range g {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

func decodeRecord(attr AttrID, data []byte) (Record, error) {
	switch attr {
	case AttrPathRecord:
		p, err := DecodePathRecord(data)
		return &p, err
	default:
		m, err := DecodeMCMemberRecord(data)
		return &m, err
	}
}

func TestGoldenDecode(t *testing.T) {
	gs := goldens(t)
	for _, name := range goldenNames(gs) {
		g := gs[name]
		h, data, err := DecodeMAD(g.mad(t))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if h != g.hdr {
			t.Errorf("%s: header\n%+v\nwant\n%+v", name, h, g.hdr)
		}
		rec, err := decodeRecord(h.AttributeID, data)
		if err != nil || !equalRecord(rec, g.rec) {
			t.Errorf("%s: record\n%+v (%v)\nwant\n%+v", name, rec, err, g.rec)
		}
	}
}

func equalRecord(a, b Record) bool {
	switch a := a.(type) {
	case *PathRecord:
		b, ok := b.(*PathRecord)
		return ok && *a == *b
	case *MCMemberRecord:
		b, ok := b.(*MCMemberRecord)
		return ok && *a == *b
	}
	return false
}

func TestGoldenEncode(t *testing.T) {
	gs := goldens(t)
	for _, name := range goldenNames(gs) {
		g := gs[name]
		want := g.mad(t)
		// Stale octets must not survive in reserved places or after the
		// record, and nothing past the MAD may be written.
		b := bytes.Repeat([]byte{0xee}, MADLen+8)
		if g.hdr.Method.IsResponse() || g.hdr.AttributeOffset != 0 {
			// Answers: header and record written one by one.
			if err := g.hdr.Encode(b); err != nil {
				t.Fatal(err)
			}
			clear(b[HeaderLen:MADLen])
			if err := g.rec.Encode(b[HeaderLen:]); err != nil {
				t.Fatal(err)
			}
		} else {
			r := Request{Method: g.hdr.Method, TransactionID: g.hdr.TransactionID, ComponentMask: g.hdr.ComponentMask, Record: g.rec}
			if err := r.MarshalMAD(b); err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
		}
		if !bytes.Equal(b[:MADLen], want) {
			t.Errorf("%s: encoded\n% x\nwant\n% x", name, b[:MADLen], want)
		}
		if !bytes.Equal(b[MADLen:], bytes.Repeat([]byte{0xee}, 8)) {
			t.Errorf("%s: wrote past the MAD", name)
		}
	}
}

// Every bit of a record is carried or reserved as the layout says:
// flipping a carried bit changes the decoded record, flipping a reserved
// bit does not, and encoding clears it again.
func TestEveryRecordBitCarriedOrReserved(t *testing.T) {
	gs := goldens(t)
	for _, name := range goldenNames(gs) {
		g := gs[name]
		if g.resv == nil {
			continue
		}
		wire := g.mad(t)
		rec := wire[HeaderLen : HeaderLen+g.rec.Len()]
		for i := range rec {
			for m := byte(0x80); m != 0; m >>= 1 {
				w := bytes.Clone(rec)
				w[i] ^= m
				got, err := decodeRecord(g.rec.AttrID(), w)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				same := equalRecord(got, g.rec)
				if reserved := g.resv[i]&m != 0; reserved != same {
					t.Errorf("%s: record octet %d mask %#02x: reserved %v but decoded the same %v", name, i, m, reserved, same)
				}
			}
		}
		w := bytes.Clone(rec)
		for i, m := range g.resv {
			w[i] |= m
		}
		got, _ := decodeRecord(g.rec.AttrID(), w)
		out := make([]byte, len(rec))
		if err := got.Encode(out); err != nil || !bytes.Equal(out, rec) {
			t.Errorf("%s: reserved bits not cleared on encode (%v)", name, err)
		}
	}
}
