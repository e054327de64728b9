package wire

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// The opcode table against spec §2, written out row by row.
func TestOpcodeTable(t *testing.T) {
	tests := []struct {
		op      Opcode
		name    string
		tr      ib.QPType
		ext     ExtHeaders
		pos     Position
		payload bool
		valid   bool
	}{
		{0x00, "RC SEND First", ib.RC, 0, PosFirst, true, true},
		{0x01, "RC SEND Middle", ib.RC, 0, PosMiddle, true, true},
		{0x02, "RC SEND Last", ib.RC, 0, PosLast, true, true},
		{0x03, "RC SEND Last with Immediate", ib.RC, HasImmDt, PosLast, true, true},
		{0x04, "RC SEND Only", ib.RC, 0, PosOnly, true, true},
		{0x05, "RC SEND Only with Immediate", ib.RC, HasImmDt, PosOnly, true, true},
		{0x06, "RC RDMA WRITE First", ib.RC, HasRETH, PosFirst, true, false},
		{0x0a, "RC RDMA WRITE Only", ib.RC, HasRETH, PosOnly, true, false},
		{0x0b, "RC RDMA WRITE Only with Immediate", ib.RC, HasRETH | HasImmDt, PosOnly, true, false},
		{0x0c, "RC RDMA READ Request", ib.RC, HasRETH, PosNone, false, false},
		{0x0e, "RC RDMA READ Response Middle", ib.RC, 0, PosMiddle, true, false},
		{0x10, "RC RDMA READ Response Only", ib.RC, HasAETH, PosOnly, true, false},
		{0x11, "RC Acknowledge", ib.RC, HasAETH, PosNone, false, true},
		{0x12, "RC Atomic Acknowledge", ib.RC, HasAETH | HasAtomicAckETH, PosNone, false, false},
		{0x13, "RC CmpSwap", ib.RC, HasAtomicETH, PosNone, false, false},
		{0x16, "RC SEND Last with Invalidate", ib.RC, HasIETH, PosLast, true, false},
		{0x17, "RC SEND Only with Invalidate", ib.RC, HasIETH, PosOnly, true, false},
		{0x20, "UC SEND First", ib.UC, 0, PosFirst, true, true},
		{0x21, "UC SEND Middle", ib.UC, 0, PosMiddle, true, true},
		{0x22, "UC SEND Last", ib.UC, 0, PosLast, true, true},
		{0x23, "UC SEND Last with Immediate", ib.UC, HasImmDt, PosLast, true, true},
		{0x24, "UC SEND Only", ib.UC, 0, PosOnly, true, true},
		{0x25, "UC SEND Only with Immediate", ib.UC, HasImmDt, PosOnly, true, true},
		{0x2a, "UC RDMA WRITE Only", ib.UC, HasRETH, PosOnly, true, false},
		{0x64, "UD SEND Only", ib.UD, HasDETH, PosOnly, true, true},
		{0x65, "UD SEND Only with Immediate", ib.UD, HasDETH | HasImmDt, PosOnly, true, true},
	}
	for _, tt := range tests {
		o := tt.op
		if o.String() != tt.name || o.Transport() != tt.tr || o.Headers() != tt.ext ||
			o.Position() != tt.pos || o.HasPayload() != tt.payload || o.Valid() != tt.valid || !o.Known() {
			t.Errorf("%#02x: %q %v %b %v payload=%v valid=%v, want %q %v %b %v payload=%v valid=%v", uint8(o),
				o, o.Transport(), o.Headers(), o.Position(), o.HasPayload(), o.Valid(),
				tt.name, tt.tr, tt.ext, tt.pos, tt.payload, tt.valid)
		}
		if want := BTHLen + tt.ext.Len(); o.HeaderLen() != want {
			t.Errorf("%v: HeaderLen %d, want %d", o, o.HeaderLen(), want)
		}
	}
}

// Exactly the SEND family of RC, UC and UD and the RC ACK are accepted.
func TestOpcodeValidSet(t *testing.T) {
	want := map[Opcode]bool{}
	for _, o := range []Opcode{0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x11, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x64, 0x65} {
		want[o] = true
	}
	for i := range 256 {
		o := Opcode(i)
		if o.Valid() != want[o] {
			t.Errorf("%#02x (%v): Valid %v", i, o, o.Valid())
		}
	}
	// Unknown opcodes: RD, CNP, XRC, reserved operations.
	for _, o := range []Opcode{0x15, 0x31, 0x2c, 0x40, 0x60, 0x66, 0x80, 0x81, 0xa0, 0xe0, 0xff} {
		if o.Known() || o.Transport() != 0 || o.HeaderLen() != 0 || o.String() != "Opcode(0x"+hex2(uint8(o))+")" {
			t.Errorf("%#02x: known=%v transport=%v len=%d %q", uint8(o), o.Known(), o.Transport(), o.HeaderLen(), o)
		}
	}
}

func hex2(v uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>4], digits[v&15]})
}

func TestExtHeadersLen(t *testing.T) {
	all := HasDETH | HasRETH | HasAtomicETH | HasAETH | HasAtomicAckETH | HasImmDt | HasIETH
	if got := all.Len(); got != 8+16+28+4+8+4+4 {
		t.Fatalf("all headers: %d octets", got)
	}
}
