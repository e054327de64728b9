//go:build rdma

package verbs

/*
#include <errno.h>
#include <stdlib.h>
#include <endian.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

// ibv_query_port is a macro; cgo needs a function.
static int ipoibd_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
	return ibv_query_port(c, port, a);
}

// The P_Key at index, in host order, or -errno.
static int ipoibd_query_pkey(struct ibv_context *c, uint8_t port, int index) {
	__be16 pkey;
	if (ibv_query_pkey(c, port, index, &pkey))
		return errno ? -errno : -EIO;
	return ntohs(pkey);
}

static uint64_t ipoibd_be64toh(uint64_t v) { return be64toh(v); }
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
)

// queryDevice reads the node GUID and the capacities requests are clamped to.
func (d *Device) queryDevice() error {
	var a C.struct_ibv_device_attr
	if rc := C.ibv_query_device(d.ctx, &a); rc != 0 {
		return verbError("ibv_query_device "+d.cfg.Device, errnoValue(rc))
	}
	d.port.GUID = uint64(C.ipoibd_be64toh(C.uint64_t(a.node_guid)))
	d.port.ACKDelay = uint8(a.local_ca_ack_delay)
	d.limits = limits{maxQPWR: int(a.max_qp_wr), maxCQE: int(a.max_cqe), maxSRQWR: int(a.max_srq_wr), ports: int(a.phys_port_cnt)}
	if d.cfg.Port > d.limits.ports {
		return fmt.Errorf("verbs: %s has %d port(s), not %d", d.cfg.Device, d.limits.ports, d.cfg.Port)
	}
	return nil
}

// queryPort fills the port attributes: the port must be active; the GID is
// the configured index or the one chooseGID picks.
func (d *Device) queryPort() error {
	var pa C.struct_ibv_port_attr
	if rc := C.ipoibd_query_port(d.ctx, C.uint8_t(d.portNum), &pa); rc != 0 {
		return verbError(fmt.Sprintf("ibv_query_port %s port %d", d.cfg.Device, d.portNum), errnoValue(rc))
	}
	if pa.state != C.IBV_PORT_ACTIVE {
		return fmt.Errorf("verbs: %s port %d is %s, not ACTIVE (is the link up? on InfiniBand, is a subnet manager running?)",
			d.cfg.Device, d.portNum, C.GoString(C.ibv_port_state_str(pa.state)))
	}
	d.ethernet = pa.link_layer == C.IBV_LINK_LAYER_ETHERNET
	d.port.LinkLayer = "InfiniBand"
	if d.ethernet {
		d.port.LinkLayer = "Ethernet"
	}
	d.setAddr(addrOf(&pa))
	d.port.ActiveMTU = ib.MTU(pa.active_mtu)
	if !d.port.ActiveMTU.Valid() {
		return fmt.Errorf("verbs: %s port %d reports active MTU code %d", d.cfg.Device, d.portNum, pa.active_mtu)
	}
	d.pkeyTableLen = int(pa.pkey_tbl_len)
	pkeys, err := d.queryPKeys(d.pkeyTableLen)
	if err != nil {
		return err
	}
	d.port.PKeys = pkeys
	d.pkeys.Store(&pkeys)
	gids, err := d.queryGIDs(int(pa.gid_tbl_len))
	if err != nil {
		return err
	}
	var g gidEntry
	if d.cfg.GIDIndex < 0 {
		if g, err = chooseGID(gids, d.ethernet); err != nil {
			return fmt.Errorf("verbs: %s port %d: %w", d.cfg.Device, d.portNum, err)
		}
	} else if g, err = pickGID(gids, d.cfg.GIDIndex); err != nil {
		return fmt.Errorf("verbs: %s port %d: %w", d.cfg.Device, d.portNum, err)
	}
	d.port.GID, d.gidIndex, d.ifindex = g.gid, uint8(g.index), g.ifindex
	return nil
}

// portAddr is where the port is on its subnet, as the SM set it: its
// base LID, LID mask count and the SM's LID (all 0 on RoCE).
type portAddr struct {
	lid, smLID uint16
	lmc        uint8
}

func addrOf(pa *C.struct_ibv_port_attr) portAddr {
	return portAddr{lid: uint16(pa.lid), smLID: uint16(pa.sm_lid), lmc: uint8(pa.lmc)}
}

// setAddr takes the port's address; it reports whether it changed.
func (d *Device) setAddr(a portAddr) bool {
	if d.ethernet {
		a = portAddr{} // RoCE ports report no LIDs that mean anything
	}
	old := d.addr.Swap(&a)
	return old == nil || *old != a
}

// rereadAddr reads the port's LID, LMC and SM LID again after a subnet
// event: a LID change may come with a new LMC (the SM assigns both with
// the LID), and Port must not report the ones read at open. A failed
// read keeps the old ones.
func (d *Device) rereadAddr() (portAddr, bool, error) {
	var pa C.struct_ibv_port_attr
	if rc := C.ipoibd_query_port(d.ctx, C.uint8_t(d.portNum), &pa); rc != 0 {
		return portAddr{}, false, verbError(fmt.Sprintf("ibv_query_port %s port %d", d.cfg.Device, d.portNum), errnoValue(rc))
	}
	a := addrOf(&pa)
	return a, d.setAddr(a), nil
}

// pkeyTable is the port's current P_Key table; callers must not change it.
func (d *Device) pkeyTable() []ib.PKey {
	if t := d.pkeys.Load(); t != nil {
		return *t
	}
	return d.port.PKeys
}

// rereadPKeys reads the P_Key table again after a P_Key change event: the
// SM may have added, removed or moved partitions, and every index resolved
// from now on (QPs going to INIT, MADs, completions) must be the table's
// new one. A failed read keeps the old table.
func (d *Device) rereadPKeys() error {
	pkeys, err := d.queryPKeys(d.pkeyTableLen)
	if err != nil {
		return err
	}
	d.pkeys.Store(&pkeys)
	return nil
}

// queryPKeys reads the P_Key table. Indices matter (completions and QP
// attributes name P_Keys by index), so invalid entries inside the table
// stay; trailing ones are dropped.
func (d *Device) queryPKeys(n int) ([]ib.PKey, error) {
	var pkeys []ib.PKey
	for i := range n {
		v := C.ipoibd_query_pkey(d.ctx, C.uint8_t(d.portNum), C.int(i))
		if v < 0 {
			return nil, verbError(fmt.Sprintf("ibv_query_pkey %s port %d index %d", d.cfg.Device, d.portNum, i), errnoValue(v))
		}
		pkeys = append(pkeys, ib.PKey(v))
	}
	for len(pkeys) > 0 && !pkeys[len(pkeys)-1].Valid() {
		pkeys = pkeys[:len(pkeys)-1]
	}
	if len(pkeys) == 0 {
		return nil, fmt.Errorf("verbs: %s port %d has no valid P_Key", d.cfg.Device, d.portNum)
	}
	return pkeys, nil
}

// queryGIDs reads the port's valid GID table entries with their types,
// through ibv_query_gid_table, or ibv_query_gid and sysfs where the kernel
// lacks it.
func (d *Device) queryGIDs(n int) ([]gidEntry, error) {
	max := n * d.limits.ports
	if max == 0 {
		return nil, nil
	}
	buf := (*C.struct_ibv_gid_entry)(C.calloc(C.size_t(max), C.sizeof_struct_ibv_gid_entry))
	if buf == nil {
		return nil, verbError("calloc", syscall.ENOMEM)
	}
	defer C.free(unsafe.Pointer(buf))
	got := C.ibv_query_gid_table(d.ctx, buf, C.size_t(max), 0)
	if got < 0 {
		errno := errnoValue(C.int(got))
		if errno == syscall.EOPNOTSUPP || errno == syscall.ENOSYS || errno == syscall.EPROTONOSUPPORT {
			return d.queryGIDsOneByOne(n)
		}
		return nil, verbError(fmt.Sprintf("ibv_query_gid_table %s", d.cfg.Device), errno)
	}
	var out []gidEntry
	for _, e := range unsafe.Slice(buf, int(got)) {
		if int(e.port_num) != int(d.portNum) {
			continue
		}
		g := gidEntry{index: int(e.gid_index), gid: ib.GID(e.gid), roceV2: e.gid_type == C.IBV_GID_TYPE_ROCE_V2, ifindex: int(e.ndev_ifindex)}
		if g.gid != (ib.GID{}) {
			out = append(out, g)
		}
	}
	return out, nil
}

func (d *Device) queryGIDsOneByOne(n int) ([]gidEntry, error) {
	var out []gidEntry
	for i := range n {
		var raw C.union_ibv_gid
		if rc, err := C.ibv_query_gid(d.ctx, C.uint8_t(d.portNum), C.int(i), &raw); rc != 0 {
			return nil, verbError(fmt.Sprintf("ibv_query_gid %s port %d index %d", d.cfg.Device, d.portNum, i), cgoErrno(err))
		}
		g := gidEntry{index: i, gid: ib.GID(raw)}
		if g.gid == (ib.GID{}) {
			continue
		}
		if d.ethernet {
			v2, err := hostSysfs.gidType(d.cfg.Device, int(d.portNum), i)
			if err != nil {
				return nil, fmt.Errorf("verbs: GID %d type: %w", i, err)
			}
			g.roceV2 = v2
			g.ifindex, _ = hostSysfs.netdevIndex(d.cfg.Device, int(d.portNum), i)
		}
		out = append(out, g)
	}
	return out, nil
}
