package verbs

import (
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

func TestChooseGID(t *testing.T) {
	ll := testutil.MustGID("fe80::5054:ff:fe12:3456")
	v4 := testutil.MustGID("::ffff:192.0.2.1")
	v4b := testutil.MustGID("::ffff:198.51.100.1")
	v6 := testutil.MustGID("2001:db8::1")
	rxe := []gidEntry{ // soft-RoCE's table on an interface with one IPv4 address
		{index: 0, gid: ll},
		{index: 1, gid: ll, roceV2: true},
		{index: 2, gid: v4},
		{index: 3, gid: v4, roceV2: true, ifindex: 7},
	}
	for _, c := range []struct {
		name     string
		entries  []gidEntry
		ethernet bool
		want     int
		err      string
	}{
		{"RoCE picks RoCEv2 IPv4", rxe, true, 3, ""},
		{"first IPv4 of two", append(rxe, gidEntry{index: 5, gid: v4b, roceV2: true}), true, 3, ""},
		{"RoCE without IPv4", []gidEntry{{index: 0, gid: ll}, {index: 1, gid: ll, roceV2: true}, {index: 4, gid: v6, roceV2: true}}, true, 0, "no RoCEv2 GID with an IPv4 address"},
		{"RoCEv1 only", []gidEntry{{index: 2, gid: v4}}, true, 0, "2: ::ffff:192.0.2.1 (RoCEv1)"},
		{"empty RoCE table", nil, true, 0, "empty"},
		{"InfiniBand uses index 0", []gidEntry{{index: 1, gid: v6}, {index: 0, gid: ll}}, false, 0, ""},
		{"InfiniBand without index 0", []gidEntry{{index: 1, gid: ll}}, false, 0, "index 0 is empty"},
	} {
		got, err := chooseGID(c.entries, c.ethernet)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && got.index != c.want:
			t.Errorf("%s: chose index %d, want %d", c.name, got.index, c.want)
		}
	}
	if e, err := pickGID(rxe, 1); err != nil || e.gid != ll || !e.roceV2 {
		t.Errorf("pickGID(1) = %+v, %v", e, err)
	}
	if _, err := pickGID(rxe, 9); err == nil {
		t.Error("pickGID of an empty index succeeded")
	}
}

func TestParseGIDType(t *testing.T) {
	for _, c := range []struct {
		in     string
		v2, ok bool
	}{
		{"RoCE v2\n", true, true},
		{"IB/RoCE v1\n", false, true},
		{"RoCE v2", true, true},
		{"", false, false},
		{"iWARP\n", false, false},
	} {
		v2, err := parseGIDType(c.in)
		if v2 != c.v2 || (err == nil) != c.ok {
			t.Errorf("parseGIDType(%q) = %v, %v", c.in, v2, err)
		}
	}
}
