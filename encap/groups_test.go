package encap

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseKernelGroups(t *testing.T) {
	igmp := "Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter\n" +
		"1\tlo        :     1      V3\n" +
		"\t\t\t\t010000E0     1 0:00000000\t\t0\n" +
		"7\tib0       :     2      V3\n" +
		"\t\t\t\t030201EF     1 0:00000000\t\t0\n" +
		"\t\t\t\t010000E0     1 0:00000000\t\t0\n" +
		"8\teth0      :     1      V3\n" +
		"\t\t\t\t020000E0     1 0:00000000\t\t0\n"
	igmp6 := "1    lo              ff020000000000000000000000000001     1 0000000C 0\n" +
		"7    ib0             ff0200000000000000000001ff000001     1 00000004 0\n" +
		"7    ib0             ff020000000000000000000000000001     1 0000000C 0\n" +
		"7    ib0             zz020000000000000000000000000001     1 0000000C 0\n"
	for _, tc := range []struct {
		name  string
		parse func(r *strings.Reader) ([]netip.Addr, error)
		in    string
		want  []string
	}{
		{"igmp", func(r *strings.Reader) ([]netip.Addr, error) { return ParseIGMP(r, "ib0") }, igmp, []string{"239.1.2.3", "224.0.0.1"}},
		{"igmp6", func(r *strings.Reader) ([]netip.Addr, error) { return ParseIGMP6(r, "ib0") }, igmp6, []string{"ff02::1:ff00:1", "ff02::1"}},
		{"other device", func(r *strings.Reader) ([]netip.Addr, error) { return ParseIGMP(r, "ib1") }, igmp, nil},
		{"garbage", func(r *strings.Reader) ([]netip.Addr, error) { return ParseIGMP(r, "ib0") }, "ib0\n\tzz\n\t\n", nil},
	} {
		got, err := tc.parse(strings.NewReader(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var gs []string
		for _, g := range got {
			gs = append(gs, g.String())
		}
		if !slices.Equal(gs, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, gs, tc.want)
		}
	}
}
