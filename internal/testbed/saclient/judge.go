//go:build linux && rdma

package main

/*
#cgo LDFLAGS: -libumad
#include <stdlib.h>
#include <string.h>
#include <infiniband/umad.h>

// silent_agent registers an agent that receives the SA class's Get and
// GetTable requests on the port (a server, as an SA is) and answers none.
static int silent_agent(int portid) {
	long mask[16 / sizeof(long)];
	memset(mask, 0, sizeof mask);
	// Methods 0x01 (Get) and 0x12 (GetTable): bit n of the 128-bit mask.
	mask[0x01 / (8 * sizeof(long))] |= 1L << (0x01 % (8 * sizeof(long)));
	mask[0x12 / (8 * sizeof(long))] |= 1L << (0x12 % (8 * sizeof(long)));
	return umad_register(portid, 3, 2, 0, mask);
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/sa"
	"github.com/ipoibd/ipoibd/umadsa"
)

// The judges of the SA client's retries on a real ib_umad (the rxe test
// bed, where RoCE has no SA): silent stands in for an SA that never
// answers, dupsend shows the kernel's refusal of a TID still pending, and
// -dgid points the client at the silent agent by GID.

// silent receives SA requests on ca's port for d and prints each one's
// TID (its low 32 bits, which the client chose) as a JSON line, then the
// count.
func silent(ca string, port int, d time.Duration) error {
	cca := C.CString(ca)
	defer C.free(unsafe.Pointer(cca))
	if rc := C.umad_init(); rc < 0 {
		return fmt.Errorf("umad_init: %w", syscall.Errno(-rc))
	}
	id := C.umad_open_port(cca, C.int(port))
	if id < 0 {
		return fmt.Errorf("umad_open_port(%q, %d): %w", ca, port, syscall.Errno(-id))
	}
	defer C.umad_close_port(id)
	agent := C.silent_agent(id)
	if agent < 0 {
		return fmt.Errorf("umad_register (SA class, Get and GetTable): %w", syscall.Errno(-agent))
	}
	defer C.umad_unregister(id, agent)
	if err := emit(map[string]any{"listening": ca}); err != nil {
		return err
	}
	buf := C.calloc(1, C.umad_size()+sa.MADLen)
	defer C.free(buf)
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		size := C.int(sa.MADLen)
		if rc := C.umad_recv(id, buf, &size, 100); rc < 0 {
			continue // timed out, or a signal: look again until d is over
		}
		mad := unsafe.Slice((*byte)(C.umad_get_mad(buf)), sa.MADLen)
		n++
		if err := emit(map[string]any{"tid": binary.BigEndian.Uint32(mad[12:16]), "method": mad[3]}); err != nil {
			return err
		}
	}
	return emit(map[string]any{"received": n})
}

// byGID is the umad transport of an SA client addressed to dgid.
func byGID(ca string, port int, dgid ib.GID, gidIndex int) (*umadsa.UMAD, umadsa.PortInfo, error) {
	pi, err := umadsa.QueryPort(ca, port)
	if err != nil {
		return nil, pi, err
	}
	u, err := umadsa.Open(ca, port)
	if err != nil {
		return nil, pi, err
	}
	u.SetDestGID(dgid, gidIndex)
	return u, pi, nil
}

// dupsend writes one PathRecord request twice with the same TID, each
// waiting timeout for an answer in the kernel: what the SA client's
// retries did before each try had a TID of its own. It prints the second
// write's error (ib_umad refuses a TID still pending: EINVAL).
func dupsend(u *umadsa.UMAD, pi umadsa.PortInfo, target ib.GID, timeout time.Duration) error {
	req := sa.PathRequest(pi.GID, target, 0xffff)
	req.TransactionID = 0x1d
	var mad [sa.MADLen]byte
	if err := req.MarshalMAD(mad[:]); err != nil {
		return err
	}
	if err := u.Send(mad[:], 1, timeout); err != nil {
		return fmt.Errorf("the first write failed: %w", err)
	}
	err := u.Send(mad[:], 1, timeout)
	return emit(map[string]any{"second_write": errText(err), "einval": errors.Is(err, syscall.EINVAL)})
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
