package main

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCMOnTheWireDecodesInTshark captures a whole connection's life on the
// underlay (set-up when h1 first sends to h2, teardown when h2's daemon
// exits) and has Wireshark judge it: every CM message decodes, carries the
// RFC 4755 service ID of the passive side's UD QPN and the private data
// {UD QPN, 65524}, the comm IDs pair up, and nothing is malformed.
func TestCMOnTheWireDecodesInTshark(t *testing.T) {
	if _, err := lookTools("tshark", "dumpcap"); err != nil {
		t.Skip(err)
	}
	c := newCluster(t, "wire", 2)
	c.start(1)
	c.start(2)
	h1, h2 := c.show(1), c.show(2)
	file := capture(t, c, 1, func() {
		c.ping(1, c.ip4(2), 2)
		// 10000-octet pings cross the RC connection as SEND First/Middle/Last.
		c.on(1, "ping", "-c", "2", "-i", "0.1", "-s", "10000", c.ip4(2))
		c.stop(2, "TERM") // DREQ to h1, DREP back
	})

	fields := []string{"infiniband.mad.attributeid", "infiniband.cm.req.serviceid", "infiniband.cm.req.private",
		"infiniband.cm.rep.private", "infiniband.cm.req", "infiniband.cm.rep.remotecommid",
		"infiniband.cm.dreq.localcommid", "infiniband.cm.drsp.remotecommid"}
	args := []string{"-r", file, "-Y", "infiniband.mad.mgmtclass == 0x07", "-T", "fields", "-E", "separator=|"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("CM messages on the wire:\n%s", out)
	// Service ID: the IETF prefix and the UD QPN (link address octets
	// 1-3) of the side asked.
	qpn, h1qpn := udQPN(h2.LinkAddr), udQPN(h1.LinkAddr)
	seen := map[string][]string{}
	var req, rep []string
	for _, l := range lines {
		f := strings.Split(l, "|")
		if len(f) != len(fields) {
			t.Fatalf("tshark line %q: %d fields", l, len(f))
		}
		// The first of each kind, h2's first DREQ and its DREP; and h1's
		// REQ (named by the service ID: under the default linux policy
		// h2 asks too, and on a loaded machine its REQ can come first)
		// with the REP that answers it.
		if seen[f[0]] == nil {
			seen[f[0]] = f
		}
		switch {
		case req == nil && f[0] == "0x0010" && f[1] == "0x1000000000"+qpn:
			req = f
		case rep == nil && req != nil && f[0] == "0x0013" && f[5] == req[4]:
			rep = f
		}
	}
	for attr, name := range map[string]string{"0x0010": "REQ", "0x0013": "REP", "0x0014": "RTU", "0x0015": "DREQ", "0x0016": "DREP"} {
		if seen[attr] == nil {
			t.Errorf("no %s (attribute %s) captured", name, attr)
		}
	}
	if req == nil || rep == nil {
		t.Fatalf("no REQ from h1 to service 0x1000000000%s answered by a REP naming its comm ID", qpn)
	}
	if !strings.HasPrefix(req[2], "00"+h1qpn+"0000fff4") {
		t.Errorf("REQ private data %.16s: want h1's UD QPN %s and 65524", req[2], h1qpn)
	}
	if !strings.HasPrefix(rep[3], "00"+qpn+"0000fff4") {
		t.Errorf("REP private data %.16s: want h2's UD QPN %s and 65524", rep[3][:16], qpn)
	}
	if d, p := seen["0x0015"], seen["0x0016"]; d != nil && p != nil && d[6] != p[7] {
		t.Errorf("DREP remote comm ID %s does not name the DREQ's local comm ID %s", p[7], d[6])
	}
	// The data: ARP on UD (SEND Only, opcode 0x64), pings on RC (SEND
	// First 0x00, Middle 0x01, Last 0x02, Only 0x04) and the RC ACKs (0x11).
	wantOpcodes(t, file, map[string]string{"100": "UD SEND Only", "0": "RC SEND First", "1": "RC SEND Middle",
		"2": "RC SEND Last", "4": "RC SEND Only", "17": "RC Acknowledge"})
	noMalformed(t, file)
}

// udQPN returns the UD QPN of a colon-hex link address as 6 hex digits.
func udQPN(linkAddr string) string { return strings.ReplaceAll(linkAddr[3:11], ":", "") }

// capture runs traffic() while dumpcap records the fabric (UDP 4791) at
// host k, and returns the pcap. softib sends GSO trains, which veth would
// carry (and dumpcap record) as one frame each: with one segment per frame
// the capture shows the IB packets as a switch would see them.
//
// dumpcap hands packets to the file in blocks, so the last of the traffic
// may still be in the kernel when traffic() returns. A marker datagram to
// the discard port, sent after the traffic, is the event to wait for: once
// it is in the file, everything before it is too. Another marker, before
// the traffic, shows that the capture has begun.
func capture(t *testing.T, c *cluster, k int, traffic func()) string {
	t.Helper()
	for h := 1; h <= 2; h++ {
		c.on(h, "ip", "link", "set", "eth0", "gso_max_segs", "1")
	}
	peer := c.underlay(1 + k%2)
	file := filepath.Join(t.TempDir(), "fabric.pcap")
	dump := c.command(k, "dumpcap", "-q", "-i", "eth0",
		"-f", "udp port 4791 or (udp dst port 9 and dst host "+peer+")", "-P", "-w", file)
	stderr, err := dump.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dump.Start(); err != nil {
		t.Fatal(err)
	}
	// dumpcap says "Capturing on" once the capture runs: that is the
	// event to wait for before making traffic.
	ready := bufio.NewScanner(stderr)
	var said []string
	for ready.Scan() && !strings.Contains(ready.Text(), "Capturing on") {
		said = append(said, ready.Text())
	}
	if ready.Err() != nil || len(said) > 0 && !strings.Contains(ready.Text(), "Capturing on") {
		t.Fatalf("dumpcap did not start capturing:\n%s", strings.Join(said, "\n"))
	}
	go func() {
		for ready.Scan() {
		}
	}()
	// "Capturing on" comes before the capture filter is in place, and
	// libpcap drops what arrived before it: traffic starts only once a
	// start marker is in the file.
	mark := func(text string, resend bool) {
		filter := `udp.dstport == 9 && frame contains "` + text + `"`
		deadline := time.Now().Add(10 * time.Second)
		for sent := false; !captured(file, filter); {
			if !sent || resend {
				c.on(k, "bash", "-c", "echo "+text+" >/dev/udp/"+peer+"/9")
				sent = true
			}
			if time.Now().After(deadline) {
				t.Fatalf("the capture marker %s did not reach %s within 10 s", text, file)
			}
			time.Sleep(50 * time.Millisecond) // polling the file dumpcap writes; it signals nothing
		}
	}
	mark(captureStart, true)
	traffic()
	mark(captureEnd, false)
	if err := dump.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = dump.Wait()
	return file
}

const (
	captureStart = "ipoibd-capture-start"
	captureEnd   = "ipoibd-capture-end"
)

// captured reports whether tshark finds a frame matching filter in file.
func captured(file, filter string) bool {
	out, err := exec.Command("tshark", "-r", file, "-Y", filter).Output()
	return err == nil && strings.TrimSpace(string(out)) != ""
}

// wantOpcodes checks that tshark finds every BTH opcode named (decimal, as
// tshark prints them) in the capture.
func wantOpcodes(t *testing.T, file string, want map[string]string) {
	t.Helper()
	ops, err := exec.Command("tshark", "-r", file, "-T", "fields", "-e", "infiniband.bth.opcode").Output()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, op := range strings.Fields(string(ops)) {
		count[op]++
	}
	t.Logf("BTH opcodes captured: %v", count)
	for op, name := range want {
		if count[op] == 0 {
			t.Errorf("no %s (opcode %s) in the capture", name, op)
		}
	}
}

// noMalformed fails the test if tshark finds a malformed packet or warns.
// tshark does not reassemble RC/UC messages: it reads the first packet of a
// multi-packet message as a truncated IP packet and warns. Those frames
// (SEND First, RC 0x00 and UC 0x20) are judged by their headers, not here.
func noMalformed(t *testing.T, file string) {
	t.Helper()
	if bad := expertFindings(t, file, "(_ws.malformed || _ws.expert.severity >= warning) && !(infiniband.bth.opcode == 0 || infiniband.bth.opcode == 32) && !(udp.dstport == 9)"); bad != "" {
		t.Errorf("tshark found malformed packets or warnings:\n%s", bad)
	}
}

// expertFindings lists what tshark's expert says of the frames matching
// filter, one line per message with its count, first frame and protocol
// stack, so that a failure names the finding instead of only the frames'
// summaries. iperf3's data is random octets, which one of tshark's
// heuristic dissectors now and then takes for HTTP or SIP and then finds
// malformed ("Trailing stray characters"): its port is decoded as data.
func expertFindings(t *testing.T, file, filter string) string {
	t.Helper()
	out, err := exec.Command("tshark", "-r", file, "-d", "tcp.port==5201,data", "-Y", filter, "-T", "fields", "-E", "occurrence=a",
		"-e", "frame.number", "-e", "frame.protocols", "-e", "_ws.expert.message", "-e", "_ws.malformed").Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v", file, err)
	}
	type finding struct{ first, count int }
	found := map[string]*finding{}
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 3 {
			continue
		}
		msg := strings.TrimSpace(strings.Join(f[2:], " "))
		if msg == "" {
			msg = "(no expert message)"
		}
		msg += " [" + f[1] + "]"
		if found[msg] == nil {
			n, _ := strconv.Atoi(f[0])
			found[msg] = &finding{first: n}
			order = append(order, msg)
		}
		found[msg].count++
	}
	var b strings.Builder
	for _, msg := range order {
		fmt.Fprintf(&b, "%6d frames, first %d: %s\n", found[msg].count, found[msg].first, msg)
	}
	return b.String()
}
