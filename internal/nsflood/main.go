// Command nsflood sends one ipoibd IPv6 neighbor solicitations for one of
// its addresses from random sources in a prefix, each claiming the
// sender's link address (every tenth one another node's), from a softib
// device on each -from address, at a steady rate: the soak's NS flood
// (scripts/soak.sh), as TestSolicitationFloodDoesNotStarveResolution
// sends it. Run it inside the flooding host's namespace, on addresses no
// other softib device or forge sender there uses.
//
//	nsflood -from 10.78.0.104,10.78.0.105 -link 00:00:01:02:fe:80:... -target fd00:78::2 -n 40000 -rate 2000
package main

import (
	"crypto/rand"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/forge"
	"github.com/ipoibd/ipoibd/softib"
)

func main() {
	from := flag.String("from", "", "this host's underlay `addresses`, comma-separated: one sending device each, the rate split between them")
	link := flag.String("link", "", "the target's IPoIB link address (ipoibd show --json: link_addr)")
	target := flag.String("target", "", "the IPv6 `address` of the target the solicitations ask for")
	prefix := flag.String("prefix", "", "the `prefix` the sources are drawn from (default: target's /64)")
	n := flag.Int("n", 40000, "solicitations to send")
	rate := flag.Int("rate", 2000, "solicitations per second")
	flag.Parse()
	sent, err := flood(*from, *link, *target, *prefix, *n, *rate)
	fmt.Printf("nsflood: %d solicitations sent\n", sent)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nsflood:", err)
		os.Exit(1)
	}
}

func flood(fromS, linkS, targetS, prefixS string, n, rate int) (int64, error) {
	link, err := ib.ParseLinkAddr(linkS)
	if err != nil {
		return 0, fmt.Errorf("-link: %w", err)
	}
	target, err := netip.ParseAddr(targetS)
	if err != nil || !target.Is6() || target.Is4In6() {
		return 0, fmt.Errorf("-target %q: want an IPv6 address", targetS)
	}
	p := netip.PrefixFrom(target, 64).Masked()
	if prefixS != "" {
		if p, err = netip.ParsePrefix(prefixS); err != nil || !p.Addr().Is6() || p.Bits() > 64 {
			return 0, fmt.Errorf("-prefix %q: want an IPv6 prefix of at most 64 bits", prefixS)
		}
	}
	var senders []*forge.UDSender
	for _, a := range strings.Split(fromS, ",") {
		addr, err := netip.ParseAddr(strings.TrimSpace(a))
		if err != nil {
			return 0, fmt.Errorf("-from: %w", err)
		}
		dev, err := softib.Open(softib.Config{Addr: addr})
		if err != nil {
			return 0, err
		}
		defer dev.Close()
		u, err := forge.NewUDSender(dev, link)
		if err != nil {
			return 0, err
		}
		defer u.Close()
		senders = append(senders, u)
	}
	if rate < len(senders) {
		return 0, fmt.Errorf("-rate %d: want at least one a second per -from address", rate)
	}
	var sent atomic.Int64
	errs := make(chan error, len(senders))
	for k, u := range senders {
		// n and rate split evenly, the remainder on the first.
		share := func(v int) int {
			if k == 0 {
				return v - v/len(senders)*(len(senders)-1)
			}
			return v / len(senders)
		}
		go func() {
			errs <- u.Run(share(rate), share(n), &sent, func(buf []byte, i int) (int, error) {
				src := p.Addr().As16()
				var low [8]byte
				_, _ = rand.Read(low[:])
				copy(src[8:], low[:])
				claim := u.Self()
				if i%10 == 9 {
					claim.GID[15] ^= 0x5a
				}
				return forge.Solicitation(buf, netip.AddrFrom16(src), target, claim)
			})
		}()
	}
	var first error
	for range senders {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return sent.Load(), first
}
