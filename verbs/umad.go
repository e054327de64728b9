//go:build linux

package verbs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/madqueue"
)

// umadConfig is what the MAD service needs to know of its port.
type umadConfig struct {
	device   string // rdma device name
	port     int
	gidIndex uint8 // our GID, the source of every GRH
	// pkeys returns the port's P_Key table as it is now: the table can
	// change under an SM, and MADs name P_Keys by index.
	pkeys    func() []ib.PKey
	ethernet bool // RoCE: every MAD carries a GRH and no LID
}

// umadIO moves whole MADs (header and MAD) in and out of the port's user
// MAD agent: libibumad's umad_send and umad_recv on rdma-core (umadlib.go),
// a fake in tests.
type umadIO interface {
	// send writes one header and MAD.
	send(msg []byte) error
	// close unregisters the agent and releases the port; a receive loop
	// still running ends.
	close() error
}

// umadService is QP1's CM class through ib_umad: an ib.MADService on a
// port whose QP1 the kernel owns, so that the cm.Engine runs on rdma-core
// adapters as on softib. It needs the kernel's CM (ib_cm) not loaded: the
// MAD layer gives a class's methods to one agent only (method_in_use).
// Its MADs go by the address the engine gives, LID and SL on InfiniBand:
// nothing is learnt from received MADs, so nothing goes stale when the SM
// moves LIDs.
type umadService struct {
	cfg   umadConfig
	io    umadIO
	agent uint32
	recv  chan ib.MAD
	// shares gives each source a fair share of recv (package madqueue);
	// only the receive loop uses it.
	shares *madqueue.Shares

	wmu  sync.Mutex
	wbuf [umadMsgLen]byte

	sent, received, sendErrors, sendNoLID      atomic.Uint64
	dropPKey, dropStatus, dropShort, dropQueue atomic.Uint64
	dropShare                                  atomic.Uint64
	closeOnce                                  sync.Once
}

var _ ib.MADService = (*umadService)(nil)

// umadQueue bounds the received MADs waiting for the CM engine; beyond it,
// and beyond a source's share of it, they are dropped and counted.
const umadQueue = 256

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
	from, ok := h.madFrom(s.cfg.pkeys())
	if !ok {
		s.dropPKey.Add(1)
		return m, false
	}
	s.received.Add(1)
	m.From = from
	copy(m.Data[:], b[umadHdrLen:umadMsgLen])
	return m, true
}

// take hands one read to the engine: parsed, within its source's share
// of the queue (package madqueue), and queued, or counted as dropped.
func (s *umadService) take(b []byte) {
	m, ok := s.parse(b)
	if !ok {
		return
	}
	if !s.shares.Admit(m.From, len(s.recv)) {
		s.dropShare.Add(1)
		return
	}
	select {
	case s.recv <- m:
	default:
		s.dropQueue.Add(1) // the CM retransmits; a full queue is a burst
	}
}

// Send writes one MAD to a peer's QP1 at the address the engine gives:
// its LID, SL and our path bits on InfiniBand, a GRH only when asked
// (always on RoCE, where the GID is the only address).
func (s *umadService) Send(to ib.MADAddr, mad []byte) error {
	if len(mad) != 256 {
		return fmt.Errorf("verbs: umad: a MAD is 256 octets, not %d", len(mad))
	}
	h, err := sendHdr(to, s.agent, s.cfg.gidIndex, s.cfg.pkeys(), s.cfg.ethernet)
	if err != nil {
		s.sendErrors.Add(1)
		if errors.Is(err, errNoLID) {
			s.sendNoLID.Add(1)
		}
		return fmt.Errorf("verbs: umad send to %v: %w", to.GID, err)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	h.encode(s.wbuf[:])
	copy(s.wbuf[umadHdrLen:], mad)
	if err := s.io.send(s.wbuf[:]); err != nil {
		s.sendErrors.Add(1)
		return fmt.Errorf("verbs: umad send to LID %#x %v: %w", h.LID, to.GID, err)
	}
	s.sent.Add(1)
	return nil
}

// Recv returns received MADs; it is closed when the service closes.
func (s *umadService) Recv() <-chan ib.MAD { return s.recv }

// Close unregisters the agent and releases the port (which ends the
// receive loop).
func (s *umadService) Close() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.io.close()
	})
	return err
}

// String names the port, e.g. "libibumad rxe0 port 1".
func (s *umadService) String() string {
	return fmt.Sprintf("libibumad %s port %d", s.cfg.device, s.cfg.port)
}

// Counters are the MAD service's own: MADs both ways and drops by cause.
func (s *umadService) Counters() []ib.Counter {
	return []ib.Counter{
		{Name: "umad_sent", Value: s.sent.Load()}, {Name: "umad_received", Value: s.received.Load()},
		{Name: "umad_send_errors", Value: s.sendErrors.Load()},
		{Name: "umad_send_no_lid", Value: s.sendNoLID.Load()},
		{Name: "umad_rx_drop_bad_pkey_index", Value: s.dropPKey.Load()},
		{Name: "umad_rx_drop_status", Value: s.dropStatus.Load()},
		{Name: "umad_rx_drop_short", Value: s.dropShort.Load()},
		{Name: "umad_rx_drop_queue_full", Value: s.dropQueue.Load()},
		{Name: "umad_rx_drop_source_share", Value: s.dropShare.Load()},
	}
}

// umadRecvAgain tells a umad_recv failure worth another call from one
// that means the port is gone. libibumad turns a poll interrupted by a
// signal into EIO but leaves poll's EINTR in errno, and a Go program's
// threads take signals: the runtime's preemption, SIGCHLD, SIGHUP. An EIO
// from the read itself (errno EIO too) is ib_umad saying the file's agents
// are dead.
func umadRecvAgain(ret, errno error) bool {
	switch {
	case ret == syscall.ETIMEDOUT, ret == syscall.EAGAIN, ret == syscall.EINTR:
		return true
	case ret == syscall.EIO && errno == syscall.EINTR:
		return true
	}
	return false
}
