package sa

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

func TestDecodeMADErrors(t *testing.T) {
	w := goldens(t)["path get"].mad(t)
	edit := func(at map[int]byte) []byte {
		b := bytes.Clone(w)
		for i, v := range at {
			b[i] = v
		}
		return b
	}
	tests := []struct {
		name  string
		wire  []byte
		field string
	}{
		{"empty", nil, "length"},
		{"header only", w[:HeaderLen], "length"},
		{"one short", w[:MADLen-1], "length"},
		{"one long", append(bytes.Clone(w), 0), "length"},
		{"base version 2", edit(map[int]byte{0: 2}), "BaseVersion"},
		{"CM class", edit(map[int]byte{1: 0x07}), "MgmtClass"},
		{"subnet management class", edit(map[int]byte{1: 0x01}), "MgmtClass"},
		{"class version 1", edit(map[int]byte{2: 1}), "ClassVersion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, data, err := DecodeMAD(tt.wire)
			testutil.WantField(t, err, "", tt.field)
			if data != nil {
				t.Error("data returned with the error")
			}
		})
	}
	// The header comes back with a framing error, to match the answer by TID.
	h, _, err := DecodeMAD(edit(map[int]byte{2: 1}))
	if err == nil || h.TransactionID != 0x0102030405060708 {
		t.Errorf("header with a version error: %+v, %v", h, err)
	}
}

func TestEncodeFieldErrors(t *testing.T) {
	tests := []struct {
		name  string
		rec   Record
		field string
	}{
		{"path flow label", &PathRecord{FlowLabel: 1 << 20}, "FlowLabel"},
		{"path numb path", &PathRecord{NumbPath: 0x80}, "NumbPath"},
		{"path QoS class", &PathRecord{QoSClass: 0x1000}, "QoSClass"},
		{"path SL", &PathRecord{SL: 16}, "SL"},
		{"path MTU", &PathRecord{MTU: Selected{Exactly, 0x40}}, "MTU"},
		{"path MTU selector", &PathRecord{MTU: Selected{4, 4}}, "MTUSelector"},
		{"path rate", &PathRecord{Rate: Selected{Exactly, 0x40}}, "Rate"},
		{"path lifetime", &PathRecord{Lifetime: Selected{Exactly, 0x40}}, "PacketLifeTime"},
		{"path lifetime selector", &PathRecord{Lifetime: Selected{7, 0}}, "PacketLifeTimeSelector"},
		{"mcm MTU", &MCMemberRecord{MTU: Selected{Exactly, 0x40}}, "MTU"},
		{"mcm rate selector", &MCMemberRecord{Rate: Selected{4, 3}}, "RateSelector"},
		{"mcm lifetime", &MCMemberRecord{Lifetime: Selected{0, 0x40}}, "PacketLifeTime"},
		{"mcm SL", &MCMemberRecord{SL: 16}, "SL"},
		{"mcm flow label", &MCMemberRecord{FlowLabel: 1 << 20}, "FlowLabel"},
		{"mcm scope", &MCMemberRecord{Scope: 16}, "Scope"},
		{"mcm join state", &MCMemberRecord{JoinState: 16}, "JoinState"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bytes.Repeat([]byte{0xee}, MADLen)
			err := Request{Method: MethodGet, Record: tt.rec}.MarshalMAD(b)
			testutil.WantField(t, err, "", tt.field)
			if !bytes.Equal(b, bytes.Repeat([]byte{0xee}, MADLen)) {
				t.Error("wrote the buffer despite the error")
			}
		})
	}
	others := []struct {
		name  string
		err   error
		field string
	}{
		{"path buffer", (&PathRecord{}).Encode(make([]byte, PathRecordLen-1)), "buffer"},
		{"mcm buffer", (&MCMemberRecord{}).Encode(make([]byte, MCMemberRecordLen-1)), "buffer"},
		{"header buffer", Header{}.Encode(make([]byte, HeaderLen-1)), "buffer"},
		{"MAD buffer", Request{Record: &PathRecord{}}.MarshalMAD(make([]byte, MADLen-1)), "buffer"},
		{"no record", Request{}.MarshalMAD(make([]byte, MADLen)), "record"},
		{"RRespTime", Header{RMPP: RMPP{RespTime: 32}}.Encode(make([]byte, HeaderLen)), "RRespTime"},
		{"RMPPFlags", Header{RMPP: RMPP{Flags: 8}}.Encode(make([]byte, HeaderLen)), "RMPPFlags"},
	}
	for _, tt := range others {
		t.Run(tt.name, func(t *testing.T) { testutil.WantField(t, tt.err, "", tt.field) })
	}
	if _, err := DecodePathRecord(make([]byte, PathRecordLen-1)); err == nil {
		t.Error("short PathRecord decoded")
	}
	if _, err := DecodeMCMemberRecord(make([]byte, 51)); err == nil {
		t.Error("short MCMemberRecord decoded")
	}
	if _, err := DecodeMCMemberRecord(make([]byte, 52)); err != nil {
		t.Errorf("unpadded MCMemberRecord: %v", err)
	}
}

func TestStatusNames(t *testing.T) {
	tests := []struct {
		s    Status
		want string
	}{
		{0, "0x0000 success"},
		{StatusBusy, "0x0001 busy"},
		{StatusRedirect, "0x0002 redirect required"},
		{StatusBadVersion, "0x0004 bad base or class version"},
		{StatusMethodUnsupported, "0x0008 method not supported"},
		{StatusMethodAttrUnsupp, "0x000c method and attribute combination not supported"},
		{StatusInvalidAttrValue, "0x001c invalid attribute or attribute modifier value"},
		{0x0010, "0x0010 reserved MAD status code 4"},
		{0x0020, "0x0020 reserved bits 0x0020"},
		{StatusNoResources, "0x0100 ERR_NO_RESOURCES"},
		{StatusReqInvalid, "0x0200 ERR_REQ_INVALID"},
		{StatusNoRecords, "0x0300 ERR_NO_RECORDS"},
		{StatusTooManyRecords, "0x0400 ERR_TOO_MANY_RECORDS"},
		{StatusInvalidGID, "0x0500 ERR_REQ_INVALID_GID"},
		{StatusInsufComponents, "0x0600 ERR_REQ_INSUFFICIENT_COMPONENTS"},
		{StatusReqDenied, "0x0700 ERR_REQ_DENIED"},
		{StatusPriSuggested, "0x0800 ERR_REQ_PRI_SUGGESTED"},
		{0x0900, "0x0900 unknown SA status code 9"},
		{0x0201, "0x0201 busy, ERR_REQ_INVALID"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); !strings.HasPrefix(got, tt.want) {
			t.Errorf("Status(%#04x) = %q, want prefix %q", uint16(tt.s), got, tt.want)
		}
	}
	err := error(&StatusError{Method: MethodSet, Attr: AttrMCMemberRecord, Status: StatusReqInvalid})
	if got := err.Error(); !strings.HasPrefix(got, "SA Set MCMemberRecord: status 0x0200 ERR_REQ_INVALID") {
		t.Errorf("StatusError: %q", got)
	}
	if StatusReqInvalid.Code() != 2 || !Status(0).OK() || StatusBusy.OK() {
		t.Error("Code/OK")
	}
}

func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{MethodGet.String(), "Get"}, {MethodGetResp.String(), "GetResp"}, {MethodDelete.String(), "Delete"},
		{Method(0x7f).String(), "Method(0x7f)"},
		{AttrPathRecord.String(), "PathRecord"}, {AttrMCMemberRecord.String(), "MCMemberRecord"},
		{AttrID(0x99).String(), "AttrID(0x0099)"},
		{(FullMember | SendOnlyFullMember).String(), "full|send-only full"}, {JoinState(0).String(), "none"},
		{JoinState(0x12).String(), "non|reserved 0x1"},
		{Exactly.String(), "exactly"}, {Largest.String(), "largest/smallest available"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	for m, want := range map[Method]Method{MethodGet: MethodGetResp, MethodSet: MethodGetResp, MethodDelete: MethodDeleteResp, MethodGetTable: MethodGetTableResp} {
		if got := m.Response(); got != want {
			t.Errorf("%v.Response() = %v, want %v", m, got, want)
		}
	}
	if RateGbps(3) != 10 || RateGbps(5) != 5 || RateGbps(0) != 0 {
		t.Error("RateGbps")
	}
	if (Selected{Exactly, 4}).MTU() != ib.MTU2048 {
		t.Error("Selected.MTU")
	}
}
