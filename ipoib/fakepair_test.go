package ipoib

import (
	"fmt"
	"log/slog"
	"net/netip"
	"testing"
	"time"
)

// newFakePair is newPair as an ordinary user: the two interfaces are fake
// hosts (ibtest, netdevtest) with newPair's addresses, 192.168.9.k/24 and
// fd00:9::k/64, a connected to b for the sink. Its ping goes through the
// fake netdevs, with b's test answering in place of b's kernel.
func newFakePair(t *testing.T) *pair {
	t.Helper()
	logA := &syncBuffer{}
	addrs := func(k int, log *slog.Logger) func(*Config) {
		return func(c *Config) {
			c.Addrs = []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("192.168.9.%d/24", k)), netip.MustParsePrefix(fmt.Sprintf("fd00:9::%d/64", k))}
			if log != nil {
				c.Log = log
			}
		}
	}
	h := newFakeHosts(t, 2, addrs(1, slog.New(slog.NewTextHandler(logA, nil))), addrs(2, nil))
	for k, x := range h {
		x.ip4 = netip.AddrFrom4([4]byte{192, 168, 9, byte(k + 1)})
		x.ip6 = netip.MustParseAddr(fmt.Sprintf("fd00:9::%d", k+1))
	}
	return connectSink(t, &pair{a: h[0].Interface, b: h[1].Interface, fa: h[0], fb: h[1], logA: logA})
}

// fakePing sends a UDP packet from a to dst, b's address, and b's answer
// back, each within wait; seq tells rounds apart. It reports whether both
// arrived.
func (p *pair) fakePing(dst string, seq byte, wait time.Duration) error {
	to := netip.MustParseAddr(dst)
	for _, leg := range []struct {
		from, to *fakeHost
		pkt      []byte
	}{
		{p.fa, p.fb, packetTo(p.fa.ip4, to, 84, seq)},
		{p.fb, p.fa, packetTo(to, p.fa.ip4, 84, seq+1)},
	} {
		leg.from.send(leg.pkt)
		deadline := time.After(wait)
		for got := false; !got; {
			select {
			case b := <-leg.to.nd.Out:
				got = string(b) == string(leg.pkt) // an earlier round's late packet is passed over
			case <-deadline:
				return fmt.Errorf("%v got no packet from %v in %v", leg.to.ip4, leg.from.ip4, wait)
			}
		}
	}
	return nil
}
