package main

import (
	"testing"
	"time"
)

// TestLinuxPolicy runs both daemons in the policy the kernel driver
// expects: each sends only on the connection it opened, so every pair has
// two one-way connections and nothing is ever rejected.
func TestLinuxPolicy(t *testing.T) {
	c := newCluster(t, "linux", 2)
	c.start(1, "--cm-policy", "linux")
	c.start(2, "--cm-policy", "linux")
	c.ping(1, c.ip4(2), 3)
	c.ping(2, c.ip4(1), 3)
	c.ping(1, c.ip6(2), 2)
	for k := 1; k <= 2; k++ {
		conns := c.conns(k)
		var out, in int
		for _, x := range conns {
			switch {
			case x.Direction == "out" && x.Sends && x.State == "established":
				out++
			case x.Direction == "in" && !x.Sends:
				in++
			default:
				t.Errorf("h%d: unexpected connection %+v", k, x)
			}
		}
		if out != 1 || in != 1 {
			t.Errorf("h%d: %d outgoing and %d incoming connections, want one each: %+v", k, out, in, conns)
		}
		if s := c.stats(k); s["cm_rejected"] != 0 || s["cm_crossing_rejected"] != 0 {
			t.Errorf("h%d: rejections in linux policy: %v rejected, %v crossing", k, s["cm_rejected"], s["cm_crossing_rejected"])
		}
	}
}

// TestUC connects over UC when both daemons offer only UC.
func TestUC(t *testing.T) {
	c := newCluster(t, "uc", 2)
	c.start(1, "--cm-modes", "uc")
	c.start(2, "--cm-modes", "uc")
	traffic := func() {
		c.ping(1, c.ip4(2), 1)
		// Large pings travel whole (one UC message) at MTU 65520.
		c.on(1, "ping", "-c", "3", "-i", "0.1", "-M", "do", "-s", "50000", c.ip4(2))
		c.ping(1, c.ip4(2), 2) // small ones: SEND Only
	}
	if _, err := lookTools("tshark", "dumpcap"); err != nil {
		traffic()
	} else {
		// UC on the wire: SEND First 0x20, Middle 0x21, Last 0x22, Only 0x24.
		file := capture(t, c, 1, traffic)
		wantOpcodes(t, file, map[string]string{"32": "UC SEND First", "33": "UC SEND Middle", "34": "UC SEND Last", "36": "UC SEND Only"})
		noMalformed(t, file)
	}
	n := c.neighbors(1)[c.ip4(2)]
	if n.Via != "UC" || n.LinkAddr[:2] != "40" {
		t.Errorf("h1 neighbor h2 = %+v, want via UC with the UC flag (0x40)", n)
	}
	// Under the default linux policy h1 sends on its own connection and
	// h2's replies may have opened another, incoming: all UC.
	out := 0
	for _, cn := range c.conns(1) {
		if cn.Type != "UC" {
			t.Errorf("h1 connection %+v, want UC", cn)
		}
		if cn.Direction == "out" {
			out++
		}
	}
	if out != 1 {
		t.Errorf("h1 connections %+v, want one outgoing UC", c.conns(1))
	}
}

// TestIdleConnectionsAreReaped lets a connection idle past --idle-timeout:
// it is torn down (DREQ), and the next packet connects again.
func TestIdleConnectionsAreReaped(t *testing.T) {
	c := newCluster(t, "idle", 2)
	c.start(1, "--idle-timeout", "500ms")
	c.start(2)
	c.ping(1, c.ip4(2), 1)
	// The ping's first packet goes over UD while the connection is set
	// up, and a connection idle for 500 ms may already be gone when a
	// loaded machine asks: the counters tell both apart.
	deadline := time.Now().Add(10 * time.Second)
	for c.stats(1)["cm_established"] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no connection within 10 s of a ping: %+v", c.conns(1))
		}
		time.Sleep(20 * time.Millisecond) // polling the daemon's counter; there is no event to wait on
	}
	deadline = time.Now().Add(10 * time.Second)
	for c.stats(1)["cm_idle_reaped"] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("idle connection not reaped within 10 s: %+v", c.conns(1))
		}
		time.Sleep(100 * time.Millisecond) // polling the daemon's counter; there is no event to wait on
	}
	c.ping(1, c.ip4(2), 2)
	if s := c.stats(1); s["cm_connects"] < 2 {
		t.Errorf("cm_connects = %d after the reap and a new ping, want 2", s["cm_connects"])
	}
}

// TestLossyUnderlay drops 2 % of the fabric's datagrams both ways: RC
// retransmits and TCP above it sees a reliable link.
func TestLossyUnderlay(t *testing.T) {
	if _, err := lookTools("nft"); err != nil {
		t.Skip(err)
	}
	c := newCluster(t, "lossy", 2)
	c.start(1)
	c.start(2)
	c.ping(1, c.ip4(2), 1)
	c.loss(1, 2)
	c.loss(2, 2)
	gbit := iperf3(t, c, 1, 2, c.ip4(2), 2)
	t.Logf("iperf3 over RC through 2 %% loss: %.2f Gbit/s", gbit)
	s := c.stats(1)
	if s["conn_retransmits"] == 0 {
		t.Errorf("no RC retransmissions through 2 %% loss")
	}
	if s["cm_send_failures"] != 0 {
		t.Errorf("connection failed under 2 %% loss: %d send failures", s["cm_send_failures"])
	}
	t.Logf("h1: %d retransmits, %d ACK timeouts", s["conn_retransmits"], s["conn_ack_timeouts"])
}
