package main

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/ipoibd/ipoibd/control"
	"github.com/ipoibd/ipoibd/ipoib"
)

// TestShowReplyIsControlShow: the daemon's show reply, the interface's
// full state, reads as control.Show, the part of it the CNI plugin reads.
func TestShowReplyIsControlShow(t *testing.T) {
	children := []control.ChildInfo{{Name: "pod0", PKey: 0x8001, Netns: "/run/netns/p", Owner: "cni/x"}}
	for _, c := range []struct {
		reply showReply
		want  control.Show
	}{
		{showReply{Info: ipoib.Info{Name: "ib0", PKey: 0xffff, Mode: "connected", MTU: 65520}, Children: children},
			control.Show{Name: "ib0", PKey: 0xffff, Mode: "connected", MTU: 65520, Children: children}},
		{showReply{Info: ipoib.Info{Name: "ib0.8001", PKey: 0x8001, Mode: "datagram", MTU: 2044}, Parent: "ib0", Children: []control.ChildInfo{}},
			control.Show{Name: "ib0.8001", PKey: 0x8001, Mode: "datagram", MTU: 2044, Parent: "ib0", Children: []control.ChildInfo{}}},
	} {
		raw, err := json.Marshal(c.reply)
		if err != nil {
			t.Fatal(err)
		}
		var got control.Show
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s reads as %+v, want %+v", raw, got, c.want)
		}
	}
}
