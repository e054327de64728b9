// Command reqflood sends IPoIB-CM REQs that never complete (random CA
// GUIDs and QPNs, no RTU ever) from this host's underlay address to one
// ipoibd, at a steady rate: the soak's flood (scripts/soak.sh). Run it
// inside the flooding host's namespace.
//
//	reqflood -from 10.78.0.3 -to 10.78.0.2 -link 00:00:01:02:fe:80:... -n 20000 -rate 4000
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/forge"
)

func main() {
	from := flag.String("from", "", "this host's underlay `address`, the REQs' source")
	to := flag.String("to", "", "the target's underlay `address`")
	link := flag.String("link", "", "the target's IPoIB link address (ipoibd show --json: link_addr)")
	n := flag.Int("n", 20000, "REQs to send")
	rate := flag.Int("rate", 4000, "REQs per second")
	flag.Parse()
	sent, err := flood(*from, *to, *link, *n, *rate)
	fmt.Printf("reqflood: %d REQs sent\n", sent)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reqflood:", err)
		os.Exit(1)
	}
}

func flood(fromS, toS, linkS string, n, rate int) (int, error) {
	from, err := netip.ParseAddr(fromS)
	if err != nil {
		return 0, fmt.Errorf("-from: %w", err)
	}
	to, err := netip.ParseAddr(toS)
	if err != nil {
		return 0, fmt.Errorf("-to: %w", err)
	}
	link, err := ib.ParseLinkAddr(linkS)
	if err != nil {
		return 0, fmt.Errorf("-link: %w", err)
	}
	if rate < 1 {
		return 0, fmt.Errorf("-rate %d: want at least 1", rate)
	}
	s, err := forge.Open(from)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	gid := ib.GIDFromAddr(from)
	// Sent in bursts of burst REQs, one burst per tick.
	const burst = 40
	tick := time.NewTicker(time.Second * burst / time.Duration(rate))
	defer tick.Stop()
	for i := 0; i < n; i++ {
		if i%burst == 0 && i > 0 {
			<-tick.C
		}
		guid := rand.Uint64()
		mad, err := forge.REQ(forge.Peer{GID: gid, GUID: guid, UDQPN: ib.QPN(rand.Uint32()), QPN: ib.QPN(rand.Uint32()),
			PSN: rand.Uint32()}, link.GID, link.QPN, rand.Uint32(), rand.Uint64())
		if err != nil {
			return i, err
		}
		if err := s.Send(to, forge.MAD(mad)); err != nil {
			return i, err
		}
	}
	return n, nil
}
