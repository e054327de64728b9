package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ipoibd/ipoibd/ipoib"
)

// TestConnTable: the narrow table fits 100 columns even with the widest
// figures (IPv4 peers, a 24-bit QPN), names each peer by its IP address
// and QPN@GUID, says n/a for what the provider cannot tell and the state
// of a connection not up; --wide has the full link address and exact
// figures.
func TestConnTable(t *testing.T) {
	const link = "80:0f:ff:ff:fe:80:00:00:00:00:00:00:02:00:0a:4d:fe:00:00:02"
	widest := ipoib.ConnInfo{
		Peer: link, PeerIPs: []string{"192.168.255.254", "fd00:77::2"}, PeerGUID: "0x02000a4dfe000002", PeerUDQPN: 0xffffff,
		Type: "RC", Direction: "out", State: "established", QPState: "RTS", Sends: true, LocalQPN: 0xabcdef, RemoteQPN: 0x123456,
		MTU: 65516, PathMTU: 4096, TxPackets: 1 << 40, TxBytes: 999_999_999_999_999, RxPackets: 12, RxBytes: 999_499,
		RNRNAKs: 9_999_999, Retransmits: 123_456, UDFallbacks: 99_999, AgeSecs: 999 * 86400, UpSecs: 998*86400 + 23*3600,
	}
	setup := ipoib.ConnInfo{Peer: link, PeerIPs: []string{}, PeerGUID: "0x02000a4dfe000003", PeerUDQPN: 0x48, Type: "UC", Direction: "in",
		State: "dreq-sent", QPState: "ERR", RNRNAKs: -1, Retransmits: -1}
	raw, err := json.Marshal([]ipoib.ConnInfo{widest, setup})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		wide      bool
		maxWidth  int // 0: any
		line      int // 1: widest's, 2: setup's
		want, not []string
	}{
		{false, 100, 1, []string{"192.168.255.254 +1", "ffffff@02000a4dfe000002", "RC out", "1.0PB", "999kB", "10M", "123k", "100k", "up 998d23h"},
			[]string{link, "fd00:77::2"}},
		{false, 100, 2, []string{"-", "48@02000a4dfe000003", "UC in", "0B", "n/a", "dreq-sent"}, nil},
		{true, 0, 1, []string{"192.168.255.254,fd00:77::2", link, "0xabcdef", "0x123456", "65516", "4096", "999999999999999", "1099511627776", "9999999", "123456", "99999", "23976h0m0s", "23975h0m0s"}, nil},
		{true, 0, 2, []string{link, "n/a", "dreq-sent"}, []string{"48@", "up"}},
	} {
		var b bytes.Buffer
		if err := printConns(&b, raw, tc.wide); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("wide %v: %d lines, want a header and two:\n%s", tc.wide, len(lines), b.String())
		}
		for _, l := range lines {
			if n := utf8.RuneCountInString(l); tc.maxWidth > 0 && n > tc.maxWidth {
				t.Errorf("wide %v: a line of %d columns, want at most %d:\n%s", tc.wide, n, tc.maxWidth, l)
			}
		}
		line := lines[tc.line]
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("wide %v: no %q in\n%s", tc.wide, w, line)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(line, n) {
				t.Errorf("wide %v: %q in\n%s", tc.wide, n, line)
			}
		}
		t.Logf("wide %v:\n%s", tc.wide, b.String())
	}
}

func TestShortFigures(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{shortBytes(0), "0B"}, {shortBytes(999), "999B"}, {shortBytes(1000), "1.0kB"}, {shortBytes(12_345), "12kB"},
		{shortBytes(999_499), "999kB"}, {shortBytes(999_999), "1.0MB"}, {shortBytes(1<<64 - 1), "18EB"},
		{shortCount(9999), "9999"}, {shortCount(10_000), "10k"}, {shortCount(1_250_000), "1.2M"},
		{shortAge(0), "0s"}, {shortAge(59), "59s"}, {shortAge(61), "1m01s"}, {shortAge(3600*5 + 7*60 + 9), "5h07m"},
		{shortAge(86400*3 + 3600*4), "3d04h"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
