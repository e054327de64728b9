package ib

import (
	"errors"
	"testing"
)

// A Linux IPoIB address as `ip link` prints it: RC flag, UD QPN 0x48, GID
// fe80::2:c903:a:bcde.
const linuxAddr = "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:bc:de"

var linuxAddrBytes = [LinkAddrLen]byte{
	0x80,             // flags: RC
	0x00, 0x00, 0x48, // UD QPN
	0xfe, 0x80, 0, 0, 0, 0, 0, 0, // GID subnet prefix
	0x00, 0x02, 0xc9, 0x03, 0x00, 0x0a, 0xbc, 0xde, // GID interface ID
}

func TestLinkAddrGolden(t *testing.T) {
	want := LinkAddr{Flags: FlagRC, QPN: 0x48, GID: mustGID(t, "fe80::2:c903:a:bcde")}
	got, err := DecodeLinkAddr(linuxAddrBytes[:])
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("decode = %+v, want %+v", got, want)
	}
	if b := want.Bytes(); b != linuxAddrBytes {
		t.Fatalf("encode = % x, want % x", b, linuxAddrBytes)
	}
	if s := want.String(); s != linuxAddr {
		t.Fatalf("String = %s, want %s", s, linuxAddr)
	}
	parsed, err := ParseLinkAddr(linuxAddr)
	if err != nil || parsed != want {
		t.Fatalf("ParseLinkAddr = %+v, %v", parsed, err)
	}
}

func TestLinkAddrFlags(t *testing.T) {
	tests := []struct {
		wire      byte
		flags     LinkFlags
		reencoded byte
		name      string
	}{
		{0x00, 0, 0x00, "UD"},
		{0x80, FlagRC, 0x80, "RC"},
		{0x40, FlagUC, 0x40, "UC"},
		{0xc0, FlagRC | FlagUC, 0xc0, "RC+UC"},
		{0xff, FlagRC | FlagUC, 0xc0, "RC+UC"}, // reserved bits ignored on decode, zero on encode
		{0x3f, 0, 0x00, "UD"},
	}
	for _, tt := range tests {
		b := linuxAddrBytes
		b[0] = tt.wire
		a, err := DecodeLinkAddr(b[:])
		if err != nil {
			t.Fatal(err)
		}
		if a.Flags != tt.flags || a.Flags.String() != tt.name {
			t.Errorf("flags %#x: decoded %v (%s), want %v (%s)", tt.wire, a.Flags, a.Flags, tt.flags, tt.name)
		}
		a.Flags = LinkFlags(tt.wire) // even when a caller sets reserved bits
		if got := a.Bytes()[0]; got != tt.reencoded {
			t.Errorf("flags %#x: encoded %#x, want %#x", tt.wire, got, tt.reencoded)
		}
	}
}

func TestLinkAddrErrors(t *testing.T) {
	if _, err := DecodeLinkAddr(linuxAddrBytes[:19]); !isField(err, "address") {
		t.Errorf("short decode: %v", err)
	}
	if err := (LinkAddr{QPN: 0x1000000}).Encode(make([]byte, 20)); !isField(err, "QPN") {
		t.Errorf("wide QPN: %v", err)
	}
	if err := (LinkAddr{}).Encode(make([]byte, 19)); !isField(err, "buffer") {
		t.Errorf("short buffer: %v", err)
	}
	for _, s := range []string{"", "80:00", linuxAddr + ":00", "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:bc:zz", "800:0:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:bc:de"} {
		if _, err := ParseLinkAddr(s); err == nil {
			t.Errorf("ParseLinkAddr(%q) accepted", s)
		}
	}
}

func TestCompareIgnoringFlags(t *testing.T) {
	base, _ := ParseLinkAddr(linuxAddr)
	tests := []struct {
		name string
		edit func(*LinkAddr)
		want int // CompareIgnoringFlags(base, edited)
	}{
		{"flags only differ", func(a *LinkAddr) { a.Flags = FlagUC }, 0},
		{"higher QPN", func(a *LinkAddr) { a.QPN = 0x49 }, -1},
		{"lower QPN", func(a *LinkAddr) { a.QPN = 0x47 }, 1},
		// The QPN octets come before the GID, so a larger QPN outweighs a smaller GID.
		{"higher QPN lower GID", func(a *LinkAddr) { a.QPN = 0x49; a.GID[15] = 0 }, -1},
		{"higher GID", func(a *LinkAddr) { a.GID[4] = 0xff }, -1},
	}
	for _, tt := range tests {
		other := base
		tt.edit(&other)
		if got := CompareIgnoringFlags(base, other); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
		if got := CompareIgnoringFlags(other, base); got != -tt.want {
			t.Errorf("%s reversed: got %d, want %d", tt.name, got, -tt.want)
		}
		if base.SameNode(other) != (tt.want == 0) {
			t.Errorf("%s: SameNode = %v", tt.name, base.SameNode(other))
		}
	}
}

func FuzzDecodeLinkAddr(f *testing.F) {
	f.Add(linuxAddrBytes[:])
	f.Add(linuxAddrBytes[:7])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeLinkAddr(b)
		if err != nil {
			return
		}
		enc := a.Bytes()
		again, err := DecodeLinkAddr(enc[:])
		if err != nil || again != a {
			t.Fatalf("round trip: %+v -> %+v, %v", a, again, err)
		}
		if p, err := ParseLinkAddr(a.String()); err != nil || p != a {
			t.Fatalf("String/Parse: %+v -> %+v, %v", a, p, err)
		}
	})
}

func mustGID(t *testing.T, s string) GID {
	t.Helper()
	g, err := ParseGID(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func isField(err error, field string) bool {
	var fe *FieldError
	return errors.As(err, &fe) && fe.Field == field
}
