//go:build linux

package verbs

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
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

// struct ib_user_mad_reg_req2 and the ioctl numbers as the kernel's
// _IOWR/_IOW macros make them.
func TestUMADRegReq2Layout(t *testing.T) {
	var r umadRegReq2
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"size", unsafe.Sizeof(r), 40},
		{"qpn", unsafe.Offsetof(r.QPN), 4},
		{"mgmt_class", unsafe.Offsetof(r.MgmtClass), 8},
		{"mgmt_class_version", unsafe.Offsetof(r.Version), 9},
		{"flags", unsafe.Offsetof(r.Flags), 12},
		{"method_mask", unsafe.Offsetof(r.MethodMask), 16},
		{"oui", unsafe.Offsetof(r.OUI), 32},
		{"rmpp_version", unsafe.Offsetof(r.RMPPVersion), 36},
		{"REGISTER_AGENT2", umadRegisterAgent2, 0xc0281b04},
		{"UNREGISTER_AGENT", umadUnregisterAgent, 0x40041b02},
	} {
		if f.got != f.want {
			t.Errorf("%s: %#x, want %#x", f.name, f.got, f.want)
		}
	}
}

// Every read is either a MAD the engine can answer or a counted drop.
func TestUMADParse(t *testing.T) {
	peer := ib.GID{0xfe, 0x80, 15: 7}
	pkeys := []ib.PKey{0xffff, 0x8001}
	good := umadHdr{Length: umadMsgLen, QPN: 1, GRH: true, GID: peer, PKeyIndex: 1, LID: 9}
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
		{"no GRH", msg(with(func(h *umadHdr) { h.GRH = false }), umadMsgLen), false, "umad_rx_drop_no_grh"},
		{"P_Key index outside the table", msg(with(func(h *umadHdr) { h.PKeyIndex = 2 }), umadMsgLen), false, "umad_rx_drop_bad_pkey_index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &umadService{cfg: umadConfig{pkeys: pkeys}, lids: map[ib.GID]uint16{}}
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
			if m.From != (ib.MADAddr{GID: peer, QPN: 1, PKey: 0x8001}) {
				t.Errorf("from %+v", m.From)
			}
			if !bytes.Equal(m.Data[:], tc.read[umadHdrLen:]) {
				t.Error("MAD data differs")
			}
			if s.lids[peer] != 9 {
				t.Errorf("LID learned: %d, want 9", s.lids[peer])
			}
		})
	}
}

func TestUMADPathAndCMHolders(t *testing.T) {
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
	write("class/infiniband_mad/abi_version", "5\n")
	write("class/infiniband_mad/umad0/ibdev", "rxe0\n")
	write("class/infiniband_mad/umad0/port", "1\n")
	write("class/infiniband_mad/umad1/ibdev", "rxe1\n")
	write("class/infiniband_mad/umad1/port", "1\n")
	s := sysfs(root)
	for _, tc := range []struct {
		dev  string
		port int
		want string
	}{{"rxe0", 1, "/dev/infiniband/umad0"}, {"rxe1", 1, "/dev/infiniband/umad1"}, {"rxe1", 2, ""}, {"mlx5_0", 1, ""}} {
		got, err := s.umadPath("/dev/infiniband", tc.dev, tc.port)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("%s port %d: %q, %v; want %q", tc.dev, tc.port, got, err, tc.want)
		}
	}
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

// The header decoder takes any octets: a decoded header encodes back to the
// same fields, and parse counts what it does not hand on.
func FuzzUMADHdr(f *testing.F) {
	b := make([]byte, umadMsgLen)
	(&umadHdr{Length: umadMsgLen, QPN: 1, GRH: true}).encode(b)
	f.Add(b)
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
		s := &umadService{cfg: umadConfig{pkeys: []ib.PKey{0xffff}}, lids: map[ib.GID]uint16{}}
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
