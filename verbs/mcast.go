//go:build rdma

package verbs

/*
#include <infiniband/verbs.h>
*/
import "C"

import (
	"fmt"
	"log/slog"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ipoibd/ipoibd/ib"
)

// isMulticastGID reports whether g names a group: an IB/IPv6 multicast GID
// (ff00::/8) or, on RoCEv2 over IPv4, an IPv4-mapped multicast address.
func isMulticastGID(g ib.GID) bool {
	return g.IsMulticast() || g.IsIPv4Mapped() && g.Addr().IsMulticast()
}

// AttachMulticast makes a UD QP receive datagrams sent to mgid, whose
// MLID on InfiniBand comes from the SA's join (0 on RoCE). On RoCE
// the port's network interface also joins the IP group: an adapter that
// receives through the host's IP stack (soft-RoCE) gets no group traffic
// the stack is not a member of. rdma_cm makes the same join (IGMP) for
// its multicast on RoCE.
func (d *Device) AttachMulticast(iq ib.QP, mgid ib.GID, mlid uint16) error {
	q, err := d.udQP(iq, mgid)
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ib.ErrClosed
	}
	mgid = wireGID(d.port.GID, mgid)
	if a := q.groups[mgid]; a.refs > 0 {
		// Two IPoIB groups may hash to one IPv4 group: attach once.
		a.refs++
		q.groups[mgid] = a
		return nil
	}
	g := mgid
	if rc := C.ibv_attach_mcast(q.qp, (*C.union_ibv_gid)(unsafe.Pointer(&g)), C.uint16_t(mlid)); rc != 0 {
		return verbError(fmt.Sprintf("ibv_attach_mcast QP %v to %v", q.num, mgid), errnoValue(rc))
	}
	if d.ethernet {
		// Best effort: the attach is what the adapter needs; an interface
		// without IPv6 cannot join an IPv6 group and must not fail IPv4.
		if err := d.groups.join(mgid); err != nil {
			d.ctr.ipJoinErrors.Add(1)
			slog.Warn("verbs: joining the IP multicast group failed; soft-RoCE will not deliver the group's traffic", "device", d.cfg.Device, "mgid", mgid, "err", err)
		}
	}
	if q.groups == nil {
		q.groups = map[ib.GID]attachment{}
	}
	q.groups[mgid] = attachment{refs: 1, mlid: mlid}
	return nil
}

// DetachMulticast undoes AttachMulticast.
func (d *Device) DetachMulticast(iq ib.QP, mgid ib.GID) error {
	q, err := d.udQP(iq, mgid)
	if err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ib.ErrClosed
	}
	mgid = wireGID(d.port.GID, mgid)
	a := q.groups[mgid]
	switch a.refs {
	case 0:
		return fmt.Errorf("verbs: QP %v is not attached to %v", q.num, mgid)
	case 1:
		return q.detachLocked(mgid)
	}
	a.refs--
	q.groups[mgid] = a
	return nil
}

// attachment is a UD QP's membership in one group: how many attaches
// share it, and the MLID detaching must name.
type attachment struct {
	refs int
	mlid uint16
}

// detachLocked leaves one group for good; q.mu is held.
func (q *qp) detachLocked(mgid ib.GID) error {
	g := mgid
	if rc := C.ibv_detach_mcast(q.qp, (*C.union_ibv_gid)(unsafe.Pointer(&g)), C.uint16_t(q.groups[mgid].mlid)); rc != 0 {
		return verbError(fmt.Sprintf("ibv_detach_mcast QP %v from %v", q.num, mgid), errnoValue(rc))
	}
	delete(q.groups, mgid)
	if q.dev.ethernet {
		q.dev.groups.leave(mgid)
	}
	return nil
}

// detachAllLocked leaves every group before the QP is destroyed; q.mu is held.
func (q *qp) detachAllLocked() {
	for mgid := range q.groups {
		_ = q.detachLocked(mgid)
	}
}

func (d *Device) udQP(iq ib.QP, mgid ib.GID) (*qp, error) {
	q, ok := iq.(*qp)
	if !ok || q.dev != d {
		return nil, errForeignQP
	}
	if q.typ != ib.UD {
		return nil, fmt.Errorf("verbs: multicast needs a UD QP, not %v", q.typ)
	}
	if !isMulticastGID(mgid) {
		return nil, fmt.Errorf("verbs: %v is not a multicast GID", mgid)
	}
	return q, nil
}

// ipGroups holds the port interface's IP multicast memberships, one socket
// per group (a socket holds at most igmp_max_memberships, 20 by default),
// counted per attach.
type ipGroups struct {
	ifindex int // 0: unknown, no memberships are made

	mu   sync.Mutex
	refs map[ib.GID]*ipGroup
}

type ipGroup struct {
	fd   int
	refs int
}

func (g *ipGroups) join(mgid ib.GID) error {
	if g.ifindex == 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if m := g.refs[mgid]; m != nil {
		m.refs++
		return nil
	}
	fd, err := joinIPGroup(mgid, g.ifindex)
	if err != nil {
		return fmt.Errorf("verbs: joining IP group %v on interface %d: %w", mgid.Addr(), g.ifindex, err)
	}
	g.refs[mgid] = &ipGroup{fd: fd, refs: 1}
	return nil
}

func (g *ipGroups) leave(mgid ib.GID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.refs[mgid]
	if m == nil {
		return
	}
	if m.refs--; m.refs == 0 {
		unix.Close(m.fd) // the membership ends with the socket
		delete(g.refs, mgid)
	}
}

func (g *ipGroups) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, m := range g.refs {
		unix.Close(m.fd)
		delete(g.refs, k)
	}
}

// joinIPGroup opens a datagram socket that is a member of the group on the
// interface and returns it.
func joinIPGroup(mgid ib.GID, ifindex int) (int, error) {
	a := mgid.Addr()
	family := unix.AF_INET6
	if a.Is4() {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if a.Is4() {
		err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &unix.IPMreqn{Multiaddr: a.As4(), Ifindex: int32(ifindex)})
	} else {
		err = unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, &unix.IPv6Mreq{Multiaddr: a.As16(), Interface: uint32(ifindex)})
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
