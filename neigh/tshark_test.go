package neigh

import (
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

// TestTsharkDecodesOurPackets is the independent wire check: packets made by
// our encoders are written to a pcap in Linux cooked (SLL) framing with
// link type InfiniBand, and Wireshark's ARP, IPv6 and ICMPv6 dissectors
// must read back the values we put in, find the ICMPv6 checksums good and
// report nothing malformed.
func TestTsharkDecodesOurPackets(t *testing.T) {
	var frames [][]byte
	var want []string
	for _, g := range arpGoldens {
		b := make([]byte, g.arp.Len())
		if err := g.arp.Encode(b); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, sll(0x0806, b))
		sha, tha := g.arp.SenderHW.Bytes(), g.arp.TargetHW.Bytes()
		want = append(want, strings.Join([]string{"arp", "32", "20", strconv.Itoa(int(g.arp.Op)),
			hex.EncodeToString(sha[:]), g.arp.SenderIP.String(),
			hex.EncodeToString(tha[:]), g.arp.TargetIP.String()}, "|"))
	}
	notes := map[int]bool{} // frames where tshark's note of an unknown option is right
	for _, g := range ndGoldens {
		b := make([]byte, IPv6HeaderLen+NDMaxLen)
		n, err := g.msg.EncodeIPv6(b, g.src, g.dst)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, sll(0x86dd, b[:n]))
		opt, lla := "", ""
		if g.msg.HasLinkAddr {
			a := g.msg.LinkAddr.Bytes()
			// Wireshark does not know the IPoIB pad: it shows the two
			// pad octets as part of the address.
			opt, lla = strconv.Itoa(int(g.msg.optType()))+"|3", "0000"+hex.EncodeToString(a[:])
		} else {
			opt = "|"
		}
		if g.msg.HasReplaces {
			// An option Wireshark does not know (as Linux does not): it
			// lists its type and length, skips it, and notes it (an
			// expert note, not an error).
			opt = strings.Replace(opt, "|", ","+strconv.Itoa(int(OptReplacedLinkAddr))+"|", 1) + ",3"
			notes[len(frames)-1] = true
		}
		if g.msg.HasSibling {
			opt = strings.Replace(opt, "|", ","+strconv.Itoa(int(OptSiblingLinkAddr))+"|", 1) + ",3"
			notes[len(frames)-1] = true
		}
		want = append(want, strings.Join([]string{"nd", g.src.String(), g.dst.String(), "255",
			strconv.Itoa(int(g.msg.Type)), "0", "1", g.msg.Target.String(), opt, lla, naFlags(g.msg)}, "|"))
	}

	file := testutil.WritePcap(t, "nd.pcap", testutil.LinkTypeLinuxSLL, frames)
	fields := []string{
		"arp.hw.type", "arp.hw.size", "arp.opcode", "arp.src.hw", "arp.src.proto_ipv4", "arp.dst.hw", "arp.dst.proto_ipv4",
		"ipv6.src", "ipv6.dst", "ipv6.hlim", "icmpv6.type", "icmpv6.code", "icmpv6.checksum.status",
		"icmpv6.nd.ns.target_address", "icmpv6.nd.na.target_address", "icmpv6.opt.type", "icmpv6.opt.length", "icmpv6.opt.linkaddr",
		"icmpv6.nd.na.flag.r", "icmpv6.nd.na.flag.s", "icmpv6.nd.na.flag.o",
		"_ws.malformed", "_ws.expert.severity",
	}
	for i, f := range testutil.TsharkFields(t, file, len(frames), fields) {
		var got string
		if f[0] != "" {
			got = strings.Join(append([]string{"arp"}, f[0:7]...), "|")
		} else {
			target := f[13] + f[14] // one of NS or NA target is empty
			got = strings.Join([]string{"nd", f[7], f[8], f[9], f[10], f[11], f[12], target, f[15], f[16], f[17], f[18] + f[19] + f[20]}, "|")
		}
		if testing.Verbose() {
			t.Logf("frame %d: %s", i+1, got)
		}
		if got != want[i] {
			t.Errorf("frame %d: tshark reads\n%s\nwant\n%s", i+1, got, want[i])
		}
		if notes[i] && strings.Trim(strings.ReplaceAll(f[22], expertNote, ""), ",") == "" {
			f[22] = "" // one note for each option of ours
		}
		if f[21] != "" || f[22] != "" {
			t.Errorf("frame %d: tshark reports malformed %q, expert %q", i+1, f[21], f[22])
		}
	}
}

// expertNote is Wireshark's severity "note" (PI_NOTE) as tshark prints it.
const expertNote = "4194304"

// naFlags is how tshark prints the R, S and O flags of an NA, one
// after the other; nothing for an NS.
func naFlags(m NeighborMessage) string {
	if m.Type != TypeNeighborAdvertisement {
		return ""
	}
	var s string
	for _, f := range []bool{m.Router, m.Solicited, m.Override} {
		s += map[bool]string{true: "1", false: "0"}[f]
	}
	return s
}

// sll frames payload as a Linux cooked capture (link type 113): packet
// type, ARPHRD_INFINIBAND, no address, then the EtherType.
func sll(etherType uint16, payload []byte) []byte {
	h := make([]byte, 16, 16+len(payload))
	binary.BigEndian.PutUint16(h[0:2], 1) // broadcast
	binary.BigEndian.PutUint16(h[2:4], 32)
	binary.BigEndian.PutUint16(h[14:16], etherType)
	return append(h, payload...)
}
