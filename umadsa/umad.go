//go:build linux && rdma

package umadsa

/*
#cgo LDFLAGS: -libumad
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/umad.h>

static int sa_port(const char *ca, int port, unsigned *lid, unsigned *lmc, unsigned *smlid, unsigned *smsl,
		unsigned *state, unsigned char gid[16], uint16_t *pkeys, unsigned *npkeys) {
	umad_port_t p;
	int rc = umad_get_port(ca, port, &p);
	if (rc < 0)
		return rc;
	*lid = p.base_lid;
	*lmc = p.lmc;
	*smlid = p.sm_lid;
	*smsl = p.sm_sl;
	*state = p.state;
	memcpy(gid, &p.gid_prefix, 8);
	memcpy(gid + 8, &p.port_guid, 8);
	unsigned n = p.pkeys ? p.pkeys_size : 0;
	if (n > *npkeys)
		n = *npkeys;
	if (n > 0)
		memcpy(pkeys, p.pkeys, n * sizeof *pkeys);
	*npkeys = n;
	umad_release_port(&p);
	return 0;
}

// sa_set_grh addresses the MAD in umad by GID: a GRH to dgid from the
// port's GID at gid_index.
static void sa_set_grh(void *umad, const unsigned char *dgid, int gid_index) {
	ib_mad_addr_t a;
	memset(&a, 0, sizeof a);
	memcpy(a.gid, dgid, 16);
	a.hop_limit = 64;
	umad_set_grh(umad, &a);
	// umad_set_grh leaves the source GID's index out.
	((struct ib_user_mad *)umad)->addr.gid_index = gid_index;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/sa"
)

// maxPKeys bounds the P_Key table QueryPort reads; ports have 16 to 128
// entries, and ipoibd's P_Key indices stay below this.
const maxPKeys = 1024

// gsiQKey is QP1's well-known Q_Key; umad_set_addr takes it as an int.
var gsiQKey = uint32(ib.GSIQKey)

// UMAD is an SA agent on one port through libibumad: the calls ibsim's
// libumad2sim.so intercepts, and the kernel's ib_umad on a real port.
type UMAD struct {
	ca     string
	port   int
	portID C.int
	agent  C.int
	sl     C.int // the SM's SL, which MADs to the SA use
	smu    sync.Mutex
	sbuf   unsafe.Pointer // umad_size() + 256, C memory
	rbuf   unsafe.Pointer
	once   sync.Once
	// dgid, when set, addresses every MAD by GID (SetDestGID).
	dgid     *ib.GID
	gidIndex int
}

// SetDestGID makes the agent's MADs carry a GRH to dgid, from the port's
// GID at gidIndex: for an SA reached by GID rather than by the SM's LID
// (a RoCE port, where the rxe test bed stands a silent agent in for the
// SA). The LID given to Send is then what the address handle carries
// beside it.
func (u *UMAD) SetDestGID(dgid ib.GID, gidIndex int) {
	u.smu.Lock()
	defer u.smu.Unlock()
	u.dgid, u.gidIndex = &dgid, gidIndex
}

var initOnce sync.Once
var initErr error

func umadInit() error {
	initOnce.Do(func() {
		if rc := C.umad_init(); rc < 0 {
			initErr = fmt.Errorf("umad_init: %w", syscall.Errno(-rc))
		}
	})
	return initErr
}

// QueryPort reads a port's LIDs, SM, state, GID and P_Key table (ca ""
// and port 0: the first active port, as libibumad picks).
func QueryPort(ca string, port int) (PortInfo, error) {
	if err := umadInit(); err != nil {
		return PortInfo{}, err
	}
	var cca *C.char
	if ca != "" {
		cca = C.CString(ca)
		defer C.free(unsafe.Pointer(cca))
	}
	var lid, lmc, smlid, smsl, state C.unsigned
	var gid [16]C.uchar
	pkeys := (*C.uint16_t)(C.calloc(maxPKeys, 2))
	defer C.free(unsafe.Pointer(pkeys))
	npkeys := C.unsigned(maxPKeys)
	if rc := C.sa_port(cca, C.int(port), &lid, &lmc, &smlid, &smsl, &state, &gid[0], pkeys, &npkeys); rc < 0 {
		return PortInfo{}, fmt.Errorf("umad_get_port(%q, %d): %w", ca, port, syscall.Errno(-rc))
	}
	pi := PortInfo{CA: ca, Port: port, LID: uint16(lid), LMC: uint8(lmc), SMLID: uint16(smlid), SMSL: uint8(smsl),
		State: int(state), Active: state == 4}
	for i := range gid {
		pi.GID[i] = byte(gid[i])
	}
	pi.PKeys = pkeyTable(unsafe.Slice((*uint16)(unsafe.Pointer(pkeys)), int(npkeys)))
	if len(pi.PKeys) > 0 {
		pi.PKey0 = pi.PKeys[0]
	}
	return pi, nil
}

// openAgent opens the port's umad device (ca "" and port 0: the first, as
// libibumad picks) and registers one agent of class and version; what
// names the class in errors.
func openAgent(ca string, port int, class, version C.int, rmpp C.uint8_t, what string) (id, agent C.int, err error) {
	if err := umadInit(); err != nil {
		return 0, 0, err
	}
	var cca *C.char
	if ca != "" {
		cca = C.CString(ca)
		defer C.free(unsafe.Pointer(cca))
	}
	id = C.umad_open_port(cca, C.int(port))
	if id < 0 {
		return 0, 0, fmt.Errorf("umad_open_port(%q, %d): %w", ca, port, syscall.Errno(-id))
	}
	agent = C.umad_register(id, class, version, rmpp, nil)
	if agent < 0 {
		C.umad_close_port(id)
		return 0, 0, fmt.Errorf("umad_register (%s): %w", what, syscall.Errno(-agent))
	}
	return id, agent, nil
}

// Open opens the port's umad device and registers an agent of the SA
// class (version 2) for our requests' answers.
func Open(ca string, port int) (*UMAD, error) {
	// RMPP version 1: the MAD layer reassembles a GetTable's answer.
	id, agent, err := openAgent(ca, port, sa.MgmtClassSA, sa.ClassVersion, 1, "SA class")
	if err != nil {
		return nil, err
	}
	pi, err := QueryPort(ca, port)
	if err != nil {
		C.umad_close_port(id)
		return nil, err
	}
	sz := C.umad_size() + sa.MADLen
	u := &UMAD{ca: ca, port: port, portID: id, agent: agent, sl: C.int(pi.SMSL), sbuf: C.calloc(1, sz), rbuf: C.calloc(1, sz)}
	return u, nil
}

// Send implements Transport.
func (u *UMAD) Send(mad []byte, lid uint16, timeout time.Duration) error {
	if len(mad) != sa.MADLen {
		return fmt.Errorf("umad: a MAD is %d octets, not %d", sa.MADLen, len(mad))
	}
	u.smu.Lock()
	defer u.smu.Unlock()
	C.memset(u.sbuf, 0, C.umad_size())
	C.memcpy(C.umad_get_mad(u.sbuf), unsafe.Pointer(&mad[0]), sa.MADLen)
	C.umad_set_addr(u.sbuf, C.int(lid), 1, u.sl, C.int(int32(gsiQKey)))
	C.umad_set_pkey(u.sbuf, 0)
	if u.dgid != nil {
		C.sa_set_grh(u.sbuf, (*C.uchar)(unsafe.Pointer(&u.dgid[0])), C.int(u.gidIndex))
	}
	if rc, werr := C.umad_send(u.portID, u.agent, u.sbuf, sa.MADLen, C.int(timeout.Milliseconds()), 0); rc < 0 {
		// libibumad returns EIO for any failed write; the write's own
		// errno (EINVAL for a TID still pending) is left in errno.
		if e, ok := werr.(syscall.Errno); ok && e != 0 {
			return fmt.Errorf("umad_send: %w", e)
		}
		return fmt.Errorf("umad_send: %w", syscall.Errno(-rc))
	}
	return nil
}

// Recv implements Transport. It is called by one goroutine at a time (the
// client's lock).
func (u *UMAD) Recv(buf []byte, timeout time.Duration) (int, int, error) {
	n := C.int(sa.MADLen)
	ms := timeout.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	rc, cerr := C.umad_recv(u.portID, u.rbuf, &n, C.int(ms))
	if rc < 0 {
		if e := syscall.Errno(-rc); e == syscall.ETIMEDOUT || e == syscall.EAGAIN {
			return 0, 0, ErrRecvTimeout
		}
		// libibumad's EIO with poll's EINTR left in errno: a signal cut
		// the wait short (Go's runtime sends them) before anything came.
		if syscall.Errno(-rc) == syscall.EIO && cerr == syscall.EINTR {
			return 0, 0, ErrRecvTimeout
		}
		return 0, 0, fmt.Errorf("umad_recv: %w", syscall.Errno(-rc))
	}
	if n > sa.MADLen {
		n = sa.MADLen
	}
	// A MAD is 256 octets on the wire, but ibsim hands over only what
	// the SA filled (OpenSM sends a PathRecord answer as 120 octets):
	// the rest is zero.
	m := copy(buf, unsafe.Slice((*byte)(C.umad_get_mad(u.rbuf)), int(n)))
	if m < sa.MADLen && len(buf) >= sa.MADLen {
		clear(buf[m:sa.MADLen])
		m = sa.MADLen
	}
	return m, int(C.umad_status(u.rbuf)), nil
}

// Close unregisters the agent and closes the port.
func (u *UMAD) Close() error {
	u.once.Do(func() {
		C.umad_unregister(u.portID, u.agent)
		C.umad_close_port(u.portID)
		C.free(u.sbuf)
		C.free(u.rbuf)
	})
	return nil
}

// NewPortClient opens an SA client on a port: its GID from the port, the
// SM's LID read again for every request. Its Close closes the umad handle.
func NewPortClient(ca string, port int, timeout time.Duration, retries int) (*Client, error) {
	pi, err := QueryPort(ca, port)
	if err != nil {
		return nil, err
	}
	u, err := Open(ca, port)
	if err != nil {
		return nil, err
	}
	smlid := func() (uint16, error) {
		pi, err := QueryPort(ca, port)
		return pi.SMLID, err
	}
	return New(u, Config{PortGID: pi.GID, SMLID: smlid, Timeout: timeout, Retries: retries}), nil
}

// Exit ends the process through C's exit, so that atexit handlers run:
// ibsim's libumad2sim.so frees the simulated port's slot there, and a Go
// os.Exit would skip it. That handler can hang: it holds its device lock
// while it joins its receiver thread, which may just have read a MAD and
// be waiting for that lock. So after exitWait the process ends without
// the handlers (the slot is then left to the simulator to reclaim).
func Exit(code int) {
	time.AfterFunc(exitWait, func() { syscall.Exit(code) })
	C.exit(C.int(code))
}

// exitWait bounds C's exit.
const exitWait = 3 * time.Second

// OpenPortClient opens an SA client on a port with the default timeouts
// and retries, for the daemon.
func OpenPortClient(ca string, port int) (*Client, error) { return NewPortClient(ca, port, 0, 0) }
