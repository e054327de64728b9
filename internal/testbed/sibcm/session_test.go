package main

import (
	"bytes"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm"
)

// These tests run sibcm against itself on loopback softib devices: they
// check the program's own logic (the rdma_cm header on the wire, the
// message pattern, the verdicts) before the kernel judges it in the test
// bed.

var (
	addrListen  = netip.MustParseAddr("127.0.77.1")
	addrConnect = netip.MustParseAddr("127.0.77.2")
)

type outcome struct {
	err error
	out string
}

// start runs one session in the background.
func start(t *testing.T, c config) <-chan outcome {
	t.Helper()
	if c.timeout == 0 {
		c.timeout = 10 * time.Second
	}
	if c.cmTimeout == 0 {
		c.cmTimeout, c.cmRetries = 14, 3
	}
	var buf bytes.Buffer
	s, err := open(c, &buf)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan outcome, 1)
	go func() {
		err := s.run()
		s.close()
		ch <- outcome{err, buf.String()}
	}()
	return ch
}

func listener(port uint16, mod func(*config)) config {
	c := config{local: addrListen, ps: psTCP, port: port, count: 10, size: 100, dreq: true}
	if mod != nil {
		mod(&c)
	}
	return c
}

func connector(port uint16, mod func(*config)) config {
	c := config{active: true, local: addrConnect, remote: addrListen, ps: psTCP, port: port, count: 10, size: 100, private: "sibcm"}
	if mod != nil {
		mod(&c)
	}
	return c
}

// waitFor collects outcomes; each check gets its session's output on failure.
func waitFor(t *testing.T, chs ...<-chan outcome) []outcome {
	t.Helper()
	res := make([]outcome, len(chs))
	var wg sync.WaitGroup
	for i, ch := range chs {
		wg.Add(1)
		go func() { defer wg.Done(); res[i] = <-ch }()
	}
	wg.Wait()
	return res
}

func TestSelf(t *testing.T) {
	tests := []struct {
		name       string
		listen     config
		connects   []config
		listenErr  string   // "" = must pass
		connectErr []string // per connect; "" = must pass
		listenOut  []string // must appear in the listener's output
	}{
		{
			name:      "data both ways, DREQ from the listener",
			listen:    listener(7101, nil),
			connects:  []config{connector(7101, nil)},
			listenOut: []string{`rdma_cm header: 127.0.77.2:`, `-> 127.0.77.1, consumer data "sibcm"`, "REP sent"},
		},
		{
			name:   "multi-packet messages, DREQ from the connector",
			listen: listener(7102, func(c *config) { c.size, c.dreq = 5000, false }),
			connects: []config{connector(7102, func(c *config) {
				c.size, c.dreq = 5000, true
			})},
		},
		{
			name:       "unlistened service ID draws the engine's REJ 8",
			listen:     listener(7103, func(c *config) { c.rejects = []cm.RejectReason{cm.RejConsumerReject} }),
			connects:   []config{connector(7104, func(c *config) { c.expectReject = []cm.RejectReason{cm.RejInvalidServiceID} }), connector(7103, func(c *config) { c.expectReject = []cm.RejectReason{cm.RejConsumerReject} })},
			connectErr: []string{"", ""},
		},
		{
			name:       "a REQ accepted when a REJ was expected fails",
			listen:     listener(7105, nil),
			connects:   []config{connector(7105, func(c *config) { c.expectReject = []cm.RejectReason{cm.RejStaleConnection} })},
			listenErr:  "rejected by the peer: reason 28",
			connectErr: []string{"REQ accepted, expected REJ reason 10"},
		},
		{
			name:       "the wrong REJ reason fails",
			listen:     listener(7106, func(c *config) { c.rejects = []cm.RejectReason{cm.RejNoResources} }),
			connects:   []config{connector(7106, func(c *config) { c.expectReject = []cm.RejectReason{cm.RejNoQP} })},
			connectErr: []string{"rejected by the peer: reason 3"},
		},
		{
			name:       "REJ 28 of the REP reaches the listener",
			listen:     listener(7107, nil),
			connects:   []config{connector(7107, func(c *config) { c.abandon = "reply" })},
			listenErr:  "rejected by the peer: reason 28",
			connectErr: []string{""},
		},
		{
			name:       "REJ 4 after the REP reaches the listener",
			listen:     listener(7108, nil),
			connects:   []config{connector(7108, func(c *config) { c.abandon = "timeout" })},
			listenErr:  "rejected by the peer: reason 4",
			connectErr: []string{""},
		},
		{
			name:       "a restarted engine answers the REP with a REJ 6 the listener can match",
			listen:     listener(7109, nil),
			connects:   []config{connector(7109, func(c *config) { c.abandon = "restart" })},
			listenErr:  "rejected by the peer: reason 6",
			connectErr: []string{""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := start(t, tt.listen)
			var res []outcome
			for _, c := range tt.connects {
				res = append(res, waitFor(t, start(t, c))...)
			}
			lres := waitFor(t, l)[0]
			check := func(who string, o outcome, want string) {
				switch {
				case want == "" && o.err != nil:
					t.Errorf("%s failed: %v\n%s", who, o.err, o.out)
				case want != "" && (o.err == nil || !strings.Contains(o.err.Error(), want)):
					t.Errorf("%s: err %v, want one containing %q\n%s", who, o.err, want, o.out)
				}
			}
			check("listener", lres, tt.listenErr)
			for i, o := range res {
				want := ""
				if i < len(tt.connectErr) {
					want = tt.connectErr[i]
				}
				check("connector", o, want)
				if !strings.Contains(o.out, "engine: mads_in") {
					t.Errorf("connector: engine counters missing or malformed MADs:\n%s", o.out)
				}
			}
			for _, w := range tt.listenOut {
				if !strings.Contains(lres.out, w) {
					t.Errorf("listener output lacks %q:\n%s", w, lres.out)
				}
			}
		})
	}
}
