package tun

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A persistent device kept on Close stays with its carrier off, its
// addresses and routes; Open with Adopt re-attaches it (its multiqueue
// flag, whatever the queues asked), Open without refuses it, and a Close
// without Keep removes it.
func TestPersistKeepAdopt(t *testing.T) {
	for _, tc := range []struct {
		name          string
		made, adopted int // queues
		want          int
	}{
		{"single queue", 1, 1, 1},
		{"single queue, adopted asking 4", 1, 4, 1},
		{"multiqueue, adopted asking 1", 2, 1, 1},
		{"multiqueue", 2, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := testnet.New(t, testnet.Config{Hosts: 1})
			addr := netip.MustParsePrefix("192.168.51.1/24")
			cfg := Config{Name: "tunp0", MTU: 65520, Addrs: []netip.Prefix{addr}, Persist: true, Queues: tc.made, Offload: true}
			n.In(0, func() {
				d, err := Open(cfg)
				if err != nil {
					t.Fatal(err)
				}
				_, dst, _ := net.ParseCIDR("10.9.0.0/16")
				if err := d.Netlink().RouteAdd(&netlink.Route{LinkIndex: d.Index(), Dst: dst}); err != nil {
					t.Fatal(err)
				}
				d.Keep()
				_ = d.Close()
				l, err := netlink.LinkByName("tunp0")
				if err != nil {
					t.Fatalf("kept device gone: %v", err)
				}
				if l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0 {
					t.Errorf("kept device with no queue has its carrier on")
				}
				if names, err := Unserved(""); err != nil || !slices.Contains(names, "tunp0") {
					t.Errorf("Unserved: %v %v, want tunp0 among them", names, err)
				}
				if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "exists") {
					t.Errorf("Open without Adopt over a kept device: %v", err)
				}
				cfg.Adopt, cfg.Queues = true, tc.adopted
				d, err = Open(cfg)
				if err != nil {
					t.Fatalf("adopting: %v", err)
				}
				if !d.Adopted() || !d.Persistent() || d.Queues() != tc.want {
					t.Errorf("adopted %v persistent %v queues %d, want true true %d", d.Adopted(), d.Persistent(), d.Queues(), tc.want)
				}
				if tso, _ := d.Offloads(); !tso {
					t.Errorf("adopted device without TSO")
				}
				if have, _ := d.Addrs(); !contains(have, addr) {
					t.Errorf("adopted device's addresses %v, want %v among them", have, addr)
				}
				routes, _ := netlink.RouteList(l, unix.AF_INET)
				found := false
				for _, r := range routes {
					found = found || (r.Dst != nil && r.Dst.String() == "10.9.0.0/16")
				}
				if !found {
					t.Errorf("the route through the kept device is gone: %v", routes)
				}
				if _, err := Open(cfg); err == nil {
					t.Errorf("adopting a device that is served succeeded")
				}
				if err := d.SetCarrier(true); err != nil { // as the daemon does with its port up
					t.Fatal(err)
				}
				if names, _ := Unserved(""); slices.Contains(names, "tunp0") {
					t.Errorf("Unserved names tunp0 while it is served")
				}
				_ = d.Close()
				if _, err := netlink.LinkByName("tunp0"); err == nil {
					t.Errorf("a persistent device closed without Keep stays")
				}
			})
		})
	}
}

func contains(ps []netip.Prefix, p netip.Prefix) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}
