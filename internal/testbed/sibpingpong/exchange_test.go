package main

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// The record as ibv_rc_pingpong writes it: sprintf("%04x:%06x:%06x:%s")
// with gid_to_wire_gid's 32 digits, in a 52-octet buffer.
func TestRecordMatchesRDMACore(t *testing.T) {
	gid := ib.GIDFromAddr(netip.MustParseAddr("192.0.2.1"))
	tests := []struct {
		d    dest
		want string
	}{
		{dest{QPN: 0x11, PSN: 0xabcdef, GID: gid}, "0000:000011:abcdef:00000000000000000000ffffc0000201\x00"},
		{dest{LID: 0x1234, QPN: 0xffffff, PSN: 0}, "1234:ffffff:000000:00000000000000000000000000000000\x00"},
		{dest{QPN: 0x1c3, PSN: 1, GID: ib.GIDFromAddr(netip.MustParseAddr("fd00:5151::1"))}, "0000:0001c3:000001:fd005151000000000000000000000001\x00"},
	}
	for _, tt := range tests {
		got := string(appendRecord(nil, tt.d))
		if got != tt.want || len(got) != recordLen {
			t.Errorf("appendRecord(%+v) = %q, want %q (%d octets)", tt.d, got, tt.want, recordLen)
		}
		back, err := parseRecord([]byte(got))
		if err != nil || back != tt.d {
			t.Errorf("parseRecord(%q) = %+v, %v; want %+v", got, back, err, tt.d)
		}
	}
}

func TestParseRecordRejects(t *testing.T) {
	for _, in := range []string{
		"",
		"0000:000011:abcdef\x00",
		"0000:1000000:abcdef:00000000000000000000ffffc0000201\x00",  // QPN beyond 24 bits
		"0000:000011:abcdef:00000000000000000000ffffc000020\x00",    // 31 digits
		"0000:000011:abcdef:0000000000000000000zffffc0000201\x00",   // not hex
		"0000:000011:abcdef:00000000000000000000ffffc0000201:1\x00", // extra field
		"x000:000011:abcdef:00000000000000000000ffffc0000201\x00",
	} {
		if d, err := parseRecord([]byte(in)); err == nil {
			t.Errorf("parseRecord(%q) = %+v, want an error", in, d)
		}
	}
}

// The two halves of the exchange against each other, as rdma-core's
// client and server would run them: record counts (256 for srq), the
// order (the server connects before it answers) and the closing "done".
func TestExchange(t *testing.T) {
	for _, k := range []kind{kindRC, kindUD, kindSRQ} {
		t.Run(k.String(), func(t *testing.T) {
			n := 1
			if k == kindSRQ {
				n = 16
			}
			var cli, srv []dest
			for i := range n {
				cli = append(cli, dest{QPN: ib.QPN(0x100 + i), PSN: uint32(i), GID: ib.GID{15: 1}})
				srv = append(srv, dest{QPN: ib.QPN(0x200 + i), PSN: uint32(0x10000 + i), GID: ib.GID{15: 2}})
			}
			a, b := net.Pipe()
			var wire bytes.Buffer // what the client sent
			type result struct {
				got []dest
				err error
			}
			done := make(chan result, 1)
			connected := false
			go func() {
				got, err := serverExchange(b, k, srv, func(p []dest) error {
					connected = len(p) == n
					return nil
				})
				b.Close()
				done <- result{got, err}
			}()
			gotSrv, err := clientExchange(struct {
				io.Reader
				io.Writer
			}{a, io.MultiWriter(a, &wire)}, k, cli)
			if err != nil {
				t.Fatalf("client: %v", err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("server: %v", r.err)
			}
			if !connected {
				t.Error("the server did not connect before answering")
			}
			for i := range n {
				if gotSrv[i] != srv[i] || r.got[i] != cli[i] {
					t.Fatalf("record %d: client got %+v want %+v, server got %+v want %+v", i, gotSrv[i], srv[i], r.got[i], cli[i])
				}
			}
			wantLen := records(k)*recordLen + len(doneMsg)
			if wire.Len() != wantLen || !strings.HasSuffix(wire.String(), "done\x00") {
				t.Errorf("client wrote %d octets ending %q, want %d ending \"done\\x00\"", wire.Len(), wire.String()[max(0, wire.Len()-5):], wantLen)
			}
		})
	}
}
