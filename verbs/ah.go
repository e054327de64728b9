//go:build rdma

package verbs

/*
#include <string.h>
#include <infiniband/verbs.h>
#include "ibpath.h"

// A global (GRH-routed) address handle: on RoCE the kernel resolves the
// destination MAC from the GID, multicast GIDs included.
static struct ibv_ah *ipoibd_create_ah(struct ibv_pd *pd, const uint8_t *dgid, uint8_t sgid_index, uint8_t hop_limit, uint8_t port) {
	struct ibv_ah_attr a;
	memset(&a, 0, sizeof a);
	a.is_global = 1;
	memcpy(a.grh.dgid.raw, dgid, 16);
	a.grh.sgid_index = sgid_index;
	a.grh.hop_limit = hop_limit;
	a.port_num = port;
	return ibv_create_ah(pd, &a);
}

// An InfiniBand address handle from a path (ipoibd_ib_path fills it).
static struct ibv_ah *ipoibd_create_ib_ah(struct ibv_pd *pd, const uint8_t *dgid, uint8_t sgid_index, uint8_t port, const struct ipoibd_ib_path *p) {
	struct ibv_ah_attr a;
	memset(&a, 0, sizeof a);
	ipoibd_ib_av(&a, dgid, sgid_index, port, p);
	return ibv_create_ah(pd, &a);
}
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
)

// ah is an address handle. It implements ib.AH.
type ah struct {
	dev  *Device
	ah   *C.struct_ibv_ah
	attr ib.AHAttr

	mu     sync.Mutex
	closed bool
}

// CreateAH makes an address handle for UD sends to attr.DestGID (a port
// GID or a multicast GID). On an InfiniBand port a path naming a LID
// addresses it by LID, SL and rate, with a GRH only if the path asks.
func (d *Device) CreateAH(attr ib.AHAttr) (ib.AH, error) {
	if d.closed.Load() {
		return nil, ib.ErrClosed
	}
	gid := wireGID(d.port.GID, attr.DestGID)
	var h *C.struct_ibv_ah
	var err error
	if p, ok := d.ibPath(attr.Path); ok {
		h, err = C.ipoibd_create_ib_ah(d.pd, (*C.uint8_t)(unsafe.Pointer(&gid[0])), C.uint8_t(d.gidIndex), C.uint8_t(d.portNum), &p)
	} else {
		h, err = C.ipoibd_create_ah(d.pd, (*C.uint8_t)(unsafe.Pointer(&gid[0])), C.uint8_t(d.gidIndex), C.uint8_t(d.hopLimit(gid)), C.uint8_t(d.portNum))
	}
	if h == nil {
		return nil, verbError(fmt.Sprintf("ibv_create_ah %v", gid), cgoErrno(err))
	}
	a := &ah{dev: d, ah: h, attr: attr}
	if !d.track(func() { d.ahs[a] = struct{}{} }) {
		C.ibv_destroy_ah(h)
		return nil, ib.ErrClosed
	}
	return a, nil
}

// hopLimit is the GRH hop limit (RoCE: the IP TTL) towards gid: 1 keeps
// InfiniBand traffic to a link-local destination on the subnet; RoCEv2 is
// routed IP, where 64 is the usual TTL.
func (d *Device) hopLimit(gid ib.GID) int {
	if !d.ethernet && (gid[0] == 0xfe && gid[1]&0xc0 == 0x80 || gid.IsMulticast() && gid[1]&0x0f == 2) {
		return 1
	}
	return 64
}

// ibPath is p for the C helpers when the port is InfiniBand and p names a
// LID; otherwise (RoCE, or the zero path) the GID-only address is used as
// before, so a RoCE port never sees the path.
func (d *Device) ibPath(p ib.Path) (C.struct_ipoibd_ib_path, bool) {
	if d.ethernet || !p.LIDRouted() {
		return C.struct_ipoibd_ib_path{}, false
	}
	grh := 0
	if p.GRH {
		grh = 1
	}
	return C.struct_ipoibd_ib_path{
		dlid: C.uint16_t(p.DLID), sl: C.uint8_t(p.SL & 0xf), static_rate: C.uint8_t(p.StaticRate & 0x3f),
		src_path_bits: C.uint8_t(p.SrcPathBits & 0x7f), grh: C.uint8_t(grh), hop_limit: C.uint8_t(p.HopLimit),
		traffic_class: C.uint8_t(p.TrafficClass), flow_label: C.uint32_t(p.FlowLabel & 0xfffff),
	}, true
}

func (a *ah) Attr() ib.AHAttr { return a.attr }

// Close destroys the address handle; sends using it must have completed.
func (a *ah) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	rc := C.ibv_destroy_ah(a.ah)
	a.dev.untrack(func() { delete(a.dev.ahs, a) })
	if rc != 0 {
		return verbError("ibv_destroy_ah", errnoValue(rc))
	}
	return nil
}
