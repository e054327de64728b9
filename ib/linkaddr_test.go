package ib_test

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	// testutil imports ib, so these tests sit outside the package.
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// A Linux IPoIB address as `ip link` prints it: RC flag, UD QPN 0x48, GID
// fe80::2:c903:a:bcde.
const linuxAddr = "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:bc:de"

var linuxAddrBytes = [ib.LinkAddrLen]byte{
	0x80,             // flags: RC
	0x00, 0x00, 0x48, // UD QPN
	0xfe, 0x80, 0, 0, 0, 0, 0, 0, // GID subnet prefix
	0x00, 0x02, 0xc9, 0x03, 0x00, 0x0a, 0xbc, 0xde, // GID interface ID
}

func TestLinkAddrGolden(t *testing.T) {
	want := ib.LinkAddr{Flags: ib.FlagRC, QPN: 0x48, GID: testutil.MustGID("fe80::2:c903:a:bcde")}
	got, err := ib.DecodeLinkAddr(linuxAddrBytes[:])
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
	parsed, err := ib.ParseLinkAddr(linuxAddr)
	if err != nil || parsed != want {
		t.Fatalf("ParseLinkAddr = %+v, %v", parsed, err)
	}
}

func TestLinkAddrFlags(t *testing.T) {
	tests := []struct {
		wire      byte
		flags     ib.LinkFlags
		reencoded byte
		name      string
	}{
		{0x00, 0, 0x00, "UD"},
		{0x80, ib.FlagRC, 0x80, "RC"},
		{0x40, ib.FlagUC, 0x40, "UC"},
		{0xc0, ib.FlagRC | ib.FlagUC, 0xc0, "RC+UC"},
		{0xff, ib.FlagRC | ib.FlagUC, 0xc0, "RC+UC"}, // reserved bits ignored on decode, zero on encode
		{0x3f, 0, 0x00, "UD"},
	}
	for _, tt := range tests {
		b := linuxAddrBytes
		b[0] = tt.wire
		a, err := ib.DecodeLinkAddr(b[:])
		if err != nil {
			t.Fatal(err)
		}
		if a.Flags != tt.flags || a.Flags.String() != tt.name {
			t.Errorf("flags %#x: decoded %v (%s), want %v (%s)", tt.wire, a.Flags, a.Flags, tt.flags, tt.name)
		}
		a.Flags = ib.LinkFlags(tt.wire) // even when a caller sets reserved bits
		if got := a.Bytes()[0]; got != tt.reencoded {
			t.Errorf("flags %#x: encoded %#x, want %#x", tt.wire, got, tt.reencoded)
		}
	}
}

func TestLinkAddrErrors(t *testing.T) {
	_, short := ib.DecodeLinkAddr(linuxAddrBytes[:19])
	for _, tt := range []struct {
		name  string
		err   error
		field string
	}{
		{"short decode", short, "address"},
		{"wide QPN", ib.LinkAddr{QPN: 0x1000000}.Encode(make([]byte, 20)), "QPN"},
		{"short buffer", ib.LinkAddr{}.Encode(make([]byte, 19)), "buffer"},
	} {
		t.Run(tt.name, func(t *testing.T) { testutil.WantField(t, tt.err, "link address", tt.field) })
	}
	for _, s := range []string{"", "80:00", linuxAddr + ":00", "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:bc:zz", "800:0:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:bc:de"} {
		if _, err := ib.ParseLinkAddr(s); err == nil {
			t.Errorf("ParseLinkAddr(%q) accepted", s)
		}
	}
}

func TestCompareIgnoringFlags(t *testing.T) {
	base, _ := ib.ParseLinkAddr(linuxAddr)
	tests := []struct {
		name string
		edit func(*ib.LinkAddr)
		want int // CompareIgnoringFlags(base, edited)
	}{
		{"flags only differ", func(a *ib.LinkAddr) { a.Flags = ib.FlagUC }, 0},
		{"higher QPN", func(a *ib.LinkAddr) { a.QPN = 0x49 }, -1},
		{"lower QPN", func(a *ib.LinkAddr) { a.QPN = 0x47 }, 1},
		// The QPN octets come before the GID, so a larger QPN outweighs a smaller GID.
		{"higher QPN lower GID", func(a *ib.LinkAddr) { a.QPN = 0x49; a.GID[15] = 0 }, -1},
		{"higher GID", func(a *ib.LinkAddr) { a.GID[4] = 0xff }, -1},
	}
	for _, tt := range tests {
		other := base
		tt.edit(&other)
		if got := ib.CompareIgnoringFlags(base, other); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
		if got := ib.CompareIgnoringFlags(other, base); got != -tt.want {
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
		a, err := ib.DecodeLinkAddr(b)
		if err != nil {
			return
		}
		enc := a.Bytes()
		again, err := ib.DecodeLinkAddr(enc[:])
		if err != nil || again != a {
			t.Fatalf("round trip: %+v -> %+v, %v", a, again, err)
		}
		if p, err := ib.ParseLinkAddr(a.String()); err != nil || p != a {
			t.Fatalf("String/Parse: %+v -> %+v, %v", a, p, err)
		}
	})
}
