//go:build linux && rdma

package umadsa

/*
#cgo LDFLAGS: -libumad
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/umad.h>

// One directed-route SubnGet of attr to the port's own SMA (hop count 0,
// to and from the permissive LID, as smpquery without a path asks), its
// 64 octets of data into out. 0, or a negative errno.
static int smp_self_get(int portid, int agent, void *umad, uint16_t attr, uint32_t mod, uint64_t tid,
		int timeout_ms, uint8_t out[64]) {
	memset(umad, 0, umad_size() + 256);
	umad_set_addr(umad, 0xffff, 0, 0, 0);
	uint8_t *m = umad_get_mad(umad);
	m[0] = 1;    // base version
	m[1] = 0x81; // directed-route SM class
	m[2] = 1;    // class version
	m[3] = 0x01; // Get
	// status 0, D bit clear (outbound), hop pointer 0, hop count 0
	uint64_t ntid = ((uint64_t)htonl((uint32_t)tid) << 32) | htonl((uint32_t)(tid >> 32));
	memcpy(m + 8, &ntid, 8);
	uint16_t nattr = htons(attr);
	memcpy(m + 16, &nattr, 2);
	uint32_t nmod = htonl(mod);
	memcpy(m + 20, &nmod, 4);
	m[32] = m[33] = m[34] = m[35] = 0xff; // DrSLID, DrDLID permissive
	if (umad_send(portid, agent, umad, 256, timeout_ms, 0) < 0)
		return -EIO;
	for (int tries = 0; tries < 8; tries++) {
		int len = 256;
		int rc = umad_recv(portid, umad, &len, timeout_ms);
		// libibumad's EIO with poll's EINTR left in errno: a signal
		// interrupted the wait (Go's runtime sends them), not an error.
		if (rc == -EIO && errno == EINTR)
			continue;
		if (rc < 0)
			return rc == -ETIMEDOUT || rc == -EWOULDBLOCK ? -ETIMEDOUT : rc;
		if (umad_status(umad))
			return -ETIMEDOUT;
		m = umad_get_mad(umad);
		// The low half of the TID: the kernel's MAD layer puts its
		// agent's number in the high half.
		if (memcmp(m + 12, (uint8_t *)&ntid + 4, 4) != 0 || (m[3] & 0x80) == 0)
			continue; // a stale answer
		if ((m[4] & 0x7f) != 0 || m[5] != 0)
			return -EPROTO; // the SMA refused (status other than the D bit)
		memcpy(out, m + 64, 64);
		return 0;
	}
	return -EPROTO;
}
*/
import "C"

import (
	"fmt"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// SMAPort reads a port's PortInfo and P_Key table from the port's own SMA
// by directed-route SMP, on a umad handle of its own. It is what to poll
// for subnet changes where umad_get_port cannot see them: ibsim's
// libumad2sim.so fills its sysfs once, when the process starts, and
// delivers no async events, so only an SMP sees what a restarted SM
// assigned since.
type SMAPort struct {
	mu     sync.Mutex
	portID C.int
	agent  C.int
	buf    unsafe.Pointer
	tid    uint64
}

// smpTimeout bounds one SMP's answer.
const smpTimeout = time.Second

// OpenSMAPort opens the port (ca "" and port 0: the first, as libibumad
// picks) for SMPs to its own SMA.
func OpenSMAPort(ca string, port int) (*SMAPort, error) {
	id, agent, err := openAgent(ca, port, 0x81, 1, 0, "directed-route SM class")
	if err != nil {
		return nil, err
	}
	return &SMAPort{portID: id, agent: agent, buf: C.calloc(1, C.umad_size()+256), tid: uint64(time.Now().UnixNano()) << 16}, nil
}

// Query reads the port's LID, LMC, SM LID and SL, state, GID prefix and
// the first 32 entries of its P_Key table as the SMA holds them now.
func (s *SMAPort) Query() (PortInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buf == nil {
		return PortInfo{}, syscall.EBADF
	}
	var pi, pk [smpDataLen]C.uint8_t
	for _, q := range []struct {
		attr uint16
		out  *[smpDataLen]C.uint8_t
	}{{attrPortInfo, &pi}, {attrPKeyTable, &pk}} {
		s.tid++
		if rc := C.smp_self_get(s.portID, s.agent, s.buf, C.uint16_t(q.attr), 0, C.uint64_t(s.tid), C.int(smpTimeout.Milliseconds()), &q.out[0]); rc < 0 {
			return PortInfo{}, fmt.Errorf("umadsa: SubnGet(%#04x) to the port's SMA: %w", q.attr, syscall.Errno(-rc))
		}
	}
	return parsePortInfo(C.GoBytes(unsafe.Pointer(&pi[0]), smpDataLen), C.GoBytes(unsafe.Pointer(&pk[0]), smpDataLen))
}

// Close releases the umad handle.
func (s *SMAPort) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buf != nil {
		C.umad_unregister(s.portID, s.agent)
		C.umad_close_port(s.portID)
		C.free(s.buf)
		s.buf = nil
	}
	return nil
}
