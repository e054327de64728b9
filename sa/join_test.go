package sa

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// The components of each request are the kernel's (ipoib_mcast_join,
// ipoib's path query): an SA judges a join by the mask.
func TestRequestBuilders(t *testing.T) {
	port := ib.GID{0xfe, 0x80, 15: 1}
	mgid := ib.GID{0xff, 0x12, 0x40, 0x1b, 15: 1}
	params := &GroupParams{QKey: 0x0b1b, MTU: Selected{Exactly, 4}, Rate: Selected{Exactly, 3}, HopLimit: 1}
	tests := []struct {
		name   string
		req    Request
		method Method
		mask   uint64
		rec    Record
	}{
		{"path", PathRequest(port, mgid, 0xffff), MethodGet, 0x380c,
			&PathRecord{DGID: mgid, SGID: port, Reversible: true, NumbPath: 1, PKey: 0xffff}},
		{"join, default state", JoinRequest{MGID: mgid, PKey: 0xffff}.Request(port), MethodSet, 0x10083,
			&MCMemberRecord{MGID: mgid, PortGID: port, PKey: 0xffff, JoinState: FullMember}},
		{"join and create", JoinRequest{MGID: mgid, PKey: 0x8001, Create: params}.Request(port), MethodSet, 0x173f7,
			&MCMemberRecord{MGID: mgid, PortGID: port, QKey: 0x0b1b, MTU: params.MTU, Rate: params.Rate, HopLimit: 1,
				PKey: 0x8001, JoinState: FullMember}},
		{"send-only join", JoinRequest{MGID: mgid, PKey: 0xffff, State: SendOnlyNonMember}.Request(port), MethodSet, 0x10083,
			&MCMemberRecord{MGID: mgid, PortGID: port, PKey: 0xffff, JoinState: SendOnlyNonMember}},
		{"leave, default state", LeaveRequest(port, mgid, 0xffff, 0), MethodDelete, 0x10003,
			&MCMemberRecord{MGID: mgid, PortGID: port, PKey: 0xffff, JoinState: FullMember}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.req.Method != tt.method || tt.req.ComponentMask != tt.mask {
				t.Errorf("method %v mask %#x, want %v %#x", tt.req.Method, tt.req.ComponentMask, tt.method, tt.mask)
			}
			var got, want [DataLen]byte
			if err := tt.req.Record.Encode(got[:]); err != nil {
				t.Fatal(err)
			}
			if err := tt.rec.Encode(want[:]); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("record\n% x\nwant\n% x", got[:tt.rec.Len()], want[:tt.rec.Len()])
			}
		})
	}
}

func TestParamsOf(t *testing.T) {
	g := MCMemberRecord{QKey: 0x0b1b, MLID: 0xc000, MTU: Selected{GreaterThan, 4}, Rate: Selected{LessThan, 3},
		SL: 2, FlowLabel: 0x12345, HopLimit: 3, TClass: 7, Scope: 2, JoinState: FullMember}
	want := GroupParams{QKey: 0x0b1b, MTU: Selected{Exactly, 4}, Rate: Selected{Exactly, 3},
		SL: 2, FlowLabel: 0x12345, HopLimit: 3, TClass: 7}
	if got := ParamsOf(g); *got != want {
		t.Errorf("ParamsOf: %+v, want %+v", *got, want)
	}
}
