package testutil

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// fakeTB records a failure instead of ending the test, so that the
// helpers' failures can be checked too.
type fakeTB struct {
	testing.TB
	failed bool
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Fatalf(string, ...any) { f.failed = true }

func TestUnhex(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   string
		want []byte // nil: the vector must fail
	}{
		{"spaces", "04 f0 8123", []byte{0x04, 0xf0, 0x81, 0x23}},
		{"field boundaries", "00 | 00 04 0a", []byte{0, 0, 4, 0x0a}},
		{"ip link", "80:00:00:48", []byte{0x80, 0, 0, 0x48}},
		{"comments", "04    # OpCode 0x04 RC SEND Only\n\tf0  # SE 0x80\r\n", []byte{0x04, 0xf0}},
		{"comment only", "# nothing\n", []byte{}},
		{"odd digits", "abc", nil},
		{"not hex", "0g", nil},
		{"another comment syntax", "04 // OpCode", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeTB{TB: t}
			got := Unhex(f, tt.in)
			if f.failed != (tt.want == nil) || tt.want != nil && !bytes.Equal(got, tt.want) {
				t.Errorf("Unhex(%q) = % x, failed %v; want % x", tt.in, got, f.failed, tt.want)
			}
		})
	}
}

func TestWantField(t *testing.T) {
	bth := ib.ErrField("BTH", "PadCnt", "too large")
	for _, tt := range []struct {
		name          string
		err           error
		format, field string
		fail          bool
	}{
		{"match", bth, "BTH", "PadCnt", false},
		{"wrapped", errors.Join(errors.New("packet"), bth), "BTH", "PadCnt", false},
		{"any format", bth, "", "PadCnt", false},
		{"other field", bth, "BTH", "TVer", true},
		{"other format", bth, "DETH", "PadCnt", true},
		{"any format, other field", bth, "", "TVer", true},
		{"no error", nil, "BTH", "PadCnt", true},
		{"plain error", errors.New("PadCnt"), "", "PadCnt", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeTB{TB: t}
			WantField(f, tt.err, tt.format, tt.field)
			if f.failed != tt.fail {
				t.Errorf("WantField(%v, %q, %q) failed %v, want %v", tt.err, tt.format, tt.field, f.failed, tt.fail)
			}
		})
	}
}

func TestMustGID(t *testing.T) {
	if g := MustGID("fe80::2:c903:a:bcde"); g != (ib.GID{0: 0xfe, 1: 0x80, 9: 0x02, 0xc9, 0x03, 0, 0x0a, 0xbc, 0xde}) {
		t.Errorf("MustGID = %v", g)
	}
	defer func() {
		if recover() == nil {
			t.Error("MustGID of 192.0.2.1 did not panic")
		}
	}()
	MustGID("192.0.2.1")
}

// TestPcap checks the layout against the pcap format (a 24-octet file
// header, a 16-octet header per record), and that tshark reads it back.
func TestPcap(t *testing.T) {
	frames := [][]byte{{1, 2, 3}, bytes.Repeat([]byte{0xee}, 60)}
	b := Pcap(LinkTypeEthernet, frames)
	le := binary.LittleEndian
	if len(b) != 24+16+3+16+60 || le.Uint32(b) != 0xa1b2c3d4 || le.Uint32(b[20:]) != LinkTypeEthernet {
		t.Fatalf("file header % x, %d octets", b[:24], len(b))
	}
	if rec := b[24+16+3:]; le.Uint32(rec) != 1 || le.Uint32(rec[8:]) != 60 || le.Uint32(rec[12:]) != 60 {
		t.Errorf("second record header % x", rec[:16])
	}

	file := t.TempDir() + "/frames.pcap"
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	got := Tshark(t, "-r", file, "-T", "fields", "-e", "frame.len")
	if len(got) != 2 || got[0] != "3" || got[1] != "60" {
		t.Errorf("tshark reads frame lengths %q, want [3 60]", got)
	}
}
