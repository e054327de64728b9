package ibfwd

import (
	"net/netip"
	"slices"
	"testing"
)

func TestParsePort(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Port
		ok   bool
	}{
		{"0x0002c90300000001,0x11@10.77.0.1:4791", Port{GUID: 0x0002c90300000001, LID: 0x11, Addr: netip.MustParseAddrPort("10.77.0.1:4791")}, true},
		{"5,32,2@[fd00::1]:4791", Port{GUID: 5, LID: 32, LMC: 2, Addr: netip.MustParseAddrPort("[fd00::1]:4791")}, true},
		{"5,32@10.0.0.1", Port{}, false},
		{"5@10.0.0.1:1", Port{}, false},
		{"0,1@10.0.0.1:1", Port{}, false},
		{"5,1,8@10.0.0.1:1", Port{}, false},
		{"5,0x10000@10.0.0.1:1", Port{}, false},
	} {
		got, err := ParsePort(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePort(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

func TestParseGroupAndSL2VL(t *testing.T) {
	mlid, guids, err := ParseGroup("0xc001=1,0x2")
	if err != nil || mlid != 0xc001 || !slices.Equal(guids, []uint64{1, 2}) {
		t.Fatalf("ParseGroup: %#x %v %v", mlid, guids, err)
	}
	for _, bad := range []string{"0xc001", "x=1", "0xc001=1,y"} {
		if _, _, err := ParseGroup(bad); err == nil {
			t.Errorf("ParseGroup(%q) took it", bad)
		}
	}
	var m [16]uint8
	if err := ParseSL2VL("0=15,1=1", &m); err != nil || m[0] != 15 || m[1] != 1 || m[2] != 0 {
		t.Fatalf("ParseSL2VL: %v %v", m, err)
	}
	for _, bad := range []string{"16=1", "1=16", "1", "a=b"} {
		if err := ParseSL2VL(bad, &m); err == nil {
			t.Errorf("ParseSL2VL(%q) took it", bad)
		}
	}
}
