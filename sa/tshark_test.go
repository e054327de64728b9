package sa

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/internal/testutil"
)

// TestTsharkDecodesSAMADs is the independent wire check: every golden MAD
// is framed as the packet that carries it to or from the SA (BTH UD SEND
// to QP1, DETH with the GSI Q_Key, the MAD, ICRC,
// in RoCEv2 framing, see ibFrame) and Wireshark's InfiniBand dissector
// must read back the SA header and every record field we put in, and
// report nothing malformed. tshark 4.0 does not verify the ICRC, so it is
// written as zero.
func TestTsharkDecodesSAMADs(t *testing.T) {
	gs := goldens(t)
	names := goldenNames(gs)
	var frames [][]byte
	for _, n := range names {
		frames = append(frames, ibFrame(gs[n].mad(t)))
	}
	common := []string{"infiniband.mad.mgmtclass", "infiniband.mad.method", "infiniband.mad.status", "infiniband.mad.transactionid",
		"infiniband.mad.attributeid", "infiniband.rmpp.rmppversion", "infiniband.sa.attributeoffset", "infiniband.sa.componentmask"}
	path := []string{"infiniband.pathrecord.dgid", "infiniband.pathrecord.sgid", "infiniband.pathrecord.dlid", "infiniband.pathrecord.slid",
		"infiniband.pathrecord.rawtraffic", "infiniband.pathrecord.flowlabel", "infiniband.pathrecord.hoplimit", "infiniband.pathrecord.tclass",
		"infiniband.pathrecord.reversible", "infiniband.pathrecord.numbpath", "infiniband.pathrecord.p_key", "infiniband.pathrecord.sl",
		"infiniband.pathrecord.mtuselector", "infiniband.pathrecord.mtu", "infiniband.pathrecord.rateselector", "infiniband.pathrecord.rate",
		"infiniband.pathrecord.packetlifetimeselector", "infiniband.pathrecord.packetlifetime", "infiniband.pathrecord.preference"}
	mcm := []string{"infiniband.mcmemberrecord.mgid", "infiniband.mcmemberrecord.portgid", "infiniband.mcmemberrecord.q_key",
		"infiniband.mcmemberrecord.mlid", "infiniband.mcmemberrecord.mtuselector", "infiniband.mcmemberrecord.mtu", "infiniband.mcmemberrecord.tclass",
		"infiniband.mcmemberrecord.p_key", "infiniband.mcmemberrecord.rateselector", "infiniband.mcmemberrecord.rate",
		"infiniband.mcmemberrecord.packetlifetimeselector", "infiniband.mcmemberrecord.packetlifetime", "infiniband.mcmemberrecord.sl",
		"infiniband.mcmemberrecord.flowlabel", "infiniband.mcmemberrecord.hoplimit", "infiniband.mcmemberrecord.scope",
		"infiniband.mcmemberrecord.joinstate", "infiniband.mcmemberrecord.proxyjoin"}
	fields := append(append(append(append([]string{}, common...), path...), mcm...), "_ws.malformed", "_ws.expert.severity")

	file := testutil.WritePcap(t, "sa.pcap", testutil.LinkTypeEthernet, frames)
	for i, row := range testutil.TsharkFields(t, file, len(frames), fields) {
		g := gs[names[i]]
		got := map[string]string{}
		for j, v := range row {
			got[fields[j]] = v
		}
		want := map[string]string{
			"infiniband.mad.mgmtclass":      "0x03",
			"infiniband.mad.method":         fmt.Sprintf("0x%02x", uint8(g.hdr.Method)),
			"infiniband.mad.status":         fmt.Sprintf("0x%04x", uint16(g.hdr.Status)),
			"infiniband.mad.transactionid":  fmt.Sprintf("0x%016x", g.hdr.TransactionID),
			"infiniband.mad.attributeid":    fmt.Sprintf("0x%04x", uint16(g.hdr.AttributeID)),
			"infiniband.rmpp.rmppversion":   "0x01",
			"infiniband.sa.attributeoffset": fmt.Sprintf("0x%04x", g.hdr.AttributeOffset),
			"infiniband.sa.componentmask":   fmt.Sprintf("0x%016x", g.hdr.ComponentMask),
		}
		switch r := g.rec.(type) {
		case *PathRecord:
			maps(want, path, r.DGID.String(), r.SGID.String(), u(r.DLID), u(r.SLID), b(r.RawTraffic), u(r.FlowLabel),
				u(r.HopLimit), u(r.TClass), b(r.Reversible), u(r.NumbPath), u(uint16(r.PKey)), u(r.SL),
				u(r.MTU.Selector), u(r.MTU.Value), u(r.Rate.Selector), u(r.Rate.Value), u(r.Lifetime.Selector), u(r.Lifetime.Value), u(r.Preference))
		case *MCMemberRecord:
			maps(want, mcm, r.MGID.String(), r.PortGID.String(), u(uint32(r.QKey)), u(r.MLID), u(r.MTU.Selector), u(r.MTU.Value),
				u(r.TClass), u(uint16(r.PKey)), u(r.Rate.Selector), u(r.Rate.Value), u(r.Lifetime.Selector), u(r.Lifetime.Value),
				u(r.SL), u(r.FlowLabel), u(r.HopLimit), u(r.Scope), u(r.JoinState), b(r.ProxyJoin))
		}
		for k, v := range want {
			if norm(got[k]) != norm(v) {
				t.Errorf("%s: %s = %q, want %q", names[i], k, got[k], v)
			}
		}
		if got["_ws.malformed"] != "" || got["_ws.expert.severity"] != "" {
			t.Errorf("%s: tshark reports malformed %q, expert %q", names[i], got["_ws.malformed"], got["_ws.expert.severity"])
		}
		if testing.Verbose() {
			t.Logf("%s: %s", names[i], strings.Join(row, "|"))
		}
	}
}

// norm compares numbers whatever base tshark prints them in.
func norm(s string) string {
	if n, err := strconv.ParseUint(s, 0, 64); err == nil {
		return strconv.FormatUint(n, 10)
	}
	return s
}

func u[T ~uint8 | ~uint16 | ~uint32](v T) string { return strconv.FormatUint(uint64(v), 10) }

func b(v bool) string {
	if v {
		return "1"
	}
	return "0"
}

func maps(m map[string]string, keys []string, vals ...string) {
	for i, k := range keys {
		m[k] = vals[i]
	}
}

// ibFrame puts a MAD in the RoCEv2 packet that carries it to QP1
// (tshark 4.0 reads no raw InfiniBand link type, and the SA dissector is
// the same behind either framing): Ethernet, IPv4 (the GRH's place), UDP
// to 4791, BTH (SEND only, P_Key 0xffff, QP 1), DETH (Q_Key 0x80010000,
// source QP 1), the MAD and an ICRC.
func ibFrame(mad []byte) []byte {
	const eth, ip, udp, bth, deth, icrc = 14, 20, 8, 12, 8, 4
	be := binary.BigEndian
	f := make([]byte, eth+ip+udp+bth+deth, eth+ip+udp+bth+deth+len(mad)+icrc)
	copy(f[0:], []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00})
	h := f[eth:]
	h[0], h[8], h[9] = 0x45, 64, 17
	be.PutUint16(h[2:], uint16(ip+udp+bth+deth+len(mad)+icrc))
	copy(h[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	var sum uint32
	for i := 0; i < ip; i += 2 {
		sum += uint32(be.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	be.PutUint16(h[10:], ^uint16(sum))
	u := h[ip:]
	be.PutUint16(u[0:], 0xc000)
	be.PutUint16(u[2:], 4791)
	be.PutUint16(u[4:], uint16(udp+bth+deth+len(mad)+icrc))
	x := u[udp:]
	x[0] = 0x64 // UD SEND only
	be.PutUint16(x[2:], 0xffff)
	be.PutUint32(x[4:], 1)
	be.PutUint32(x[8:], 7) // PSN
	be.PutUint32(x[12:], 0x80010000)
	be.PutUint32(x[16:], 1)
	f = append(f, mad...)
	return append(f, make([]byte, icrc)...)
}
