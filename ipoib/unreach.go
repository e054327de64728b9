package ipoib

import (
	"net/netip"
	"time"

	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/mtu"
	"github.com/ipoibd/ipoibd/neigh"
)

// Answers to packets whose neighbor did not resolve. Like the kernel's
// global ICMP limit (net.ipv4.icmp_msgs_per_sec, icmp_msgs_burst), a flood
// to a dead address costs at most unreachRate errors a second after a
// burst; the packets beyond it are still dropped and counted.
const (
	unreachRate  = 100
	unreachBurst = 50
	// failedHold: a packet this soon after its neighbor failed is answered
	// at once instead of starting another resolution; the next one after
	// it asks again (an answer from the peer ends the hold earlier).
	failedHold = 3 * time.Second
)

// tokenBucket is a rate limit owned by the control goroutine.
type tokenBucket struct {
	tokens float64
	at     time.Time
}

// take spends a token if there is one, refilling rate a second up to burst.
func (b *tokenBucket) take(now time.Time, rate, burst float64) bool {
	if b.at.IsZero() {
		b.tokens = burst
	} else if d := now.Sub(b.at); d > 0 {
		b.tokens = min(burst, b.tokens+d.Seconds()*rate)
	}
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// unreachable drops the n-octet IPoIB message in slot, whose neighbor did
// not resolve, and answers it with ICMP host unreachable / ICMPv6 address
// unreachable written back into the TUN, as the kernel does when ARP or
// ND fails: connect() then fails with EHOSTUNREACH and ping says why,
// instead of the caller waiting for its own timeout. The error is built
// in the slot after the packet, as tooBig's.
func (c *control) unreachable(slot uint32, n int) {
	i := c.i
	if c.unreach.take(c.now, unreachRate, unreachBurst) {
		buf := i.slots.bytes(slot)
		pkt, src := buf[encap.HeaderLen:n], c.errorSource(buf[encap.HeaderLen:n])
		m, err := mtu.Unreachable(buf[n:], pkt, src)
		switch {
		case err != nil:
		case src.Is4():
			// From our own address: not through the TUN, where the
			// kernel would drop it as a martian, but as a local socket
			// sends it (to our own sender: delivered locally).
			if err = i.netdev.SendIPv4(buf[n : n+m]); err != nil {
				if !c.rawWarned {
					c.rawWarned = true
					i.log.Warn("IPv4 host unreachable errors come from the dead host's address, not ours", "err", err)
				}
				if m, err = mtu.Unreachable(buf[n:], pkt, netip.Addr{}); err == nil {
					_, err = i.netdev.Write(buf[n : n+m])
				}
			}
		default:
			_, err = i.netdev.Write(buf[n : n+m])
		}
		if err == nil {
			i.ctr.inc(txUnreachable)
		}
	} else {
		i.ctr.inc(txUnreachableLimited)
	}
	i.drop(slot, txDropNoNeigh)
}

// failedRecently reports whether e failed resolution within failedHold:
// its packets are answered at once.
func (c *control) failedRecently(e *neigh.Entry) bool {
	return e.State == neigh.Failed && c.now.Sub(e.Updated) < failedHold
}

// errorSource is the address an ICMP error about pkt comes from, as the
// kernel picks it: the route back to pkt's sender starts at the sender's
// own address when the sender is this host (a local ping says "From" our
// address, not the dead host's); for a packet we forward, our address on
// the dead neighbor's subnet, or any of ours of its family. Zero (the
// destination's, mtu's default) when we have none. An IPv4 error from one
// of our addresses cannot go through the TUN (a martian to the kernel,
// dropped before any socket sees it): unreachable sends it as a local
// socket would.
func (c *control) errorSource(pkt []byte) netip.Addr {
	var src, dst netip.Addr
	switch {
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		src, dst = netip.AddrFrom16([16]byte(pkt[8:24])), netip.AddrFrom16([16]byte(pkt[24:40]))
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		src, dst = netip.AddrFrom4([4]byte(pkt[12:16])), netip.AddrFrom4([4]byte(pkt[16:20]))
	default:
		return netip.Addr{}
	}
	if c.isLocal(src) {
		return src
	}
	if a, ok := c.onLink(dst); ok {
		return a
	}
	for _, p := range c.addrs {
		if p.Addr().Is4() == dst.Is4() {
			return p.Addr()
		}
	}
	return netip.Addr{}
}
