package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"

	"github.com/ipoibd/ipoibd/metrics"
)

// checkMetricsListen checks --metrics-listen before anything is opened.
// The host must be an IP address (or empty, for every address): a name
// would be resolved when the daemon starts, which under systemd is before
// network.target, where DNS may not answer yet.
func checkMetricsListen(addr string) error {
	if addr == "" {
		return nil
	}
	const want = "want IP:PORT, e.g. 127.0.0.1:9468 or [::1]:9468 (:9468 for every address)"
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-listen %q: %s", addr, want)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("--metrics-listen %q: %q is not an IP address; %s", addr, host, want)
		}
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("--metrics-listen %q: port %q: want 1-65535", addr, port)
	}
	return nil
}

// maxPerPeer bounds --metrics-per-peer: each connection counted is two
// series per scrape.
const maxPerPeer = 1000

// checkMetricsPerPeer checks --metrics-per-peer against --metrics-listen.
func checkMetricsPerPeer(n int, addr string) error {
	switch {
	case n < 0 || n > maxPerPeer:
		return fmt.Errorf("--metrics-per-peer %d: want 0 (off) to %d connections per interface", n, maxPerPeer)
	case n > 0 && addr == "":
		return fmt.Errorf("--metrics-per-peer %d: needs --metrics-listen", n)
	}
	return nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// startMetrics serves the metrics of the interfaces ifaces returns at each
// scrape (P_Key children come and go) on addr, with series of their own for
// the perPeer busiest connections of each; "" leaves them off. The
// endpoint is in the daemon's own network namespace, not the interfaces'
// (--netns): where a monitoring system reaches the host.
func startMetrics(addr string, perPeer int, ifaces func() []netif, log *slog.Logger) (io.Closer, error) {
	if addr == "" {
		return nopCloser{}, nil
	}
	srv, err := metrics.Serve(addr, metrics.NewCollector(ifaces, perPeer), log)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	return srv, nil
}
