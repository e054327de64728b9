package wire

import (
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/testutil"
)

// linkTypeInfiniBand is the pcap link type of native InfiniBand frames
// (LINKTYPE_INFINIBAND, DLT 247): each record one packet from the LRH
// through the VCRC.
const linkTypeInfiniBand = 247

// TestTsharkDecodesNativeIB is the wire check of the InfiniBand link
// layer: the frames of TestTsharkDecodesRoCEv2 (a CM exchange on QP1,
// IPoIB ARP and ND on UD, RC SENDs and their ACK) framed as on an
// InfiniBand link (PutIBHeaders, SealIBFrame), every other one with a
// GRH, written as a link type 247 capture. Wireshark's InfiniBand
// dissector must read back every LRH, GRH, BTH, DETH, AETH and CM field
// as written, find the ICRC and VCRC where they belong, and report
// nothing malformed.
//
// tshark 4.0.17 verifies neither CRC: the test recomputes both from
// their definitions (ibICRCReference, vcrcReference) and asserts that
// tshark shows those values at the end of the frame
// (infiniband.invariant.crc and .variant.crc print the octets as
// big-endian numbers; we send both least significant octet first).
func TestTsharkDecodesNativeIB(t *testing.T) {
	frames := tsharkFrames(t)
	var raw [][]byte
	for i, f := range frames {
		global := i%2 == 1
		fr := IBFrame{
			LRH:    LRH{VL: uint8(i % 8), SL: uint8(i % 16), DLID: uint16(0x10 + i), SLID: uint16(0x100 + i)},
			HasGRH: global,
			Packet: f.pkt,
		}
		if global {
			fr.LRH.DLID = 0xc000 + uint16(i)
			fr.GRH = GRH{TClass: uint8(i), FlowLabel: uint32(0x10000 + i), HopLmt: 1,
				SGID: testutil.MustGID("fe80::2:c903:0:1"), DGID: testutil.MustGID(fmt.Sprintf("fe80::2:c903:0:%x", i+2))}
		}
		b, err := AppendIBFrame(nil, &fr)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		n := len(b) - VCRCLen
		if got, want := GetICRC(b[n-ICRCLen:n]), ibICRCReference(b, global); got != want {
			t.Fatalf("%s: ICRC %#08x, reference %#08x", f.name, got, want)
		}
		if got, want := GetVCRC(b[n:]), vcrcReference(b[:n]); got != want {
			t.Fatalf("%s: VCRC %#04x, reference %#04x", f.name, got, want)
		}
		want := maps.Clone(f.want)
		delete(want, "udp.dstport")
		delete(want, "udp.length")
		// On RoCE tshark shows the REQ's IPv4-mapped GIDs as IPv4
		// addresses; on a native link as the GIDs they are.
		for _, k := range []string{"infiniband.cm.req.prim_localgid", "infiniband.cm.req.prim_remotegid"} {
			if v, ok := want[k+"_ipv4"]; ok {
				delete(want, k+"_ipv4")
				want[k] = "::ffff:" + v
			}
		}
		bth := f.pkt.BTH
		for k, v := range map[string]string{
			"infiniband.lrh.vl":        fmt.Sprintf("0x%02x", fr.LRH.VL),
			"infiniband.lrh.lver":      "0",
			"infiniband.lrh.sl":        strconv.Itoa(int(fr.LRH.SL)),
			"infiniband.lrh.lnh":       fmt.Sprintf("0x%02x", b[1]&3),
			"infiniband.lrh.dlid":      strconv.Itoa(int(fr.LRH.DLID)),
			"infiniband.lrh.pktlen":    strconv.Itoa(n / 4),
			"infiniband.lrh.slid":      strconv.Itoa(int(fr.LRH.SLID)),
			"infiniband.bth.se":        tsharkBool(bth.SE),
			"infiniband.bth.padcnt":    strconv.Itoa(int(PadCount(len(f.pkt.Payload)))),
			"infiniband.bth.p_key":     strconv.Itoa(int(bth.PKey)),
			"infiniband.bth.destqp":    fmt.Sprintf("0x%06x", uint32(bth.DestQP)),
			"infiniband.bth.a":         tsharkBool(bth.AckReq),
			"infiniband.bth.psn":       strconv.Itoa(int(bth.PSN)),
			"infiniband.invariant.crc": fmt.Sprintf("0x%08x", binary.BigEndian.Uint32(b[n-ICRCLen:n])),
			"infiniband.variant.crc":   fmt.Sprintf("0x%04x", binary.BigEndian.Uint16(b[n:])),
			"infiniband.grh.ipver":     "",
			"infiniband.grh.paylen":    "",
			"infiniband.grh.nxthdr":    "",
			"infiniband.grh.hoplmt":    "",
			"infiniband.grh.sgid":      "",
			"infiniband.grh.dgid":      "",
		} {
			want[k] = v
		}
		if global {
			want["infiniband.grh.ipver"] = "6"
			want["infiniband.grh.paylen"] = strconv.Itoa(n - LRHLen - ib.GRHLen)
			want["infiniband.grh.nxthdr"] = "27"
			want["infiniband.grh.hoplmt"] = "1"
			want["infiniband.grh.sgid"] = fr.GRH.SGID.String()
			want["infiniband.grh.dgid"] = fr.GRH.DGID.String()
		}
		frames[i].want = want
		raw = append(raw, b)
	}
	file, opts := tsharkIBCapture(t, raw)
	if keep := os.Getenv("SOFTIB_TSHARK_IB_PCAP"); keep != "" {
		if err := os.WriteFile(keep, testutil.Pcap(linkTypeInfiniBand, raw), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	union := map[string]bool{}
	for _, f := range frames {
		for k := range f.want {
			union[k] = true
		}
	}
	fields := slices.Sorted(maps.Keys(union))
	for i, got := range testutil.TsharkFields(t, file, len(frames), fields, append([]string{"-E", "occurrence=a"}, opts...)...) {
		f := frames[i]
		if len(got) != len(fields) {
			t.Fatalf("frame %d (%s): %d fields, want %d", i+1, f.name, len(got), len(fields))
		}
		for j, name := range fields {
			if got[j] != f.want[name] {
				t.Errorf("frame %d (%s): %s = %q, want %q", i+1, f.name, name, got[j], f.want[name])
			}
		}
	}
	const bad = "_ws.malformed || _ws.expert.severity >= warning"
	if out := testutil.Tshark(t, append([]string{"-r", file, "-Y", bad}, opts...)...); len(out) != 0 {
		t.Errorf("tshark reports malformed or expert findings:\n%s", strings.Join(out, "\n"))
	}
	cut, opts := tsharkIBCapture(t, [][]byte{raw[0][:24]})
	if out := testutil.Tshark(t, append([]string{"-r", cut, "-Y", bad}, opts...)...); len(out) != 1 {
		t.Errorf("the filter %q does not flag a truncated frame: %q", bad, out)
	}
}

// tsharkIBCapture writes frames as a link type 247 capture and returns it
// with the tshark options that read it. Wireshark before 4.2 has the
// InfiniBand dissector but no pcap link type for it ("network type 247
// unknown"): then the same records go in a DLT_USER0 (147) capture that a
// user DLT preference hands to the "infiniband" dissector, which is what
// 247 selects in later versions.
func tsharkIBCapture(t *testing.T, frames [][]byte) (file string, opts []string) {
	t.Helper()
	file = testutil.WritePcap(t, "ib.pcap", linkTypeInfiniBand, frames)
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed")
	}
	cmd := exec.Command(tshark, "-r", file, "-c", "1")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "network type 247 unknown") {
		return file, nil
	}
	t.Logf("this tshark cannot read link type 247: reading DLT_USER0 as infiniband instead")
	file = testutil.WritePcap(t, "ib-user0.pcap", linkTypeUser0, frames)
	return file, []string{"-o", `uat:user_dlts:"User 0 (DLT=147)","infiniband","0","","0",""`}
}

// linkTypeUser0 is DLT_USER0, a link type for private use.
const linkTypeUser0 = 147
