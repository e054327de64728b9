package main

import (
	"bytes"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testnet"
	"golang.org/x/sys/unix"
)

// TestOffloadedTrafficIsStandardOnTheWire runs TCP over IPv4 and IPv6 and
// a UDP GSO burst through datagram-mode daemons whose TUNs hand over
// super-packets, and has Wireshark judge the fabric: every packet is a
// standard IPoIB packet no longer than the UD MTU, with valid IP and TCP
// checksums, and nothing is malformed. The counters show that the
// super-packets were cut on one side and coalesced on the other, so the
// test cannot pass with the offloads off.
func TestOffloadedTrafficIsStandardOnTheWire(t *testing.T) {
	if _, err := lookTools("tshark", "dumpcap", "iperf3"); err != nil {
		t.Skip(err)
	}
	c := newCluster(t, "tso", 2)
	c.start(1, "--mode", "datagram")
	c.start(2, "--mode", "datagram")
	info := c.show(1)
	if !strings.Contains(info.Offloads, "tso") {
		t.Fatalf("h1's TUN offloads %q: want tso", info.Offloads)
	}
	c.ping(1, c.ip4(2), 1)
	c.ping(1, c.ip6(2), 1)
	sent := map[string]int{}
	var udpGot [][]byte
	file := capture(t, c, 1, func() {
		for _, dst := range []string{c.ip4(2), c.ip6(2)} {
			iperf3Server(t, c, 2, dst, "-1")
			if out, err := c.try(1, "iperf3", "-c", dst, "-n", "4M"); err != nil {
				t.Fatalf("iperf3 to %s: %v\n%s", dst, err, out)
			}
			sent[dst]++
		}
		udpGot = udpGSOBurst(t, c, 1, 2)
	})
	if sent[c.ip4(2)] != 1 || sent[c.ip6(2)] != 1 {
		t.Fatalf("iperf3 runs: %v", sent)
	}
	want := udpBurstPayload()
	for k, d := range udpGot {
		seg := want[k*udpSeg : min((k+1)*udpSeg, len(want))]
		if !bytes.Equal(d, seg) {
			t.Fatalf("UDP datagram %d: %d octets, want %d (or different content)", k, len(d), len(seg))
		}
	}
	if len(udpGot) != (len(want)+udpSeg-1)/udpSeg {
		udp, _ := c.try(2, "nstat", "-az", "Udp*")
		link, _ := c.try(2, "ip", "-s", "link", "show", "ib0")
		t.Errorf("%d of %d UDP datagrams arrived; counters above 0: h1 %v, h2 %v; h2's kernel:\n%s%s",
			len(udpGot), (len(want)+udpSeg-1)/udpSeg, nonZero(c.stats(1)), nonZero(c.stats(2)), udp, link)
	}

	checks := []struct{ what, filter string }{
		{"bad IPv4 header checksums", `ip.checksum.status == "Bad"`},
		{"bad TCP checksums", `tcp.checksum.status == "Bad"`},
		{"TCP segments above the UD MTU's MSS", `tcp.len > 4052`},
	}
	for _, ck := range checks {
		out, err := exec.Command("tshark", "-r", file, "-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
			"-o", "udp.check_checksum:TRUE", "-Y", ck.filter).Output()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("%s (%v):\n%.2000s", ck.what, err, out)
		}
	}
	for _, f := range []string{"ip.src == " + c.ip4(1) + " && tcp.len > 4000", "ipv6.src == " + c.ip6(1) + " && tcp.len > 4000"} {
		if !captured(file, f) {
			t.Errorf("no IPoIB packet matching %q on the wire", f)
		}
	}
	// The inner UDP's checksum status follows the outer's (RoCEv2), which
	// the capturing sender has not filled in yet (veth offload).
	out, err := exec.Command("tshark", "-r", file, "-o", "udp.check_checksum:TRUE", "-Y", "udp.port == 5599",
		"-T", "fields", "-e", "udp.checksum.status").Output()
	lines := strings.Fields(string(out))
	if err != nil || len(lines) != 10 {
		t.Errorf("tshark found %d of 10 UDP datagrams (%v)", len(lines), err)
	}
	for _, l := range lines {
		if st := l[strings.LastIndexByte(l, ',')+1:]; st != "1" { // 1: good
			t.Errorf("a UDP datagram's checksum status is %s, want 1 (good)", st)
		}
	}
	// TCP analysis (a full window at the start, iperf3's resets at the
	// end, a D-SACK after a spurious retransmission on a loaded machine)
	// is not malformation.
	if bad := expertFindings(t, file, "(_ws.malformed || _ws.expert.severity >= warning) && !tcp.analysis.flags && !tcp.options.sack.dsack && !tcp.connection.rst && !(udp.dstport == 9)"); bad != "" {
		t.Errorf("tshark found malformed packets or warnings:\n%s", bad)
	}
	s1, s2 := c.stats(1), c.stats(2)
	if s1["tx_super_packets"] == 0 || s1["tx_drop_offload"] != 0 {
		t.Errorf("h1: tx_super_packets %d, tx_drop_offload %d: the TUN handed over no super-packets, or some did not parse", s1["tx_super_packets"], s1["tx_drop_offload"])
	}
	if s2["rx_coalesced"] == 0 {
		t.Errorf("h2: rx_coalesced 0: no received segments were coalesced")
	}
}

const udpSeg = 1400

func udpBurstPayload() []byte {
	b := make([]byte, 9*udpSeg+321) // nine whole datagrams and a short last one
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// udpGSOBurst sends one UDP_SEGMENT send of udpBurstPayload from host a to
// host b (a USO super-packet for the TUN where the kernel offers USO, cut
// by the kernel otherwise) and returns the datagrams b received.
func udpGSOBurst(t *testing.T, c *cluster, a, b int) [][]byte {
	t.Helper()
	var rx int
	testnet.InNamed(t, c.host(b), func() {
		var err error
		if rx, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			t.Fatal(err)
		}
		if err = unix.Bind(rx, &unix.SockaddrInet4{Port: 5599, Addr: netip.MustParseAddr(c.ip4(b)).As4()}); err != nil {
			t.Fatal(err)
		}
	})
	defer unix.Close(rx)
	if err := unix.SetsockoptTimeval(rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5}); err != nil {
		t.Fatal(err)
	}
	testnet.InNamed(t, c.host(a), func() {
		tx, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(tx)
		if err := unix.SetsockoptInt(tx, unix.SOL_UDP, unix.UDP_SEGMENT, udpSeg); err != nil {
			t.Fatal(err)
		}
		if err := unix.Sendto(tx, udpBurstPayload(), 0, &unix.SockaddrInet4{Port: 5599, Addr: netip.MustParseAddr(c.ip4(b)).As4()}); err != nil {
			t.Fatal(err)
		}
	})
	var got [][]byte
	buf := make([]byte, 65536)
	for len(got) < 10 {
		n, _, err := unix.Recvfrom(rx, buf, 0)
		if err != nil {
			break // the timeout: the test reports what is missing
		}
		got = append(got, bytes.Clone(buf[:n]))
	}
	return got
}

// nonZero is the counters of m above 0, for a failure's message.
func nonZero(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}
