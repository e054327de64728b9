package cni

import (
	"net"
	"slices"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
)

// An attachment's IPAM result comes back as kept, names its attachment
// for GC, and goes on remove (twice is no error).
func TestAttachmentState(t *testing.T) {
	n := &NetConf{DataDir: t.TempDir()}
	n.Name = "ib-8001"
	if r, err := loadState(n, "c1", "net1"); r != nil || err != nil {
		t.Fatalf("before ADD: %v %v", r, err)
	}
	_, ipn, _ := net.ParseCIDR("172.30.1.10/24")
	ipn.IP = net.ParseIP("172.30.1.10").To4()
	want := &current.Result{CNIVersion: "1.1.0", IPs: []*current.IPConfig{{Address: *ipn}}}
	// Container IDs may hold '-' and interface names '-' and '@'.
	for _, a := range [][2]string{{"c1", "net1"}, {"c-2", "a-b@c"}} {
		if err := saveState(n, a[0], a[1], want); err != nil {
			t.Fatal(err)
		}
	}
	got, err := loadState(n, "c1", "net1")
	if err != nil || len(got.IPs) != 1 || got.IPs[0].Address.String() != "172.30.1.10/24" {
		t.Fatalf("kept %v (%v), want %v", got, err, want)
	}
	kept, err := keptAttachments(n)
	if err != nil || len(kept) != 2 || !slices.Contains(kept, [2]string{"c-2", "a-b@c"}) || !slices.Contains(kept, [2]string{"c1", "net1"}) {
		t.Fatalf("kept attachments %v (%v)", kept, err)
	}
	for range 2 {
		if err := removeState(n, "c1", "net1"); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := loadState(n, "c1", "net1"); r != nil {
		t.Errorf("after remove: %v", r)
	}
}
