package main

import (
	"testing"
	"time"
)

// TestIdleStopIsQuick: SIGTERM ends an idle daemon with an established
// connection within half a second (systemctl stop, a restart), and still
// says goodbye: the peer hears the DREQ and its connection goes at once
// instead of failing later.
func TestIdleStopIsQuick(t *testing.T) {
	c := newCluster(t, "stop", 2)
	c.start(1)
	c.start(2)
	c.ping(1, c.ip4(2), 2)
	conns := len(c.conns(2))
	if conns == 0 {
		t.Fatal("h2 has no connection to h1 after the pings")
	}
	before := c.stats(2)["cm_disconnected"]
	start := time.Now()
	c.stop(1, "TERM")
	took := time.Since(start)
	t.Logf("SIGTERM to exit: %v", took.Round(time.Millisecond))
	if took > 500*time.Millisecond {
		t.Errorf("an idle daemon took %v to stop, want at most 0.5 s", took.Round(time.Millisecond))
	}
	// The DREQs came: h2 answered them and holds the connections in
	// timewait (their QPs in error), none established.
	if after := c.stats(2)["cm_disconnected"]; after < before+uint64(conns) {
		t.Errorf("h2's cm_disconnected %d -> %d, want +%d (a DREQ for each connection)", before, after, conns)
	}
	for _, cn := range c.conns(2) {
		if cn.State != "timewait" {
			t.Errorf("h2's connection to the stopped h1 is %s, want timewait: %+v", cn.State, cn)
		}
	}
}
