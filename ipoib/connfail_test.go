package ipoib

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
)

// TestBrokenConnectionIsReplaced moves a live connection's QP to the error
// state behind the daemon's back (as a forged NAK once did): the failure is
// found, counted and logged once, the connection table never shows it as
// established, traffic goes on over UD and then over a new connection, and
// ping works again.
func TestBrokenConnectionIsReplaced(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause string
		// found is what makes the daemon notice, right after the QP broke.
		found func(t *testing.T, p *pair, broken ib.QPN)
	}{
		{"idle, found by looking", "QP in the error state", func(t *testing.T, p *pair, broken ib.QPN) {
			// The table is the first to ask; it must already tell the truth.
			for _, c := range p.a.Connections() {
				if c.LocalQPN == uint32(broken) && (c.State == "established" || c.Sends) {
					t.Errorf("conn shows the broken QP as %s, sends %v (QP %s)", c.State, c.Sends, c.QPState)
				}
			}
		}},
		{"busy, a post refused", "post refused", func(t *testing.T, p *pair, broken ib.QPN) {
			slot := p.txSlot()
			p.send(slot, p.packet(slot, 1000), 1000)
			if p.a.ctr[txDropPost].Load() == 0 {
				t.Error("the send on the broken QP was not refused")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFakePair(t)
			// Only the case under test may find it: no periodic look.
			p.a.do(func() { p.a.ctl.connsEvery = time.Hour })
			peer := netipString(p.b)
			p.ping(t, peer, 1)

			var conn *ipoibcm.Connection
			p.a.do(func() { conn = p.a.mgr.SendConnection(p.b.LinkAddr()) })
			if conn == nil {
				t.Fatal("no connection carries a's sends")
			}
			broken := conn.QP.Num()
			if err := conn.QP.Modify(ib.QPModify{State: ib.StateError}); err != nil {
				t.Fatal(err)
			}
			tc.found(t, p, broken)
			awaitCounter(t, p.a, txConnErrors, 1)
			// Nothing sends on the broken QP any more.
			p.a.do(func() {
				if e := p.a.neigh.Get(p.sink); e == nil || e.Path() == nil || e.Path().QP == conn.QP {
					t.Errorf("sink's path after the failure: %+v", e.Path())
				}
			})
			// Ping works again, over a new connection; meanwhile the table
			// never shows an established connection that cannot send.
			deadline := time.Now().Add(15 * time.Second)
			for {
				if time.Now().After(deadline) {
					t.Fatalf("no new connection within 15 s: %+v", p.a.Connections())
				}
				_ = p.tryPing(peer)
				fresh := false
				for _, c := range p.a.Connections() {
					if c.State == "established" && c.QPState != "RTS" {
						t.Fatalf("conn shows %+v: established with its QP in %s", c, c.QPState)
					}
					if c.LocalQPN == uint32(broken) && c.Sends {
						t.Fatalf("the broken connection still carries sends: %+v", c)
					}
					fresh = fresh || (c.State == "established" && c.Sends && c.LocalQPN != uint32(broken))
				}
				if fresh {
					break
				}
			}
			p.ping(t, peer, 3)
			if n := p.a.ctr[txConnErrors].Load(); n != 1 {
				t.Errorf("tx_conn_errors = %d, want 1 (one failure, reported once)", n)
			}
			log := p.logA.String()
			if n := strings.Count(log, "connection cannot send"); n != 1 || !strings.Contains(log, `cause="`+tc.cause+`"`) {
				t.Errorf("log has %d failure lines, want 1 with cause %q:\n%s", n, tc.cause, log)
			}
		})
	}
}

func netipString(i *Interface) string {
	var s string
	i.do(func() { s = i.ctl.addrs[0].Addr().String() })
	return s
}

// ping pings dst from a's namespace (newFakePair: a packet through the
// fake netdevs and back); every reply must come.
func (p *pair) ping(t *testing.T, dst string, count int) {
	t.Helper()
	if out, err := p.pingOut(dst, count); err != nil {
		t.Fatalf("ping %s: %v\n%s", dst, err, out)
	}
}

func (p *pair) tryPing(dst string) error {
	_, err := p.pingOut(dst, 1)
	return err
}

func (p *pair) pingOut(dst string, count int) (string, error) {
	if p.net == nil {
		for k := range count {
			p.pings++
			if err := p.fakePing(dst, byte(2*p.pings), time.Second); err != nil {
				return fmt.Sprintf("round %d of %d", k+1, count), err
			}
		}
		return "", nil
	}
	out, err := exec.Command("ip", "netns", "exec", p.net.Hosts[0].NS, "ping", "-c", strconv.Itoa(count), "-i", "0.2", "-W", "1", dst).CombinedOutput()
	return string(out), err
}

// awaitCounter waits until i's counter k reaches want.
func awaitCounter(t *testing.T, i *Interface, k counter, want uint64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s reaches %d", counterNames[k], want), func() bool { return i.ctr[k].Load() >= want })
}

// TestAddressHandlesOfAnsweredNodesAreReaped: answering solicitations from
// many nodes (whose underlay addresses a sender may forge) leaves address
// handles behind; beyond ahKeep, the idle ones no neighbor holds are
// closed, and those of neighbors stay.
func TestAddressHandlesOfAnsweredNodesAreReaped(t *testing.T) {
	p := newFakePair(t)
	p.a.do(func() {
		c := &p.a.ctl
		for k := range ahKeep + 100 {
			gid := ib.GIDFromAddr(netip.AddrFrom4([4]byte{10, 99, byte(k >> 8), byte(k)}))
			if c.ah(gid) == nil {
				t.Errorf("no address handle for %v", gid) // not Fatal: this is the control goroutine
				return
			}
		}
		c.reapAHs()
		if n := len(c.ahs); n < ahKeep+100 {
			t.Errorf("%d address handles left right after use, want all %d kept", n, ahKeep+100)
		}
		c.now = c.now.Add(ahIdle)
		c.reapAHs()
		sink := p.a.neigh.Get(p.sink)
		if _, ok := c.ahs[sink.Link.GID]; !ok || len(c.ahs) > 2 {
			t.Errorf("after reaping: %d address handles, the neighbor's kept: %v", len(c.ahs), ok)
		}
	})
}
