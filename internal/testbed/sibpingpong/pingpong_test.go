package main

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

func freePort(t *testing.T, network string) int {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Both roles of each pingpong against each other on loopback: the same
// loop, attributes and checks the test bed runs against rdma-core, so a
// broken run there is about the peer, not about this program.
func TestPingpongBothRoles(t *testing.T) {
	tests := []struct {
		kind        kind
		size, iters int
		mtu         ib.MTU
	}{
		{kindRC, 1, 200, ib.MTU1024},
		{kindRC, 65536, 20, ib.MTU4096},
		{kindUC, 3000, 50, ib.MTU1024},
		{kindUD, 1024, 100, ib.MTU1024},
		{kindSRQ, 5000, 100, ib.MTU1024},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			base := config{
				kind: tt.kind, tcpPort: freePort(t, "tcp"), udpPort: uint16(freePort(t, "udp")),
				size: tt.size, iters: tt.iters, mtu: tt.mtu, rxDepth: 64, numQP: 1, timeout: 20 * time.Second, cqHandler: true,
			}
			if tt.kind == kindSRQ {
				base.numQP = 4
			}
			srv, cli := base, base
			srv.local = netip.MustParseAddr("127.0.0.1")
			cli.local = netip.MustParseAddr("127.0.0.2")
			cli.server = "127.0.0.1"
			var srvOut, cliOut bytes.Buffer
			errc := make(chan error, 1)
			go func() { errc <- run(srv, &srvOut) }()
			if err := run(cli, &cliOut); err != nil {
				t.Errorf("client: %v\n%s", err, cliOut.String())
			}
			if err := <-errc; err != nil {
				t.Errorf("server: %v\n%s", err, srvOut.String())
			}
			for _, out := range []string{srvOut.String(), cliOut.String()} {
				if !strings.Contains(out, " iters in ") {
					t.Errorf("no iteration summary:\n%s", out)
				}
				// Timing-independent ones only: a loaded host may delay an
				// ACK past the 67 ms timeout and cause a retransmission.
				for _, bad := range []string{"rx_drop_bad_icrc", "rx_drop_malformed", "rx_drop_too_long", "cq_overrun"} {
					if !strings.Contains(out, "counter "+bad+" 0\n") {
						t.Errorf("counter %s not 0:\n%s", bad, out)
					}
				}
			}
		})
	}
}

// A message that is not what we sent (or the peer's fill) fails the run.
func TestCheckRejectsWrongContent(t *testing.T) {
	s := &session{cfg: config{kind: kindRC, size: 600, rxDepth: 2}}
	slab, err := ib.NewSlab(3 * 600)
	if err != nil {
		t.Fatal(err)
	}
	defer slab.Close()
	s.mr = fakeMR{slab}
	s.slotLen = 600
	b := slab.Bytes()[:600]
	for i := range b {
		b[i] = pattern(i)
	}
	b[10] = s.cfg.fill() // the peer's fill is allowed octet by octet
	wc := ib.Completion{ByteLen: 600}
	if err := s.check(0, 0, &wc); err != nil {
		t.Fatalf("the pattern: %v", err)
	}
	copy(b[256:512], b[0:256]) // a block at the wrong offset
	if err := s.check(0, 0, &wc); err == nil {
		t.Error("a misplaced block passed")
	}
	for i := range b {
		b[i] = pattern(i)
	}
	wc.ByteLen = 599
	if err := s.check(0, 0, &wc); err == nil {
		t.Error("a short message passed")
	}
}

type fakeMR struct{ s *ib.Slab }

func (m fakeMR) Slab() *ib.Slab { return m.s }
func (m fakeMR) LKey() uint32   { return 1 }
func (m fakeMR) Close() error   { return nil }
