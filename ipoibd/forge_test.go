package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/forge"
	"github.com/ipoibd/ipoibd/internal/testnet"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/softib/wire"
	"golang.org/x/sys/unix"
)

// Issue 16: a third host on the underlay forges packets at a connection
// between two daemons while ping and iperf3 run over it. Each row forges
// one kind of packet, from the attacker's own address or with the peer's
// address spoofed (but a PSN or QPN outside what is live), and demands
// that the connection stays as it was (same QPNs, established, carrying
// pings and iperf3), that no forged payload reaches a TUN, and that the
// victim counts every forged packet under its cause.

// Hosts of the forge cluster.
const (
	fh1, fh2 = 1, 2 // the two daemons whose connection is attacked
	fh3      = 3    // a daemon that connects to h2 during a REQ flood
	fAtk     = 4    // the attacker: no daemon, its own underlay address
)

// forgeProbePort is where a UDP socket on each victim waits for forged
// payloads that should never arrive through its TUN.
const forgeProbePort = 47123

type forgeEnv struct {
	c     *cluster
	own   *forge.Sender    // from the attacker's own address
	spoof [3]*forge.Sender // spoof[k]: claims to be host k
	link  [4]ib.LinkAddr   // link addresses of h1..h3
	probe [3]int           // UDP socket on host k's IPoIB address
	// Host k's QPs of the h1-h2 connections, as last seen: the one it
	// sends on (ACKs and NAKs arrive there) and the one its peer sends
	// on (SENDs arrive there); the same QP under the rfc policy.
	sendQP, recvQP [3]ib.QPN
	// h1's QPNs of its connections with h2.
	h1QPNs []ib.QPN
}

func (e *forgeEnv) addr(k int) netip.Addr { return netip.MustParseAddr(e.c.underlay(k)) }
func (e *forgeEnv) ipoib(k int) netip.Addr {
	return netip.MustParseAddr(e.c.ip4(k))
}
func peerOf(k int) int { return 3 - k }

// hostCounter names a counter of one host.
type hostCounter struct {
	host int
	name string
}

// forgeRow is one kind of forged packet.
type forgeRow struct {
	name string
	// send forges the packets and returns how many it sent.
	send func(t *testing.T, e *forgeEnv) int
	// causes are the counters whose growth together must account for
	// every packet sent (the kernel's UDP receive-buffer drops at their
	// hosts excused).
	causes []hostCounter
}

func TestForgedPacketsDoNoHarm(t *testing.T) {
	c := newCluster(t, "forge", 4)
	c.start(fh1)
	c.start(fh2, "--max-conns", "64")
	c.start(fh3)
	e := &forgeEnv{c: c}
	for k := fh1; k <= fh3; k++ {
		la, err := ib.ParseLinkAddr(c.show(k).LinkAddr)
		if err != nil {
			t.Fatal(err)
		}
		e.link[k] = la
	}
	testnet.InNamed(t, c.host(fAtk), func() {
		var err error
		if e.own, err = forge.Open(e.addr(fAtk)); err != nil {
			t.Fatal(err)
		}
		for k := fh1; k <= fh2; k++ {
			if e.spoof[k], err = forge.OpenSpoofed(e.addr(k)); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Cleanup(func() {
		e.own.Close()
		e.spoof[fh1].Close()
		e.spoof[fh2].Close()
	})
	e.openProbes(t)
	c.ping(fh1, c.ip4(fh2), 1)

	// iperf3 h1 -> h2 in back-to-back runs for as long as the table takes.
	stopIperf, iperfDone := e.iperf3Loop(t)

	for _, row := range forgeRows() {
		t.Run(row.name, func(t *testing.T) { e.run(t, row) })
	}
	runs := stopIperf()
	<-iperfDone
	if len(runs) == 0 {
		t.Fatal("no iperf3 run completed during the table")
	}
	for i, r := range runs {
		if r.err != "" {
			t.Errorf("iperf3 run %d: %s", i, r.err)
		}
	}
	t.Logf("iperf3 during the table: %d runs, %s Gbit/s", len(runs), iperfRates(runs))

	// The control: what the rows proved absent must be able to show. With
	// the peer's address and the exact PSN, a forged SEND is
	// indistinguishable from the peer's (InfiniBand authenticates nobody)
	// and its payload reaches the TUN probe.
	t.Run("control-exact-spoof-reaches-tun", func(t *testing.T) {
		parent := e.c
		e.c = parent.forTest(t)
		defer func() { e.c = parent }()
		e.exactSpoof(t)
	})
}

// exactSpoof forges, as h2, the SEND h1 expects next: quiet connection,
// one ping from h2 shows the last PSN, the next one is the forged one.
func (e *forgeEnv) exactSpoof(t *testing.T) {
	c := e.c
	const v = fh1
	for try := 0; try < 5; try++ {
		e.ready(t)
		var sn *forge.Sniffer
		testnet.InNamed(t, c.tn.Switch(), func() {
			var err error
			if sn, err = forge.Sniff(c.tn.Port(v)); err != nil {
				t.Fatal(err)
			}
		})
		c.try(peerOf(v), "ping", "-c", "1", "-W", "1", c.ip4(v))
		var last forge.Seen
		n := 0
		_, _ = sn.Await(time.Now().Add(300*time.Millisecond), func(p forge.Seen) bool {
			if p.Dst == e.addr(v) && p.BTH.DestQP == e.recvQP[v] && p.BTH.Opcode.HasPayload() {
				last, n = p, n+1
			}
			return false // to the deadline: the last one counts
		})
		sn.Close()
		if n == 0 {
			continue
		}
		// The whole message in one packet: SEND Only from the last PSN on.
		psn := last.BTH.PSN.Next()
		e.sendTo(t, e.spoof[peerOf(v)], v, forge.RCSend(e.recvQP[v], psn, e.forgedPayload(t, v, 99)))
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if got := e.probed(); got == "forged-99" {
				t.Logf("the exact spoof (PSN %#x) reached h%d's TUN, as it must", uint32(psn), v)
				c.ping(fh1, c.ip4(fh2), 2) // and the connection goes on
				c.ping(fh2, c.ip4(fh1), 2)
				return
			} else if got != "" {
				t.Fatalf("probe got %q", got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Fatal("a SEND spoofed with the peer's address and the next PSN never reached the TUN: the rows' TUN check proves nothing")
}

// forgeRows lists every forged packet kind, each against both ends where
// it applies.
func forgeRows() []forgeRow {
	var rows []forgeRow
	acks := []struct {
		name string
		aeth wire.AETH
	}{
		{"nak-sequence", wire.NAK(wire.NAKPSNSequenceError, 0)},
		{"nak-invalid-request", wire.NAK(wire.NAKInvalidRequest, 0)},
		{"nak-remote-access", wire.NAK(wire.NAKRemoteAccessError, 0)},
		{"nak-remote-operational", wire.NAK(wire.NAKRemoteOperational, 0)},
		{"rnr-nak", wire.RNRNAK(31, 0)},
		{"ack", wire.ACK(0)},
	}
	// perKind packets far from the live PSNs; nearLive across them.
	const perKind, nearLive = 4, 1024
	for _, v := range []int{fh1, fh2} {
		for _, a := range acks {
			// From the attacker's own address, down from ahead of the
			// live PSN to behind it, as fast as they go out: the
			// outstanding window moves up, so they cross it. The source
			// check alone must stop them.
			rows = append(rows, forgeRow{
				name: fmt.Sprintf("%s-own-to-h%d", a.name, v),
				send: func(t *testing.T, e *forgeEnv) int {
					live := e.livePSNs(t, v)
					for i := range nearLive {
						e.sendTo(t, e.own, v, forge.Ack(e.sendQP[v], live.ack.Add(nearLive*3/4-uint32(i)), a.aeth))
					}
					return nearLive
				},
				causes: []hostCounter{{v, "dev_rx_drop_wrong_source"}},
			})
			// With the peer's address but PSNs far from the window.
			rows = append(rows, forgeRow{
				name: fmt.Sprintf("%s-spoofed-to-h%d", a.name, v),
				send: func(t *testing.T, e *forgeEnv) int {
					live := e.livePSNs(t, v)
					for i := range perKind {
						psn := live.ack.Add(1<<22 + uint32(i)*(1<<21))
						e.sendTo(t, e.spoof[peerOf(v)], v, forge.Ack(e.sendQP[v], psn, a.aeth))
					}
					return perKind
				},
				causes: []hostCounter{{v, "dev_rx_stale_acks"}},
			})
		}
		rows = append(rows, forgeRow{
			name: fmt.Sprintf("rc-send-own-to-h%d", v),
			send: func(t *testing.T, e *forgeEnv) int {
				live := e.livePSNs(t, v)
				for i := range nearLive {
					e.sendTo(t, e.own, v, forge.RCSend(e.recvQP[v], live.send.Add(nearLive*3/4-uint32(i)), e.forgedPayload(t, v, i)))
				}
				return nearLive
			},
			causes: []hostCounter{{v, "dev_rx_drop_wrong_source"}},
		}, forgeRow{
			name: fmt.Sprintf("rc-send-spoofed-to-h%d", v),
			send: func(t *testing.T, e *forgeEnv) int {
				live := e.livePSNs(t, v)
				for i := range perKind {
					psn := live.send.Add(1<<22 + uint32(i)*(1<<20))
					e.sendTo(t, e.spoof[peerOf(v)], v, forge.RCSend(e.recvQP[v], psn, e.forgedPayload(t, v, i)))
				}
				return perKind
			},
			// Far ahead of the expected PSN: out of window, and too far
			// for a sequence NAK.
			causes: []hostCounter{{v, "dev_rx_drop_psn"}},
		})
		// A blind attacker sweeps the PSN space with fatal NAKs.
		const sweep = 4096
		rows = append(rows, forgeRow{
			name: fmt.Sprintf("nak-sweep-own-to-h%d", v),
			send: func(t *testing.T, e *forgeEnv) int {
				qpn := e.sendQP[v]
				for i := range sweep {
					e.sendTo(t, e.own, v, forge.Ack(qpn, wire.PSN(i*4096+i%4096), wire.NAK(wire.NAKRemoteOperational, 0)))
					pace(i)
				}
				return sweep
			},
			causes: []hostCounter{{v, "dev_rx_drop_wrong_source"}},
		}, forgeRow{
			// Spoofed, over every PSN at least 2^20 from the live ones.
			name: fmt.Sprintf("nak-sweep-spoofed-to-h%d", v),
			send: func(t *testing.T, e *forgeEnv) int {
				live := e.livePSNs(t, v)
				qpn := e.sendQP[v]
				for i := range sweep {
					psn := live.ack.Add(1<<20 + uint32(i)*3584)
					e.sendTo(t, e.spoof[peerOf(v)], v, forge.Ack(qpn, psn, wire.NAK(wire.NAKRemoteOperational, 0)))
					pace(i)
				}
				return sweep
			},
			causes: []hostCounter{{v, "dev_rx_stale_acks"}},
		})
	}
	return append(rows, cmRows()...)
}

// cmRows forge REQs at h2 that claim to be h1, and a REQ flood.
func cmRows() []forgeRow {
	const victim = fh2
	mismatch := []hostCounter{{victim, "cm_req_source_mismatch"}}
	return []forgeRow{{
		// Someone else's CA GUID and port GID, from the attacker's address.
		name: "req-naming-h1-own",
		send: func(t *testing.T, e *forgeEnv) int {
			h1 := e.link[fh1]
			for i := range 8 {
				e.sendREQ(t, e.own, victim, forge.Peer{GID: h1.GID, GUID: forge.GUIDOf(h1.GID),
					UDQPN: h1.QPN, QPN: ib.QPN(0x300000 + i), PSN: 77})
			}
			return 8
		},
		causes: mismatch,
	}, {
		// The stale-connection rule: h1's CA GUID and QPNs around h1's
		// connection QPNs (the exact ones among them).
		name: "req-stale-rule-own",
		send: func(t *testing.T, e *forgeEnv) int {
			h1 := e.link[fh1]
			n := 0
			for _, q := range e.h1QPNs {
				for d := -16; d <= 16; d++ {
					e.sendREQ(t, e.own, victim, forge.Peer{GID: ib.GIDFromAddr(e.addr(fAtk)), GUID: forge.GUIDOf(h1.GID),
						UDQPN: h1.QPN, QPN: ib.QPN(int(q) + d), PSN: 77})
					n++
				}
			}
			return n
		},
		causes: []hostCounter{{victim, "cm_req_source_mismatch"}, {victim, "cm_stale_foreign"}},
	}, {
		// "h1 restarted": h1's GID and GUID with another UD QPN.
		name: "req-h1-restarted-own",
		send: func(t *testing.T, e *forgeEnv) int {
			h1 := e.link[fh1]
			for i := range 4 {
				e.sendREQ(t, e.own, victim, forge.Peer{GID: h1.GID, GUID: forge.GUIDOf(h1.GID),
					UDQPN: h1.QPN ^ ib.QPN(0x5a5a+i), QPN: ib.QPN(0x310000 + i), PSN: 77})
			}
			return 4
		},
		causes: []hostCounter{{victim, "cm_req_source_mismatch"}, {victim, "cm_stale_foreign"}},
	}, {
		// h1's own address spoofed, with QPNs next to, not at, h1's
		// connection QPN: a new REQ from h1 that h1 never sent. h2's
		// answer goes to the real h1, which knows no such comm ID.
		name: "req-stale-rule-spoofed",
		send: func(t *testing.T, e *forgeEnv) int {
			h1 := e.link[fh1]
			n := 0
			for _, q := range e.h1QPNs {
				for d := -16; d <= 16; d++ {
					if qpn := ib.QPN(int(q) + d); !slices.Contains(e.h1QPNs, qpn) {
						e.sendREQ(t, e.spoof[fh1], victim, forge.Peer{GID: h1.GID, GUID: forge.GUIDOf(h1.GID),
							UDQPN: h1.QPN, QPN: qpn, PSN: 77})
						n++
					}
				}
			}
			return n
		},
		causes: []hostCounter{{fh1, "cm_unknown_rep"}, {fh1, "cm_unknown_rej"}},
	}, {
		// h1's address spoofed, claiming a restart (another UD QPN).
		name: "req-h1-restarted-spoofed",
		send: func(t *testing.T, e *forgeEnv) int {
			h1 := e.link[fh1]
			for i := range 4 {
				e.sendREQ(t, e.spoof[fh1], victim, forge.Peer{GID: h1.GID, GUID: forge.GUIDOf(h1.GID),
					UDQPN: h1.QPN ^ ib.QPN(0x6b6b+i), QPN: ib.QPN(0x320000 + i), PSN: 77})
			}
			return 4
		},
		causes: []hostCounter{{fh1, "cm_unknown_rep"}, {fh1, "cm_unknown_rej"}},
	}, {
		name: "req-flood-one-source",
		send: reqFlood,
		// Accepted (until the per-source bound), refused (as busy, which
		// reqFlood checks, or for other lack of resources: a REJ "no
		// resources" either way), or dropped below the CM as the source's
		// share of the MAD queue spent (or, should that fail, by a full
		// queue).
		causes: []hostCounter{{victim, "cm_accepted"}, {victim, "cm_rej_sent_no_resources"},
			{victim, "dev_rx_drop_mad_source_share"}, {victim, "dev_rx_drop_no_recv_buffer"}},
	}}
}

// reqFlood sends REQs from fake peers behind the attacker's one address
// at 4,000/s while h3, a real newcomer, connects to h2: h3 must get its
// connection during the flood.
func reqFlood(t *testing.T, e *forgeEnv) int {
	const most = 20000
	before := e.c.stats(fh2)["cm_req_busy_source"]
	var sent atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	atk := ib.GIDFromAddr(e.addr(fAtk))
	go func() {
		defer close(done)
		for i := range most {
			select {
			case <-stop:
				return
			default:
			}
			mad, err := forge.REQ(forge.Peer{GID: atk, GUID: forge.GUIDOf(atk), UDQPN: ib.QPN(0x100000 + i),
				QPN: ib.QPN(0x200000 + i), PSN: uint32(i)}, e.link[fh2].GID, e.link[fh2].QPN, uint32(0x70000000+i), uint64(i))
			if err == nil {
				err = e.own.Send(e.addr(fh2), forge.MAD(mad))
			}
			if err != nil {
				t.Error(err)
				return
			}
			sent.Add(1)
			if i%40 == 39 {
				time.Sleep(10 * time.Millisecond) // pace: 4,000/s
			}
		}
	}()
	// Let the flood fill whatever it can fill first.
	for sent.Load() < 800 {
		select {
		case <-done:
			t.Fatalf("flood ended after %d REQs", sent.Load())
		default:
			time.Sleep(5 * time.Millisecond)
		}
	}
	out, err := e.c.try(fh3, "ping", "-c", "1", "-W", "4", e.c.ip4(fh2))
	during := sent.Load()
	close(stop)
	<-done
	if err != nil {
		t.Errorf("h3 could not reach h2 during a REQ flood (%d REQs sent): %v\n%s", during, err, out)
	} else if during >= most {
		t.Errorf("the flood was over before h3 got through")
	}
	ok := false
	for _, cn := range e.c.conns(fh2) {
		if la, err := ib.ParseLinkAddr(cn.Peer); err == nil && sameNode(la, e.link[fh3]) && cn.State == "established" {
			ok = true
		}
	}
	if !ok {
		t.Errorf("h2 has no established connection with h3 after the flood: %+v", e.c.conns(fh2))
	}
	if busy := e.c.stats(fh2)["cm_req_busy_source"] - before; busy == 0 {
		t.Errorf("cm_req_busy_source did not grow: the per-source bound on half-open connections never acted")
	}
	t.Logf("%d REQs sent, h3 pinged h2 after %d", sent.Load(), during)
	return int(sent.Load())
}

// pace keeps a sweep near 20,000 packets/s, the rate a busy host drains.
func pace(i int) {
	if i%100 == 99 {
		time.Sleep(5 * time.Millisecond)
	}
}

func sameNode(a, b ib.LinkAddr) bool { return a.GID == b.GID && a.QPN == b.QPN }

// run forges one row's packets and judges the outcome.
func (e *forgeEnv) run(t *testing.T, row forgeRow) {
	// The cluster's helpers fail the test they were given: this row's.
	parent := e.c
	c := parent.forTest(t)
	e.c = c
	defer func() { e.c = parent }()
	base := e.ready(t)
	hosts := map[int]bool{}
	for _, hc := range row.causes {
		hosts[hc.host] = true
	}
	before, lostBefore := map[int]map[string]uint64{}, map[int]uint64{}
	for k := range hosts {
		before[k], lostBefore[k] = c.stats(k), e.kernelUDPDrops(t, k)
	}
	n := row.send(t, e)

	// Every packet counted under its cause, less what the kernel dropped
	// before the daemon saw it.
	var got, lost uint64
	deadline := time.Now().Add(3 * time.Second)
	for {
		got, lost = 0, 0
		for k := range hosts {
			s := c.stats(k)
			for _, hc := range row.causes {
				if hc.host == k {
					got += s[hc.name] - before[k][hc.name]
				}
			}
			lost += e.kernelUDPDrops(t, k) - lostBefore[k]
		}
		if got+lost >= uint64(n) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got+lost < uint64(n) {
		var diff []string
		for k := range hosts {
			diff = append(diff, fmt.Sprintf("h%d: %s", k, counterDiff(before[k], c.stats(k))))
		}
		t.Errorf("%d forged packets, %d counted under %v (%d dropped by the kernel); what grew: %s",
			n, got, row.causes, lost, strings.Join(diff, "; "))
	} else {
		t.Logf("%d forged packets: %d counted under %v, %d dropped by the kernel's UDP receive buffer", n, got, row.causes, lost)
	}

	// The connection is the one it was, and it carries traffic both ways.
	for _, k := range []int{fh1, fh2} {
		if now := e.pair(t, k, peerOf(k)); !slices.EqualFunc(now, base[k], sameConn) {
			t.Errorf("h%d's established connections with h%d were %+v, now %+v", k, peerOf(k), base[k], now)
		}
	}
	for _, k := range []int{fh1, fh2} {
		if out, err := c.try(k, "ping", "-c", "2", "-i", "0.05", "-W", "1", c.ip4(peerOf(k))); err != nil {
			t.Errorf("h%d -> h%d ping after the forged packets: %v\n%s", k, peerOf(k), err, out)
		}
	}
	if got := e.probed(); got != "" {
		t.Errorf("a forged payload reached a TUN: %q", got)
	}
}

// ready makes sure h1 and h2 are connected (a row that failed may have
// left them reconnecting) and returns their established connections with
// each other; their QPNs become the targets of the row.
func (e *forgeEnv) ready(t *testing.T) [3][]ipoib.ConnInfo {
	t.Helper()
	var base [3][]ipoib.ConnInfo
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.c.try(fh1, "ping", "-c", "1", "-W", "1", e.c.ip4(fh2))
		e.c.try(fh2, "ping", "-c", "1", "-W", "1", e.c.ip4(fh1))
		ok := true
		for _, k := range []int{fh1, fh2} {
			base[k] = e.pair(t, k, peerOf(k))
			e.sendQP[k], e.recvQP[k] = 0, 0
			for _, cn := range base[k] {
				if cn.Sends {
					e.sendQP[k] = ib.QPN(cn.LocalQPN)
				}
			}
			e.recvQP[k] = e.sendQP[k]
			for _, cn := range base[k] {
				if cn.Direction == "in" {
					e.recvQP[k] = ib.QPN(cn.LocalQPN) // where the peer's own REQ led
				}
			}
			ok = ok && e.sendQP[k] != 0
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("h1 and h2 have no working connection before forging (h1 %v, h2 %v): h1 %+v, h2 %+v",
				e.link[fh1], e.link[fh2], e.c.conns(fh1), e.c.conns(fh2))
		}
	}
	e.h1QPNs = e.h1QPNs[:0]
	for _, cn := range base[fh1] {
		e.h1QPNs = append(e.h1QPNs, ib.QPN(cn.LocalQPN))
	}
	return base
}

// sameConn reports whether a and b are the same connection in the same
// state (their figures aside).
func sameConn(a, b ipoib.ConnInfo) bool {
	return a.Peer == b.Peer && a.Type == b.Type && a.Direction == b.Direction && a.State == b.State && a.QPState == b.QPState &&
		a.Sends == b.Sends && a.LocalQPN == b.LocalQPN && a.RemoteQPN == b.RemoteQPN && a.MTU == b.MTU && a.PathMTU == b.PathMTU
}

// pair returns host k's established connections with host p, as far as a
// row could change them (not their age or packet count).
func (e *forgeEnv) pair(t *testing.T, k, p int) []ipoib.ConnInfo {
	t.Helper()
	var out []ipoib.ConnInfo
	for _, cn := range e.c.conns(k) {
		if la, err := ib.ParseLinkAddr(cn.Peer); err == nil && sameNode(la, e.link[p]) && cn.State == "established" {
			cn.AgeSecs, cn.Packets = 0, 0
			out = append(out, cn)
		}
	}
	return out
}

// livePSNs are what a sniffer on victim v's switch port sees arriving at
// its connection QP: the PSN of the last ACK (v's requester is at or
// just past it) and of the last SEND (v's responder expects the next).
type livePSNs struct{ ack, send wire.PSN }

func (e *forgeEnv) livePSNs(t *testing.T, v int) livePSNs {
	t.Helper()
	var sn *forge.Sniffer
	testnet.InNamed(t, e.c.tn.Switch(), func() {
		var err error
		if sn, err = forge.Sniff(e.c.tn.Port(v)); err != nil {
			t.Fatal(err)
		}
	})
	defer sn.Close()
	// Traffic both ways on the connection, should iperf3 be between runs.
	go e.c.try(peerOf(v), "ping", "-c", "3", "-i", "0.05", "-W", "1", e.c.ip4(v))
	var live livePSNs
	deadline := time.Now().Add(3 * time.Second)
	for _, op := range []wire.Opcode{wire.OpRCAck, wire.OpRCSendOnly} {
		p, err := sn.Await(deadline, func(p forge.Seen) bool {
			if p.Dst != e.addr(v) {
				return false
			}
			if op == wire.OpRCAck {
				return p.BTH.DestQP == e.sendQP[v] && p.BTH.Opcode == wire.OpRCAck && p.AETH.Kind() == wire.AckKindACK
			}
			return p.BTH.DestQP == e.recvQP[v] && p.BTH.Opcode.Transport() == ib.RC && p.BTH.Opcode.HasPayload()
		})
		if err != nil {
			t.Fatalf("sniffing h%d's port for %v to QP %v/%v: %v", v, op, e.sendQP[v], e.recvQP[v], err)
		}
		if op == wire.OpRCAck {
			live.ack = p.BTH.PSN
		} else {
			live.send = p.BTH.PSN
		}
	}
	return live
}

func (e *forgeEnv) sendTo(t *testing.T, s *forge.Sender, v int, p *wire.Packet) {
	t.Helper()
	if err := s.Send(e.addr(v), p); err != nil {
		t.Fatal(err)
	}
}

var forgeCommID atomic.Uint32

func (e *forgeEnv) sendREQ(t *testing.T, s *forge.Sender, v int, from forge.Peer) {
	t.Helper()
	id := 0x50000000 + forgeCommID.Add(1)
	mad, err := forge.REQ(from, e.link[v].GID, e.link[v].QPN, id, uint64(id))
	if err != nil {
		t.Fatal(err)
	}
	e.sendTo(t, s, v, forge.MAD(mad))
}

// forgedPayload is an IPoIB message carrying a UDP datagram from v's
// peer to v's probe socket: what would show if it got through.
func (e *forgeEnv) forgedPayload(t *testing.T, v, i int) []byte {
	t.Helper()
	b, err := forge.IPoIBUDP(e.ipoib(peerOf(v)), e.ipoib(v), forgeProbePort, []byte(fmt.Sprintf("forged-%d", i)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openProbes opens the probe sockets and proves they work: a real
// datagram from the peer arrives.
func (e *forgeEnv) openProbes(t *testing.T) {
	for _, k := range []int{fh1, fh2} {
		testnet.InNamed(t, e.c.host(k), func() {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: e.ipoib(k).As4(), Port: forgeProbePort}); err != nil {
				t.Fatal(err)
			}
			e.probe[k] = fd
		})
		t.Cleanup(func() { unix.Close(e.probe[k]) })
	}
	for _, k := range []int{fh1, fh2} {
		testnet.InNamed(t, e.c.host(peerOf(k)), func() {
			conn, err := net.Dial("udp4", net.JoinHostPort(e.c.ip4(k), strconv.Itoa(forgeProbePort)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte("real\n")); err != nil {
				t.Fatal(err)
			}
		})
		deadline := time.Now().Add(5 * time.Second)
		for e.probed() != "real\n" {
			if time.Now().After(deadline) {
				t.Fatalf("the probe on h%d never got a real datagram", k)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// probed returns what a probe socket received, if anything.
func (e *forgeEnv) probed() string {
	var buf [2048]byte
	for _, k := range []int{fh1, fh2} {
		if n, _, err := unix.Recvfrom(e.probe[k], buf[:], 0); err == nil {
			return string(buf[:n])
		}
	}
	return ""
}

// kernelUDPDrops is host k's UDP receive-buffer drops: a datagram dropped
// there never reached the daemon, so the daemon cannot count it.
func (e *forgeEnv) kernelUDPDrops(t *testing.T, k int) uint64 {
	t.Helper()
	out := e.c.on(k, "cat", "/proc/net/snmp")
	var names, values []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "Udp:" {
			if names == nil {
				names = f
			} else {
				values = f
			}
		}
	}
	for i, n := range names {
		if n == "RcvbufErrors" && i < len(values) {
			v, _ := strconv.ParseUint(values[i], 10, 64)
			return v
		}
	}
	t.Fatalf("no Udp RcvbufErrors in /proc/net/snmp of h%d", k)
	return 0
}

func counterDiff(a, b map[string]uint64) string {
	var out []string
	for n, v := range b {
		if v != a[n] && !strings.Contains(n, "bytes") && !strings.Contains(n, "packets") {
			out = append(out, fmt.Sprintf("%s%+d", n, int64(v-a[n])))
		}
	}
	return strings.Join(out, " ")
}

// iperfRun is one iperf3 run's outcome.
type iperfRun struct {
	gbps float64
	err  string
}

func iperfRates(runs []iperfRun) string {
	var s []string
	for _, r := range runs {
		s = append(s, fmt.Sprintf("%.2f", r.gbps))
	}
	return strings.Join(s, " ")
}

// iperf3Loop runs iperf3 h1 -> h2 (3 s each, capped at 1 Gbit/s to leave
// the daemons CPU) back to back until stop is called, which returns the
// runs; a run fails when it does not complete or any half-second of it
// carried nothing (a stall).
func (e *forgeEnv) iperf3Loop(t *testing.T) (stop func() []iperfRun, done <-chan struct{}) {
	c := e.c
	iperf3Server(t, c, fh2, c.ip4(fh2))
	var mu sync.Mutex
	var runs []iperfRun
	var stopping atomic.Bool
	fin := make(chan struct{})
	go func() {
		defer close(fin)
		for !stopping.Load() {
			out, err := c.try(fh1, "iperf3", "-c", c.ip4(fh2), "-t", "3", "-i", "0.5", "-b", "1G", "-J")
			r := judgeIperf(out, err)
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
		}
	}()
	return func() []iperfRun {
		stopping.Store(true)
		<-fin
		mu.Lock()
		defer mu.Unlock()
		return runs
	}, fin
}

func judgeIperf(out string, err error) iperfRun {
	var r struct {
		Intervals []struct {
			Sum struct {
				Bytes   uint64  `json:"bytes"`
				Seconds float64 `json:"seconds"`
			} `json:"sum"`
		} `json:"intervals"`
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		return iperfRun{err: fmt.Sprintf("%v %v: %.300s", err, jerr, out)}
	}
	run := iperfRun{gbps: r.End.SumReceived.BitsPerSecond / 1e9}
	switch {
	case err != nil || r.Error != "":
		run.err = errors.Join(err, errors.New(r.Error)).Error()
	case run.gbps <= 0:
		run.err = "no traffic"
	}
	for i, iv := range r.Intervals {
		if iv.Sum.Bytes == 0 && iv.Sum.Seconds > 0.1 {
			run.err += fmt.Sprintf(" stalled in interval %d;", i)
		}
	}
	return run
}
