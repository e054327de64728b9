//go:build linux && rdma

package verbs

/*
#cgo LDFLAGS: -libumad
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/umad.h>

// Registers an agent for one method of a GSI class (QP1), no RMPP.
static int ipoibd_umad_register(int portid, int mclass, int version, int method) {
	long mask[16 / sizeof(long)];
	memset(mask, 0, sizeof mask);
	mask[method / (8 * sizeof(long))] |= 1L << (method % (8 * sizeof(long)));
	// umad_register reports every refusal as -EPERM; the ioctl's errno
	// tells a class taken by another agent (EINVAL) from the rest.
	errno = 0;
	int rc = umad_register(portid, mclass, version, 0, mask);
	if (rc < 0 && errno != 0)
		return -errno;
	return rc;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/madqueue"
)

// umadRecvPollMs bounds how long the receive loop waits in umad_recv
// before it looks whether the service closed: libibumad's calls are the
// ones ibsim's libumad2sim.so intercepts, so the loop cannot wait in Go's
// poller on the port's descriptor.
const umadRecvPollMs = 100

var umadInitOnce sync.Once

// umadOldHdrLen is struct ib_user_mad_hdr_old: the same fields up to the
// flow label, without the P_Key index (the MAD goes in partition index 0).
// libibumad uses it when the port could not enable P_Key indices (a
// kernel older than the index's ioctl).
const umadOldHdrLen = 56

// errNoPKeyIndex: a port without P_Key indices sends in index 0 only.
var errNoPKeyIndex = errors.New("the port's MAD interface has no P_Key indices: only the partition at index 0 is reachable")

// libUMAD is the port's CM agent through libibumad, the library every
// InfiniBand management tool uses: on hardware it drives ib_umad, under
// ibsim's libumad2sim.so the simulated fabric.
type libUMAD struct {
	portID C.int
	agent  C.int
	hdr    int            // umad_size(): umadHdrLen, or umadOldHdrLen without P_Key indices
	sbuf   unsafe.Pointer // hdr + 256 octets of C memory
	rbuf   unsafe.Pointer
	smu    sync.Mutex // sbuf
	stop   atomic.Bool
	ended  chan struct{} // the receive loop returned: rbuf is free
	once   sync.Once
}

// openUMAD opens the port through libibumad and registers an agent for the
// CM class's Send method on QP1.
func openUMAD(cfg umadConfig) (*umadService, error) {
	if len(cfg.pkeys()) == 0 {
		return nil, errors.New("verbs: umad: the port has no P_Key table")
	}
	umadInitOnce.Do(func() { C.umad_init() })
	var ca *C.char // nil: libibumad's first device
	if cfg.device != "" {
		ca = C.CString(cfg.device)
		defer C.free(unsafe.Pointer(ca))
	}
	id := C.umad_open_port(ca, C.int(cfg.port))
	if id < 0 {
		return nil, fmt.Errorf("verbs: umad_open_port(%s, %d): %w (is the ib_umad module loaded?)", cfg.device, cfg.port, syscall.Errno(-id))
	}
	// The header is the one with P_Key indices when the port enabled them
	// (ib_umad and libumad2sim.so do), the older one without where it
	// could not: libibumad says which once the port is open.
	hdr := int(C.umad_size())
	if hdr != umadHdrLen && hdr != umadOldHdrLen {
		C.umad_close_port(id)
		return nil, fmt.Errorf("verbs: libibumad's MAD header is %d octets, neither %d nor %d", hdr, umadHdrLen, umadOldHdrLen)
	}
	agent := C.ipoibd_umad_register(id, cmMgmtClass, cmClassVer, cmMethodSend)
	if agent < 0 {
		C.umad_close_port(id)
		err := syscall.Errno(-agent)
		if loaded, holders := CMModuleHolders(); loaded && err == syscall.EINVAL {
			return nil, CMLoadedError(holders)
		}
		if err == syscall.EINVAL {
			// The MAD layer refuses a second agent for a class and method
			// another process already receives.
			return nil, fmt.Errorf("verbs: the CM class on QP1 of %s port %d is already taken (umad_register: %w): is another ipoibd --cm own serving this port? One daemon serves a port; add P_Key children to it with ipoibd child add", cfg.device, cfg.port, err)
		}
		return nil, fmt.Errorf("verbs: registering a CM agent on %s port %d: %w", cfg.device, cfg.port, err)
	}
	sz := C.size_t(hdr + 256)
	u := &libUMAD{portID: id, agent: agent, hdr: hdr, sbuf: C.calloc(1, sz), rbuf: C.calloc(1, sz), ended: make(chan struct{})}
	s := &umadService{cfg: cfg, io: u, agent: uint32(agent), recv: make(chan ib.MAD, umadQueue), shares: madqueue.New(umadQueue)}
	go s.readLoop(u)
	return s, nil
}

// send hands one header and MAD to umad_send (no response timeout: the CM
// engine retransmits itself).
func (u *libUMAD) send(msg []byte) error {
	u.smu.Lock()
	defer u.smu.Unlock()
	buf := unsafe.Slice((*byte)(u.sbuf), u.hdr+256)
	if u.hdr == umadOldHdrLen && ne.Uint16(msg[umadOldHdrLen:]) != 0 {
		return errNoPKeyIndex
	}
	copy(buf, msg[:u.hdr])
	copy(buf[u.hdr:], msg[umadHdrLen:])
	if rc := C.umad_send(u.portID, u.agent, u.sbuf, C.int(len(msg)-umadHdrLen), 0, 0); rc < 0 {
		return fmt.Errorf("umad_send: %w", syscall.Errno(-rc))
	}
	return nil
}

// close stops the receive loop, then unregisters the agent and closes the
// port.
func (u *libUMAD) close() error {
	u.once.Do(func() {
		u.stop.Store(true)
		<-u.ended
		C.umad_unregister(u.portID, u.agent)
		C.umad_close_port(u.portID)
		C.free(u.sbuf)
		C.free(u.rbuf)
	})
	return nil
}

// readLoop hands received MADs to Recv until the service closes or the
// port goes away.
func (s *umadService) readLoop(u *libUMAD) {
	defer close(s.recv)
	defer close(u.ended)
	var msg [umadMsgLen]byte
	for !u.stop.Load() {
		n := C.int(256)
		rc, cerr := C.umad_recv(u.portID, u.rbuf, &n, umadRecvPollMs)
		if rc < 0 {
			err := syscall.Errno(-rc)
			if umadRecvAgain(err, cerr) {
				continue
			}
			// The device went away (module unloaded, port removed):
			// Recv's close tells the owner.
			slog.Error("verbs: umad_recv failed; no more CM MADs", "device", s.cfg.device, "port", s.cfg.port, "err", err, "errno", cerr)
			return
		}
		// ibsim hands over only the octets its sender filled; a MAD is
		// 256 on the wire, the rest zero.
		got := min(max(int(n), 0), 256)
		clear(msg[:])
		in := unsafe.Slice((*byte)(u.rbuf), u.hdr+got)
		copy(msg[:u.hdr], in) // without P_Key indices, index 0
		copy(msg[umadHdrLen:], in[u.hdr:])
		s.take(msg[:])
	}
}
