//go:build rdma

package verbs

/*
#include <errno.h>
#include <string.h>
#include <infiniband/verbs.h>

// One async event, reduced to what the provider dispatches on.
struct ipoibd_async {
	int err; // errno of ibv_get_async_event, 0 if there is an event
	int type;
	uint32_t qpn;
	struct ibv_srq *srq;
	int port;
};

// Takes one event off the context and acknowledges it at once, so that
// destroying its object never waits for us.
static struct ipoibd_async ipoibd_next_async(struct ibv_context *ctx) {
	struct ipoibd_async r;
	struct ibv_async_event ev;
	memset(&r, 0, sizeof r);
	if (ibv_get_async_event(ctx, &ev)) {
		r.err = errno ? errno : EIO;
		return r;
	}
	r.type = ev.event_type;
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		r.qpn = ev.element.qp->qp_num;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		r.srq = ev.element.srq;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		r.port = ev.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return r;
}
*/
import "C"

import (
	"log/slog"
	"syscall"

	"github.com/ipoibd/ipoibd/ib"
)

// drainAsync handles every pending async event (the fdWatcher calls it
// when the context's async fd is readable).
func (d *Device) drainAsync() (stop bool) {
	for {
		ev := C.ipoibd_next_async(d.ctx)
		if ev.err != 0 {
			errno := syscall.Errno(ev.err)
			if errno == syscall.EAGAIN {
				return false
			}
			slog.Error("verbs: reading async events failed; no more SRQ limit or QP error events", "device", d.cfg.Device, "err", errno)
			return true
		}
		d.handleAsync(ev)
	}
}

func (d *Device) handleAsync(ev C.struct_ipoibd_async) {
	t := int(ev._type)
	name := "unknown"
	if t >= 0 && t < numAsyncTypes {
		d.ctr.async[t].Add(1)
		name = asyncNames[t]
	} else {
		d.ctr.asyncUnknown.Add(1)
	}
	switch t {
	case C.IBV_EVENT_SRQ_LIMIT_REACHED:
		d.mu.Lock()
		s := d.srqs[ev.srq]
		d.mu.Unlock()
		if s != nil {
			s.signalLimit()
		}
	case C.IBV_EVENT_QP_FATAL, C.IBV_EVENT_QP_REQ_ERR, C.IBV_EVENT_QP_ACCESS_ERR, C.IBV_EVENT_PATH_MIG_ERR:
		d.mu.Lock()
		q := d.qpByNum[uint32(ev.qpn)]
		d.mu.Unlock()
		if q != nil {
			q.asyncErrors.Add(1)
		}
		slog.Warn("verbs: QP error event", "device", d.cfg.Device, "event", name, "qpn", ib.QPN(ev.qpn))
	case C.IBV_EVENT_QP_LAST_WQE_REACHED:
		d.mu.Lock()
		q := d.qpByNum[uint32(ev.qpn)]
		d.mu.Unlock()
		if q != nil {
			q.reachedLastWQE()
		}
	case C.IBV_EVENT_CQ_ERR, C.IBV_EVENT_DEVICE_FATAL, C.IBV_EVENT_SRQ_ERR, C.IBV_EVENT_WQ_FATAL:
		slog.Error("verbs: async error event", "device", d.cfg.Device, "event", name)
	case C.IBV_EVENT_PORT_ERR:
		if int(ev.port) == int(d.portNum) {
			slog.Warn("verbs: port went down", "device", d.cfg.Device, "port", d.portNum)
		}
	case C.IBV_EVENT_PORT_ACTIVE:
		if int(ev.port) == int(d.portNum) {
			slog.Info("verbs: port is active again", "device", d.cfg.Device, "port", d.portNum)
		}
	case C.IBV_EVENT_SM_CHANGE, C.IBV_EVENT_CLIENT_REREGISTER, C.IBV_EVENT_LID_CHANGE, C.IBV_EVENT_PKEY_CHANGE:
		if int(ev.port) == int(d.portNum) {
			// Nothing here is cached by LID (MADs and QPs take the
			// addresses the SA's answers give, asked again after this);
			// the P_Key table is, by index, so it is read again first,
			// and the port's LID, LMC and SM LID, which Port reports.
			// QPs past INIT keep the P_Key index they were given: verbs
			// cannot move a live QP to another index, so the interface
			// does what the kernel's ipoib heavy flush does when its
			// partition's index moved (ipoib.followPKey: connections torn
			// down, the UD QP through RESET to RTS again).
			if t != C.IBV_EVENT_PKEY_CHANGE {
				if a, changed, err := d.rereadAddr(); err != nil {
					slog.Error("verbs: reading the port's LID after a subnet event failed; keeping the old one", "device", d.cfg.Device, "port", d.portNum, "err", err)
				} else if changed {
					slog.Info("verbs: the port's LID, LMC or SM LID changed", "device", d.cfg.Device, "port", d.portNum,
						"lid", a.lid, "lmc", a.lmc, "sm_lid", a.smLID)
				}
			}
			if t == C.IBV_EVENT_PKEY_CHANGE {
				if err := d.rereadPKeys(); err != nil {
					slog.Error("verbs: reading the P_Key table after a P_Key change failed; keeping the old one", "device", d.cfg.Device, "port", d.portNum, "err", err)
				} else {
					slog.Info("verbs: P_Key table read again", "device", d.cfg.Device, "port", d.portNum, "pkeys", d.pkeyTable())
				}
			}
			d.subnetEvents.Add(1)
			slog.Info("verbs: subnet event: paths and joins are asked again", "device", d.cfg.Device, "port", d.portNum, "event", name)
		}
	}
}

// SubnetEvents counts the port's SM changes, client reregistrations, LID
// and P_Key changes (ib.SubnetEventer).
func (d *Device) SubnetEvents() uint64 { return d.subnetEvents.Load() }
