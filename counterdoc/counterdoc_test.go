package counterdoc

import (
	"strings"
	"testing"
)

// TestCounterTable: every entry has one sentence of meaning, a name the
// metrics can carry, and no name twice.
func TestCounterTable(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range All() {
		switch {
		case seen[e.Name]:
			t.Errorf("%s documented twice", e.Name)
		case strings.TrimRight(strings.TrimSuffix(e.Name, "*"), "abcdefghijklmnopqrstuvwxyz0123456789_") != "":
			t.Errorf("%q: want [a-z0-9_] (and a final * for a family)", e.Name)
		case !strings.HasSuffix(e.Meaning, ".") || strings.Count(e.Meaning, ". ") > 0 || len(e.Meaning) < 15:
			t.Errorf("%s: meaning %q: want one sentence", e.Name, e.Meaning)
		}
		seen[e.Name] = true
	}
	for _, tc := range []struct {
		name    string
		trouble bool
		found   bool
	}{
		{"rx_multicast_own", false, true},
		{"tx_kernel_router_solicits", false, true},
		{"tx_drop_post", true, true},
		{"cm_rej_sent_consumer", false, true},     // family: a crossing REQ refused in rfc policy
		{"cm_rej_sent_no_resources", true, true},  // the family's exact member
		{"dev_hw_rx_write_requests", false, true}, // a sysfs counter
		{"dev_async_qp_fatal", true, true},        // family default
		{"dev_async_port_active", false, true},    // member
		{"no_such_counter", false, false},
	} {
		e, ok := Lookup(tc.name)
		if ok != tc.found || e.Trouble != tc.trouble {
			t.Errorf("Lookup(%s) = %+v, %v; want trouble %v, found %v", tc.name, e, ok, tc.trouble, tc.found)
		}
	}
}
