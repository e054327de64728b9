//go:build linux

package verbs

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/madqueue"
)

// The header's layout is the uapi's (include/uapi/rdma/ib_user_mad.h):
// every field at its offset, in its byte order.
func TestUMADHdrLayout(t *testing.T) {
	gid := ib.GID{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1}
	h := umadHdr{
		Agent: 0x01020304, Status: 5, TimeoutMs: 6, Retries: 7, Length: umadMsgLen,
		QPN: 1, QKey: ib.GSIQKey, LID: 0x1234, SL: 3, PathBits: 4, GRH: true, GIDIndex: 2,
		HopLimit: 64, TClass: 9, GID: gid, FlowLabel: 0xabcde, PKeyIndex: 0x0102,
	}
	b := bytes.Repeat([]byte{0xee}, umadHdrLen)
	h.encode(b)
	ne32 := func(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
	be32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	for _, f := range []struct {
		name string
		off  int
		want []byte
	}{
		{"id", 0, ne32(0x01020304)}, {"status", 4, ne32(5)}, {"timeout_ms", 8, ne32(6)},
		{"retries", 12, ne32(7)}, {"length", 16, ne32(320)}, {"qpn", 20, be32(1)},
		{"qkey", 24, be32(0x80010000)}, {"lid", 28, []byte{0x12, 0x34}}, {"sl", 30, []byte{3}},
		{"path_bits", 31, []byte{4}}, {"grh_present", 32, []byte{1}}, {"gid_index", 33, []byte{2}},
		{"hop_limit", 34, []byte{64}}, {"traffic_class", 35, []byte{9}}, {"gid", 36, gid[:]},
		{"flow_label", 52, be32(0xabcde)}, {"pkey_index", 56, binary.NativeEndian.AppendUint16(nil, 0x0102)},
		{"reserved", 58, make([]byte, 6)},
	} {
		if got := b[f.off : f.off+len(f.want)]; !bytes.Equal(got, f.want) {
			t.Errorf("%s at %d: % x, want % x", f.name, f.off, got, f.want)
		}
	}
	back, err := decodeUMADHdr(b)
	if err != nil || back != h {
		t.Errorf("decode: %+v, %v; want %+v", back, err, h)
	}
	if _, err := decodeUMADHdr(b[:umadHdrLen-1]); err == nil {
		t.Error("a short header decoded")
	}
}

// header writes a golden ib_user_mad_hdr from hex fragments in the uapi's
// field order; the host-order fields are written little-endian, so the
// vectors hold on little-endian hosts only.
func header(tb testing.TB, parts ...string) []byte {
	tb.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		tb.Skip("the golden headers are written for a little-endian host")
	}
	b, err := hex.DecodeString(strings.ReplaceAll(strings.Join(parts, ""), " ", ""))
	if err != nil || len(b) != umadHdrLen {
		tb.Fatalf("golden header of %d octets (%v)", len(b), err)
	}
	return b
}

var (
	umadPeer = ib.GID{0xfe, 0x80, 8: 0x00, 0x02, 0xc9, 0x03, 0, 0, 0, 0x02}
	// umadPKeys is a port's table: the default partition and 0x8001.
	umadPKeys = []ib.PKey{0xffff, 0x8001}
)

// Golden vectors of what the kernel's recv_handler reports, and the
// address the engine gets from it.
func TestUMADRecvGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  []byte
		want ib.MADAddr
	}{
		{"GRH-less, inside the subnet: LID 0x12, SL 3, to our path bits 2, P_Key index 1", header(t,
			"00000000", "00000000", "00000000", "00000000", "40010000", // id status timeout retries length
			"00000001", "80010000", "0012", "03", "02", // qpn qkey lid sl path_bits
			"00", "00", "00", "00", // grh_present gid_index hop_limit traffic_class
			"00000000000000000000000000000000", "00000000", "0100", "000000000000"), // gid flow_label pkey_index reserved
			ib.MADAddr{QPN: 1, PKey: 0x8001, Path: ib.Path{DLID: 0x12, SL: 3, SrcPathBits: 2}}},
		{"with a GRH: the sender's GID and the GRH's fields", header(t,
			"00000000", "00000000", "00000000", "00000000", "40010000",
			"00000001", "80010000", "0034", "05", "00",
			"01", "00", "ff", "20",
			"fe80000000000000"+"0002c90300000002", "00012345", "0000", "000000000000"),
			ib.MADAddr{GID: umadPeer, QPN: 1, PKey: 0xffff, Path: ib.Path{DLID: 0x34, SL: 5, GRH: true, HopLimit: 0xff, TrafficClass: 0x20, FlowLabel: 0x12345}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := decodeUMADHdr(tc.hdr)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := h.madFrom(umadPKeys)
			if !ok || got != tc.want {
				t.Errorf("from %+v (ok %v)\nwant %+v", got, ok, tc.want)
			}
		})
	}
}

// Golden vectors of what we write: LID-routed without a GRH unless the
// address asks for one on InfiniBand, always a GRH on RoCE.
func TestUMADSendGolden(t *testing.T) {
	lid := ib.Path{DLID: 0x11, SL: 3, SrcPathBits: 1}
	grh := ib.Path{DLID: 0x11, SL: 3, SrcPathBits: 1, GRH: true, HopLimit: 0xff, TrafficClass: 0x20, FlowLabel: 0x12345}
	for _, tc := range []struct {
		name     string
		to       ib.MADAddr
		ethernet bool
		want     []byte
	}{
		{"InfiniBand, no GRH: DLID 0x11, SL 3, path bits 1, P_Key index 1",
			ib.MADAddr{GID: umadPeer, QPN: 1, PKey: 0x8001, Path: lid}, false, header(t,
				"07000000", "00000000", "00000000", "00000000", "40010000",
				"00000001", "80010000", "0011", "03", "01",
				"00", "00", "00", "00",
				"00000000000000000000000000000000", "00000000", "0100", "000000000000")},
		{"InfiniBand with a GRH asked for",
			ib.MADAddr{GID: umadPeer, QPN: 1, PKey: 0x8001, Path: grh}, false, header(t,
				"07000000", "00000000", "00000000", "00000000", "40010000",
				"00000001", "80010000", "0011", "03", "01",
				"01", "02", "ff", "20",
				"fe80000000000000"+"0002c90300000002", "00012345", "0100", "000000000000")},
		{"RoCE: GID only, a GRH with hop limit 64",
			ib.MADAddr{GID: umadPeer, QPN: 1, PKey: 0xffff}, true, header(t,
				"07000000", "00000000", "00000000", "00000000", "40010000",
				"00000001", "80010000", "0000", "00", "00",
				"01", "02", "40", "00",
				"fe80000000000000"+"0002c90300000002", "00000000", "0000", "000000000000")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [umadHdrLen]byte
			h, err := sendHdr(tc.to, 7, 2, umadPKeys, tc.ethernet)
			if err != nil {
				t.Fatal(err)
			}
			h.encode(got[:])
			if !bytes.Equal(got[:], tc.want) {
				t.Errorf("header\n% x\nwant\n% x", got, tc.want)
			}
		})
	}
}

// What cannot be sent is refused before it reaches the port.
func TestUMADSendHdrRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		to   ib.MADAddr
		want error
	}{
		{"InfiniBand without a LID", ib.MADAddr{GID: umadPeer, QPN: 1, PKey: 0xffff}, errNoLID},
		{"a P_Key the port does not hold", ib.MADAddr{QPN: 1, PKey: 0x8002, Path: ib.Path{DLID: 5}}, nil},
	} {
		if _, err := sendHdr(tc.to, 1, 0, umadPKeys, false); err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: %v, want an error (%v)", tc.name, err, tc.want)
		}
	}
	// The other membership of a partition the port holds is its entry.
	if h, err := sendHdr(ib.MADAddr{QPN: 1, PKey: 0x0001, Path: ib.Path{DLID: 5}}, 1, 0, umadPKeys, false); err != nil || h.PKeyIndex != 1 {
		t.Errorf("limited member of 0x8001: index %d, %v; want 1", h.PKeyIndex, err)
	}
}

// fakeUMAD records what the service sends.
type fakeUMAD struct{ sent [][]byte }

func (f *fakeUMAD) send(msg []byte) error { f.sent = append(f.sent, bytes.Clone(msg)); return nil }
func (f *fakeUMAD) close() error          { return nil }

// P_Key indices both ways follow the table as it is now: after the SM
// moved 0x8001 from index 1 to 2, a MAD arriving with index 2 is in 0x8001
// and one sent in 0x8001 names index 2.
func TestUMADPKeyTableChange(t *testing.T) {
	table := umadPKeys
	io := &fakeUMAD{}
	s := &umadService{cfg: umadConfig{pkeys: func() []ib.PKey { return table }}, io: io}
	to := ib.MADAddr{QPN: 1, PKey: 0x8001, Path: ib.Path{DLID: 9}}
	msg := make([]byte, umadMsgLen)
	(&umadHdr{Length: umadMsgLen, QPN: 1, LID: 9, PKeyIndex: 2}).encode(msg)
	if _, ok := s.parse(msg); ok {
		t.Error("index 2 accepted with a table of 2")
	}
	table = []ib.PKey{0xffff, 0x8003, 0x8001}
	if m, ok := s.parse(msg); !ok || m.From.PKey != 0x8001 {
		t.Errorf("after the change: %+v %v, want P_Key 0x8001", m.From, ok)
	}
	if err := s.Send(to, make([]byte, 256)); err != nil {
		t.Fatal(err)
	}
	if h, _ := decodeUMADHdr(io.sent[0]); h.PKeyIndex != 2 || h.LID != 9 {
		t.Errorf("sent with P_Key index %d to LID %d, want 2 and 9", h.PKeyIndex, h.LID)
	}
}

func TestUMADSendCounters(t *testing.T) {
	io := &fakeUMAD{}
	s := &umadService{cfg: umadConfig{pkeys: func() []ib.PKey { return umadPKeys }}, io: io}
	if err := s.Send(ib.MADAddr{GID: umadPeer, QPN: 1, PKey: 0xffff}, make([]byte, 256)); !errors.Is(err, errNoLID) {
		t.Errorf("send without a LID: %v", err)
	}
	if err := s.Send(ib.MADAddr{QPN: 1, PKey: 0xffff, Path: ib.Path{DLID: 3}}, make([]byte, 256)); err != nil {
		t.Error(err)
	}
	if len(io.sent) != 1 {
		t.Errorf("%d MADs reached the port, want 1", len(io.sent))
	}
	for _, want := range []ib.Counter{{Name: "umad_sent", Value: 1}, {Name: "umad_send_errors", Value: 1}, {Name: "umad_send_no_lid", Value: 1}} {
		if !slices.Contains(s.Counters(), want) {
			t.Errorf("counters %v lack %v", s.Counters(), want)
		}
	}
}

// Answering a received MAD goes back the way it came: the header we write
// for its address names the LID, SL and path bits it reported, and a GRH
// exactly when it had one; one without a LID is refused, never sent to
// LID 0.
func FuzzUMADAnswer(f *testing.F) {
	for _, h := range []umadHdr{
		{Length: umadMsgLen, QPN: 1, LID: 0x12, SL: 3, PathBits: 2, PKeyIndex: 1},
		{Length: umadMsgLen, QPN: 1, LID: 0x34, SL: 5, GRH: true, HopLimit: 0xff, TClass: 0x20, GID: umadPeer, FlowLabel: 0x12345},
		{Length: umadMsgLen, QPN: 1, GRH: true, GID: umadPeer},
	} {
		b := make([]byte, umadHdrLen)
		h.encode(b)
		f.Add(b)
	}
	pkeys := []ib.PKey{0xffff, 0x8001, 0x0002}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := decodeUMADHdr(data)
		if err != nil {
			return
		}
		from, ok := h.madFrom(pkeys)
		if !ok {
			if int(h.PKeyIndex) < len(pkeys) {
				t.Fatalf("index %d refused", h.PKeyIndex)
			}
			return
		}
		out, err := sendHdr(from, 1, 0, pkeys, false)
		if h.LID == 0 {
			if !errors.Is(err, errNoLID) {
				t.Fatalf("no LID: %v, want errNoLID", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, umadHdrLen)
		out.encode(b)
		back, _ := decodeUMADHdr(b)
		if back.LID != h.LID || back.SL != h.SL&0xf || back.PathBits != h.PathBits&0x7f || back.GRH != h.GRH ||
			back.PKeyIndex != h.PKeyIndex || back.QPN != h.QPN&ib.QPNMask && !(h.QPN&ib.QPNMask == 0 && back.QPN == ib.QP1) {
			t.Fatalf("answer %+v to %+v", back, h)
		}
		if h.GRH && (back.GID != h.GID || back.TClass != h.TClass || back.FlowLabel != h.FlowLabel&0xfffff ||
			back.HopLimit != h.HopLimit && !(h.HopLimit == 0 && back.HopLimit == umadHopLimit)) {
			t.Fatalf("answer's GRH %+v to %+v", back, h)
		}
	})
}

// Every read is either a MAD the engine can answer or a counted drop.
func TestUMADParse(t *testing.T) {
	peer := ib.GID{0xfe, 0x80, 15: 7}
	pkeys := []ib.PKey{0xffff, 0x8001}
	good := umadHdr{Length: umadMsgLen, QPN: 1, GRH: true, GID: peer, PKeyIndex: 1, LID: 9, SL: 2, HopLimit: 0xff}
	msg := func(h umadHdr, n int) []byte {
		b := make([]byte, umadMsgLen)
		h.encode(b)
		for i := umadHdrLen; i < len(b); i++ {
			b[i] = byte(i)
		}
		return b[:n]
	}
	with := func(f func(*umadHdr)) umadHdr { h := good; f(&h); return h }
	for _, tc := range []struct {
		name    string
		read    []byte
		ok      bool
		counter string
	}{
		{"good", msg(good, umadMsgLen), true, "umad_received"},
		{"short header", msg(good, 10), false, "umad_rx_drop_short"},
		{"short MAD", msg(good, umadMsgLen-1), false, "umad_rx_drop_short"},
		{"send timeout report", msg(with(func(h *umadHdr) { h.Status = 110 }), umadMsgLen), false, "umad_rx_drop_status"},
		{"no GRH: kept, addressed by LID", msg(with(func(h *umadHdr) { h.GRH = false }), umadMsgLen), true, "umad_received"},
		{"P_Key index outside the table", msg(with(func(h *umadHdr) { h.PKeyIndex = 2 }), umadMsgLen), false, "umad_rx_drop_bad_pkey_index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &umadService{cfg: umadConfig{pkeys: func() []ib.PKey { return pkeys }}}
			m, ok := s.parse(tc.read)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			for _, c := range s.Counters() {
				want := uint64(0)
				if c.Name == tc.counter {
					want = 1
				}
				if c.Value != want {
					t.Errorf("%s = %d, want %d", c.Name, c.Value, want)
				}
			}
			if !ok {
				return
			}
			want := ib.MADAddr{QPN: 1, PKey: 0x8001, Path: ib.Path{DLID: 9, SL: 2}}
			if h, _ := decodeUMADHdr(tc.read); h.GRH {
				want.GID, want.Path.GRH, want.Path.HopLimit = peer, true, 0xff
			}
			if m.From != want {
				t.Errorf("from %+v, want %+v", m.From, want)
			}
			if !bytes.Equal(m.Data[:], tc.read[umadHdrLen:]) {
				t.Error("MAD data differs")
			}
		})
	}
}

func TestCMHolders(t *testing.T) {
	root := t.TempDir()
	write := func(rel, data string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := sysfs(root)
	if loaded, _ := s.cmHolders(); loaded {
		t.Error("ib_cm reported loaded without /sys/module/ib_cm")
	}
	write("module/ib_cm/holders/rdma_cm", "")
	write("module/ib_cm/holders/ib_ipoib", "")
	loaded, holders := s.cmHolders()
	if !loaded || !slices.Equal(holders, []string{"ib_ipoib", "rdma_cm"}) {
		t.Errorf("loaded %v holders %v", loaded, holders)
	}
	if msg := CMLoadedError(holders).Error(); !bytes.Contains([]byte(msg), []byte("ib_ipoib, rdma_cm")) {
		t.Errorf("error does not name the holders: %s", msg)
	}
}

// The header decoder takes any octets, GRH-less headers as well as those
// with a GRH: a decoded header encodes back to the same fields, and parse
// counts exactly one event for each read (received or a drop by cause).
func FuzzUMADHdr(f *testing.F) {
	b := make([]byte, umadMsgLen)
	(&umadHdr{Length: umadMsgLen, QPN: 1, GRH: true}).encode(b)
	f.Add(b)
	g := make([]byte, umadMsgLen)
	(&umadHdr{Length: umadMsgLen, QPN: 1, LID: 0x12, SL: 3, PathBits: 2}).encode(g)
	f.Add(g)
	f.Add(b[:10])
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := decodeUMADHdr(data)
		if err != nil {
			return
		}
		out := make([]byte, umadHdrLen)
		h.encode(out)
		back, err := decodeUMADHdr(out)
		if err != nil || back != h {
			t.Fatalf("round trip: %+v, want %+v", back, h)
		}
		s := &umadService{cfg: umadConfig{pkeys: func() []ib.PKey { return []ib.PKey{0xffff} }}}
		_, ok := s.parse(data)
		var sum uint64
		for _, c := range s.Counters() {
			sum += c.Value
		}
		if sum != 1 {
			t.Fatalf("parse ok=%v counted %d events, want exactly one", ok, sum)
		}
	})
}

// take queues what the engine may read: a flood from one source stops at
// its share of the queue once it is over half full, and another source's
// MAD is still queued; the source is the LID on InfiniBand, the GID on
// RoCE (no LID).
func TestUMADTakeSourceShare(t *testing.T) {
	pkeys := []ib.PKey{0xffff}
	read := func(lid uint16, gid byte) []byte {
		b := make([]byte, umadMsgLen)
		h := umadHdr{Length: umadMsgLen, QPN: 1, LID: lid}
		if gid != 0 {
			h.GRH, h.GID, h.HopLimit = true, ib.GID{0xfe, 0x80, 15: gid}, 0xff
		}
		h.encode(b)
		return b
	}
	type burst struct {
		lid uint16
		gid byte
		n   int
	}
	for _, tc := range []struct {
		name                string
		reads               []burst
		queued, share, full uint64
	}{
		{"one LID floods", []burst{{lid: 9, n: 300}}, 129, 171, 0},
		{"then another LID", []burst{{lid: 9, n: 300}, {lid: 10, n: 1}}, 130, 171, 0},
		{"same LID, another GRH", []burst{{lid: 9, n: 300}, {lid: 9, gid: 3, n: 1}}, 129, 172, 0},
		{"RoCE: by GID", []burst{{gid: 3, n: 300}, {gid: 4, n: 2}}, 131, 171, 0},
		{"sources under their share fill it", []burst{{lid: 1, n: 64}, {lid: 2, n: 64}, {lid: 3, n: 64}, {lid: 4, n: 64}, {lid: 5, n: 1}}, 256, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &umadService{cfg: umadConfig{pkeys: func() []ib.PKey { return pkeys }},
				recv: make(chan ib.MAD, umadQueue), shares: madqueue.New(umadQueue)}
			for _, b := range tc.reads {
				msg := read(b.lid, b.gid)
				for range b.n {
					s.take(msg)
				}
			}
			c := s.Counters()
			got := []uint64{uint64(len(s.recv)), counter(c, "umad_rx_drop_source_share"), counter(c, "umad_rx_drop_queue_full")}
			if want := []uint64{tc.queued, tc.share, tc.full}; !slices.Equal(got, want) {
				t.Errorf("queued, refused by share, queue full: %v, want %v", got, want)
			}
		})
	}
}

// counter returns the value of the counter called name, or 0.
func counter(cs []ib.Counter, name string) uint64 {
	for _, c := range cs {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

func TestUMADRecvAgain(t *testing.T) {
	for _, c := range []struct {
		name       string
		ret, errno error
		again      bool
	}{
		{"poll timed out", syscall.ETIMEDOUT, nil, true},
		{"nothing to read", syscall.EAGAIN, syscall.EAGAIN, true},
		{"read interrupted", syscall.EINTR, syscall.EINTR, true},
		{"poll interrupted: libibumad says EIO, errno says EINTR", syscall.EIO, syscall.EINTR, true},
		{"agents dead: the read's own EIO", syscall.EIO, syscall.EIO, false},
		{"EIO with no errno", syscall.EIO, nil, false},
		{"buffer too small", syscall.ENOSPC, syscall.ENOSPC, false},
		{"port closed", syscall.EBADF, syscall.EBADF, false},
	} {
		if got := umadRecvAgain(c.ret, c.errno); got != c.again {
			t.Errorf("%s: umadRecvAgain(%v, %v) = %v, want %v", c.name, c.ret, c.errno, got, c.again)
		}
	}
}
