//go:build linux

package verbs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
	"golang.org/x/sys/unix"
)

// umadConfig is what the MAD service needs to know of its port.
type umadConfig struct {
	device   string // rdma device name
	port     int
	gidIndex uint8     // our GID, the source of every GRH
	pkeys    []ib.PKey // the port's P_Key table
	ethernet bool      // RoCE: every MAD carries a GRH and no LID
}

// umadService is QP1's CM class through ib_umad: an ib.MADService on a
// port whose QP1 the kernel owns, so that the cm.Engine runs on rdma-core
// adapters as on softib. It needs the kernel's CM (ib_cm) not loaded: the
// MAD layer gives a class's methods to one agent only (method_in_use).
type umadService struct {
	cfg   umadConfig
	f     *os.File
	path  string
	agent uint32
	recv  chan ib.MAD
	done  chan struct{}

	wmu  sync.Mutex
	wbuf [umadMsgLen]byte

	lmu  sync.Mutex
	lids map[ib.GID]uint16 // InfiniBand: the LIDs received MADs came from

	sent, received, sendErrors                            atomic.Uint64
	dropNoGRH, dropPKey, dropStatus, dropShort, dropQueue atomic.Uint64
	closeOnce                                             sync.Once
}

var _ ib.MADService = (*umadService)(nil)

// CMModuleHolders reports whether the kernel's CM (ib_cm) is loaded, and
// which loaded modules use it (from sysfs): while it is, ib_umad cannot
// give the CM class to anyone else.
func CMModuleHolders() (loaded bool, holders []string) { return sysfs("/sys").cmHolders() }

func (s sysfs) cmHolders() (bool, []string) {
	dir := filepath.Join(string(s), "module", "ib_cm")
	if _, err := os.Stat(dir); err != nil {
		return false, nil
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "holders"))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return true, out
}

// CMLoadedError is the one line an operator gets when ib_cm keeps QP1's CM
// class: what holds it and what to do.
func CMLoadedError(holders []string) error {
	held := ""
	if len(holders) > 0 {
		held = " (used by " + strings.Join(holders, ", ") + ")"
	}
	return fmt.Errorf("--cm own cannot run: the kernel's CM module ib_cm is loaded%s and owns the CM class on QP1; unload it (modprobe -r rdma_ucm rdma_cm ib_cm, and whatever holds them: ib_ipoib, ib_iser, ib_srp, nvme_rdma, rpcrdma, ...) or use --cm kernel", held)
}

// umadPath finds /dev/infiniband/umadN of a device port through
// /sys/class/infiniband_mad/umadN/{ibdev,port}.
func (s sysfs) umadPath(devDir, device string, port int) (string, error) {
	dir := filepath.Join(string(s), "class", "infiniband_mad")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("verbs: no user MAD devices (%v): is the ib_umad module loaded?", err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "umad") {
			continue
		}
		dev, err1 := os.ReadFile(filepath.Join(dir, e.Name(), "ibdev"))
		p, err2 := os.ReadFile(filepath.Join(dir, e.Name(), "port"))
		if err1 != nil || err2 != nil {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(string(p))); err == nil && n == port && strings.TrimSpace(string(dev)) == device {
			return filepath.Join(devDir, e.Name()), nil
		}
	}
	return "", fmt.Errorf("verbs: no user MAD device for %s port %d under %s: is the ib_umad module loaded?", device, port, dir)
}

func (s *umadService) ioctl(req uintptr, arg unsafe.Pointer) error {
	rc, err := s.f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// parse checks one read: a MAD the engine can answer, or a counted drop.
func (s *umadService) parse(b []byte) (ib.MAD, bool) {
	var m ib.MAD
	h, err := decodeUMADHdr(b)
	switch {
	case err != nil || len(b) < umadMsgLen:
		s.dropShort.Add(1)
		return m, false
	case h.Status != 0:
		s.dropStatus.Add(1) // a send's timeout report; we send with no timeout
		return m, false
	}
	from, ok := h.madFrom(s.cfg.pkeys)
	switch {
	case !ok && !h.GRH:
		s.dropNoGRH.Add(1)
		return m, false
	case !ok:
		s.dropPKey.Add(1)
		return m, false
	}
	if !s.cfg.ethernet && h.LID != 0 {
		s.lmu.Lock()
		if len(s.lids) < 65536 {
			s.lids[from.GID] = h.LID
		}
		s.lmu.Unlock()
	}
	s.received.Add(1)
	m.From = from
	copy(m.Data[:], b[umadHdrLen:umadMsgLen])
	return m, true
}

// Send writes one MAD to a peer's QP1. It always carries a GRH: on RoCE
// the kernel resolves the destination MAC from it; on InfiniBand the LID
// is the one the peer's MADs came from (a peer not heard from yet gets
// LID 0, which only a path query to the SA could fix).
func (s *umadService) Send(to ib.MADAddr, mad []byte) error {
	if len(mad) != 256 {
		return fmt.Errorf("verbs: umad: a MAD is 256 octets, not %d", len(mad))
	}
	idx := slices.Index(s.cfg.pkeys, to.PKey)
	if idx < 0 {
		idx = slices.IndexFunc(s.cfg.pkeys, func(p ib.PKey) bool { return p.Valid() && p.Partition() == to.PKey.Partition() })
	}
	if idx < 0 {
		s.sendErrors.Add(1)
		return fmt.Errorf("verbs: umad: P_Key %v is not in the port's table", to.PKey)
	}
	qpn := to.QPN
	if qpn == 0 {
		qpn = ib.QP1
	}
	h := umadHdr{
		Agent: s.agent, Length: umadMsgLen, QPN: qpn, QKey: ib.GSIQKey,
		GRH: true, GIDIndex: s.cfg.gidIndex, HopLimit: umadHopLimit, GID: to.GID, PKeyIndex: uint16(idx),
	}
	if !s.cfg.ethernet {
		s.lmu.Lock()
		h.LID = s.lids[to.GID]
		s.lmu.Unlock()
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	h.encode(s.wbuf[:])
	copy(s.wbuf[umadHdrLen:], mad)
	if _, err := s.f.Write(s.wbuf[:]); err != nil {
		s.sendErrors.Add(1)
		return fmt.Errorf("verbs: umad send to %v: %w", to.GID, err)
	}
	s.sent.Add(1)
	return nil
}

// Recv returns received MADs; it is closed when the service closes.
func (s *umadService) Recv() <-chan ib.MAD { return s.recv }

// Close unregisters the agent and closes the device (which ends readLoop).
func (s *umadService) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.done)
		id := s.agent
		_ = s.ioctl(umadUnregisterAgent, unsafe.Pointer(&id))
		err = s.f.Close()
	})
	return err
}

// String names the device, e.g. "/dev/infiniband/umad0 (rxe0 port 1)".
func (s *umadService) String() string {
	return fmt.Sprintf("%s (%s port %d)", s.path, s.cfg.device, s.cfg.port)
}

// Counters are the MAD service's own: MADs both ways and drops by cause.
func (s *umadService) Counters() []ib.Counter {
	return []ib.Counter{
		{Name: "umad_sent", Value: s.sent.Load()}, {Name: "umad_received", Value: s.received.Load()},
		{Name: "umad_send_errors", Value: s.sendErrors.Load()},
		{Name: "umad_rx_drop_no_grh", Value: s.dropNoGRH.Load()},
		{Name: "umad_rx_drop_bad_pkey_index", Value: s.dropPKey.Load()},
		{Name: "umad_rx_drop_status", Value: s.dropStatus.Load()},
		{Name: "umad_rx_drop_short", Value: s.dropShort.Load()},
		{Name: "umad_rx_drop_queue_full", Value: s.dropQueue.Load()},
	}
}
