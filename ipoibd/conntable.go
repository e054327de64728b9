package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ipoibd/ipoibd/ipoib"
)

// The `conn` table. Its narrow form fits 100 columns (with IPv4 peers, or
// IPv6 addresses of up to 21 characters): a peer is named by its first IP address (IPv4 first)
// and a short link address, QPN@GUID, which is what tells nodes apart;
// figures are rounded to at most five characters. --wide has every
// figure exact and the full link address; -j has everything.

// printConns prints the daemon's `conn` answer raw as a table.
func printConns(out io.Writer, raw json.RawMessage, wide bool) error {
	var cs []ipoib.ConnInfo
	if err := json.Unmarshal(raw, &cs); err != nil {
		return err
	}
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	defer w.Flush()
	if wide {
		fmt.Fprintln(w, "PEER\tLLADDR\tTYPE\tDIR\tSTATE\tQP\tSENDS\tQPN\tREMOTE QPN\tMTU\tPATH MTU\tTX PKTS\tTX BYTES\tRX PKTS\tRX BYTES\tRNR\tRETX\tUD\tAGE\tUP")
		for _, c := range cs {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%d\t%s\t%s\n",
				orDash(strings.Join(c.PeerIPs, ",")), c.Peer, c.Type, c.Direction, c.State, c.QPState, yesNo(c.Sends),
				qpn(c.LocalQPN), qpn(c.RemoteQPN), c.MTU, dash(c.PathMTU),
				c.TxPackets, c.TxBytes, c.RxPackets, c.RxBytes, orNA(c.RNRNAKs, exact), orNA(c.Retransmits, exact), c.UDFallbacks,
				time.Duration(c.AgeSecs)*time.Second, upFor(c, "-", func(s int64) string { return (time.Duration(s) * time.Second).String() }))
		}
		return nil
	}
	fmt.Fprintln(w, "PEER\tLINK\tCONN\tTX\tRX\tRNR\tRETX\tUD\tSTATE")
	for _, c := range cs {
		fmt.Fprintf(w, "%s\t%s\t%s %s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			peerName(c.PeerIPs), c.ShortLink(), c.Type, c.Direction, shortBytes(c.TxBytes), shortBytes(c.RxBytes),
			orNA(c.RNRNAKs, shortCount), orNA(c.Retransmits, shortCount), shortCount(int64(c.UDFallbacks)),
			upFor(c, c.State, func(s int64) string { return "up " + shortAge(s) }))
	}
	return nil
}

// peerName is the first of a peer's addresses, and how many more it has.
func peerName(ips []string) string {
	switch len(ips) {
	case 0:
		return "-"
	case 1:
		return ips[0]
	}
	return fmt.Sprintf("%s +%d", ips[0], len(ips)-1)
}

// upFor is how long an established connection has been up, by format, or
// down for one that is not.
func upFor(c ipoib.ConnInfo, down string, format func(secs int64) string) string {
	if c.State == "established" {
		return format(c.UpSecs)
	}
	return down
}

func exact(n int64) string { return fmt.Sprint(n) }

// orNA formats a provider's figure, -1 when it cannot tell.
func orNA(n int64, format func(int64) string) string {
	if n < 0 {
		return "n/a"
	}
	return format(n)
}

// shortBytes rounds an octet count to at most five characters: 999B,
// 1.2kB, 12kB, 999kB, 1.2MB, ... 999EB.
func shortBytes(n uint64) string {
	if n < 1000 {
		return fmt.Sprintf("%dB", n)
	}
	return short(float64(n), "B")
}

// shortCount rounds a count to at most four characters: 9999, 10k, 1.2M.
func shortCount(n int64) string {
	if n < 10000 {
		return fmt.Sprint(n)
	}
	return short(float64(n), "")
}

// short is x ≥ 1000 with an SI prefix and unit: one decimal below 10, none
// above.
func short(x float64, unit string) string {
	const prefixes = "kMGTPE"
	k := -1
	for x >= 999.5 && k < len(prefixes)-1 {
		x /= 1000
		k++
	}
	if x < 9.95 {
		return fmt.Sprintf("%.1f%c%s", x, prefixes[k], unit)
	}
	return fmt.Sprintf("%.0f%c%s", x, prefixes[k], unit)
}

// shortAge is a duration in seconds in two units at most: 42s, 12m03s,
// 5h07m, 3d04h.
func shortAge(secs int64) string {
	switch {
	case secs < 60:
		return fmt.Sprintf("%ds", max(secs, 0))
	case secs < 3600:
		return fmt.Sprintf("%dm%02ds", secs/60, secs%60)
	case secs < 86400:
		return fmt.Sprintf("%dh%02dm", secs/3600, secs%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", secs/86400, secs%86400/3600)
}
