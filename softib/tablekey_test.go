package softib

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// TestTableKey: a QP or MAD asking for a P_Key gets the port's entry for
// its partition, with the membership the subnet manager gave the port.
func TestTableKey(t *testing.T) {
	d := &Device{cfg: Config{PKeys: []ib.PKey{0xffff, 0x0001, 0x8002, 0x0002, 0x0003}}}
	tests := []struct {
		ask, want ib.PKey
		ok        bool
	}{
		{0xffff, 0xffff, true},
		{0x7fff, 0xffff, true}, // only the full entry: the port sends as full
		{0x8001, 0x0001, true}, // a limited member sends as one, whatever it asks
		{0x0001, 0x0001, true},
		{0x8002, 0x8002, true},
		{0x0002, 0x0002, true}, // both held: the exact entry
		{0x8003, 0x0003, true},
		{0x8004, 0, false},
		{0x8000, 0, false},
		{0x0000, 0, false},
	}
	for _, tt := range tests {
		got, ok := d.tableKey(tt.ask)
		if got != tt.want || ok != tt.ok {
			t.Errorf("tableKey(%v) = %v, %v; want %v, %v", tt.ask, got, ok, tt.want, tt.ok)
		}
	}
}
