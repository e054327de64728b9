// Package testutil holds the helpers that the tests of several packages
// share, so that each is written once: hex test vectors, checks of
// *ib.FieldError, GIDs written as text, and pcap files read back by
// tshark. Only tests import it.
package testutil

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/ipoibd/ipoibd/ib"
)

// Unhex decodes a test vector written as hex digits. White space, '|'
// (a field boundary) and ':' (as `ip link` prints link addresses) are
// ignored, and '#' starts a comment that runs to the end of the line, so
// that a vector can be laid out one field a line with the spec's names:
//
//	04          # OpCode: RC SEND Only
//	81 23       # P_Key
//
// A vector that does not decode fails the test at once.
func Unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	var digits strings.Builder
	for line := range strings.Lines(s) {
		line, _, _ = strings.Cut(line, "#")
		for _, r := range line {
			if !unicode.IsSpace(r) && r != '|' && r != ':' {
				digits.WriteRune(r)
			}
		}
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		tb.Fatalf("bad hex vector %q: %v", s, err)
	}
	return b
}

// WantField fails the test at once unless err is an *ib.FieldError naming
// field of format; an empty format accepts any.
func WantField(tb testing.TB, err error, format, field string) {
	tb.Helper()
	var fe *ib.FieldError
	switch {
	case err == nil:
		tb.Fatalf("no error, want an *ib.FieldError naming %s/%s", format, field)
	case !errors.As(err, &fe):
		tb.Fatalf("error %v (%T), want an *ib.FieldError naming %s/%s", err, err, format, field)
	case fe.Field != field || format != "" && fe.Format != format:
		tb.Fatalf("error %q names %s/%s, want %s/%s", err, fe.Format, fe.Field, format, field)
	}
}

// MustGID parses a GID the test writes out, and panics if it does not
// parse (like netip.MustParseAddr), so that it serves in package-level
// vectors too.
func MustGID(s string) ib.GID {
	g, err := ib.ParseGID(s)
	if err != nil {
		panic(err)
	}
	return g
}

// Link types of a pcap file's frames.
const (
	LinkTypeEthernet = 1   // Ethernet (softib's RoCEv2 frames)
	LinkTypeLinuxSLL = 113 // Linux cooked capture (IPoIB packets)
)

// Pcap returns a classic little-endian pcap file holding frames, one a
// second from the epoch on.
func Pcap(linkType uint32, frames [][]byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 0xa1b2c3d4)
	b = binary.LittleEndian.AppendUint16(b, 2)
	b = binary.LittleEndian.AppendUint16(b, 4)
	b = binary.LittleEndian.AppendUint32(b, 0)     // thiszone
	b = binary.LittleEndian.AppendUint32(b, 0)     // sigfigs
	b = binary.LittleEndian.AppendUint32(b, 65535) // snaplen
	b = binary.LittleEndian.AppendUint32(b, linkType)
	for i, f := range frames {
		b = binary.LittleEndian.AppendUint32(b, uint32(i)) // seconds
		b = binary.LittleEndian.AppendUint32(b, 0)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// Tshark runs tshark with args and returns its output lines (none for
// empty output). It skips the test where tshark is not installed, and
// runs it without the user's profile (HOME is an empty directory), so
// that nobody's preferences change what it prints.
func Tshark(tb testing.TB, args ...string) []string {
	tb.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		tb.Skip("tshark not installed")
	}
	cmd := exec.Command(tshark, args...)
	cmd.Env = append(os.Environ(), "HOME="+tb.TempDir())
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		tb.Fatalf("tshark %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	s := strings.TrimRight(string(out), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// WritePcap writes frames as a pcap file called name in the test's
// temporary directory and returns its path.
func WritePcap(tb testing.TB, name string, linkType uint32, frames [][]byte) string {
	tb.Helper()
	file := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(file, Pcap(linkType, frames), 0o644); err != nil {
		tb.Fatal(err)
	}
	return file
}

// TsharkFields has tshark print fields of every frame in file, '|'
// between them (opts are more tshark options, e.g. "-E", "occurrence=a"),
// and returns a row of values per frame. It fails the test at once unless
// there are as many rows as frames.
func TsharkFields(tb testing.TB, file string, frames int, fields []string, opts ...string) [][]string {
	tb.Helper()
	args := append([]string{"-r", file, "-T", "fields", "-E", "separator=|"}, opts...)
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	lines := Tshark(tb, args...)
	if len(lines) != frames {
		tb.Fatalf("tshark printed %d lines for %d frames:\n%s", len(lines), frames, strings.Join(lines, "\n"))
	}
	rows := make([][]string, len(lines))
	for i, l := range lines {
		rows[i] = strings.Split(l, "|")
	}
	return rows
}

// Fill writes a payload pattern that seed sets apart, so that a receiver
// can tell which message it got and whether every octet arrived.
func Fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(seed*7 + i*13)
	}
}

// Slot is IPOIBD_TEST_SLOT (1..4), or 0 when it is unset or out of range:
// the tests of up to five checkouts run on one machine at once, each slot
// with cluster numbers, names and fixed ports of its own.
var Slot = func() int {
	n, err := strconv.Atoi(os.Getenv("IPOIBD_TEST_SLOT"))
	if err != nil || n < 1 || n > 4 {
		return 0
	}
	return n
}()

// Port moves a fixed test port by 1000 a slot, so that checkouts testing
// at once do not open the same sockets in the root namespace (127.x).
func Port(p uint16) uint16 { return p + uint16(1000*Slot) }
