//go:build rdma

package verbs

/*
#include <infiniband/verbs.h>

// ibv_reg_mr is a macro; cgo needs a function. Send/receive only: the
// adapter writes received data (LOCAL_WRITE), no remote access.
static struct ibv_mr *ipoibd_reg_mr(struct ibv_pd *pd, void *addr, size_t len) {
	return ibv_reg_mr(pd, addr, len, IBV_ACCESS_LOCAL_WRITE);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
)

// mr is a registered slab. It implements ib.MR.
type mr struct {
	dev  *Device
	slab *ib.Slab
	addr uintptr // the slab's first octet, as the adapter sees it
	lkey uint32

	mu sync.Mutex
	mr *C.struct_ibv_mr // nil once closed
}

// RegisterMemory registers a slab with the adapter. Slabs are mmap'd
// outside the Go heap (ib.NewSlab), so C may keep their address.
func (d *Device) RegisterMemory(s *ib.Slab) (ib.MR, error) {
	if s == nil || len(s.Bytes()) == 0 {
		return nil, errors.New("verbs: register an empty slab")
	}
	if d.closed.Load() {
		return nil, ib.ErrClosed
	}
	mem := s.Bytes()
	p := unsafe.Pointer(unsafe.SliceData(mem))
	h, err := C.ipoibd_reg_mr(d.pd, p, C.size_t(len(mem)))
	if h == nil {
		return nil, verbError(fmt.Sprintf("ibv_reg_mr %d octets", len(mem)), cgoErrno(err))
	}
	m := &mr{dev: d, slab: s, addr: uintptr(p), lkey: uint32(h.lkey), mr: h}
	if !d.track(func() { d.mrs[m] = struct{}{} }) {
		C.ibv_dereg_mr(h)
		return nil, ib.ErrClosed
	}
	return m, nil
}

func (m *mr) Slab() *ib.Slab { return m.slab }
func (m *mr) LKey() uint32   { return m.lkey }

// Close deregisters the region; the caller keeps the slab.
func (m *mr) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mr == nil {
		return nil
	}
	rc := C.ibv_dereg_mr(m.mr)
	m.mr = nil
	m.dev.untrack(func() { delete(m.dev.mrs, m) })
	if rc != 0 {
		return verbError("ibv_dereg_mr", errnoValue(rc))
	}
	return nil
}
