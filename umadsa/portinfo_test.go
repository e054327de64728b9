package umadsa

import (
	"slices"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

func TestPKeyTable(t *testing.T) {
	for _, c := range []struct {
		in   []uint16
		want []ib.PKey
	}{
		{nil, []ib.PKey{}},
		{[]uint16{0xffff, 0, 0, 0}, []ib.PKey{0xffff}},
		{[]uint16{0xffff, 0, 0x8001, 0, 0x8000}, []ib.PKey{0xffff, 0, 0x8001}}, // 0x8000: a full member of nothing
		{[]uint16{0x7fff, 0x0002}, []ib.PKey{0x7fff, 0x0002}},
		{[]uint16{0, 0}, []ib.PKey{}},
	} {
		if got := pkeyTable(c.in); !slices.Equal(got, c.want) {
			t.Errorf("pkeyTable(%#x) = %#x, want %#x", c.in, got, c.want)
		}
	}
}
