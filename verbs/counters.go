//go:build rdma

package verbs

/*
#include <infiniband/verbs.h>
*/
import "C"

import (
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
)

// hostSysfs is the running kernel's sysfs.
const hostSysfs sysfs = "/sys"

const numAsyncTypes = C.IBV_EVENT_WQ_FATAL + 1

// asyncNames are counter names for enum ibv_event_type.
var asyncNames = [numAsyncTypes]string{
	C.IBV_EVENT_CQ_ERR:              "cq_err",
	C.IBV_EVENT_QP_FATAL:            "qp_fatal",
	C.IBV_EVENT_QP_REQ_ERR:          "qp_req_err",
	C.IBV_EVENT_QP_ACCESS_ERR:       "qp_access_err",
	C.IBV_EVENT_COMM_EST:            "comm_est",
	C.IBV_EVENT_SQ_DRAINED:          "sq_drained",
	C.IBV_EVENT_PATH_MIG:            "path_mig",
	C.IBV_EVENT_PATH_MIG_ERR:        "path_mig_err",
	C.IBV_EVENT_DEVICE_FATAL:        "device_fatal",
	C.IBV_EVENT_PORT_ACTIVE:         "port_active",
	C.IBV_EVENT_PORT_ERR:            "port_err",
	C.IBV_EVENT_LID_CHANGE:          "lid_change",
	C.IBV_EVENT_PKEY_CHANGE:         "pkey_change",
	C.IBV_EVENT_SM_CHANGE:           "sm_change",
	C.IBV_EVENT_SRQ_ERR:             "srq_err",
	C.IBV_EVENT_SRQ_LIMIT_REACHED:   "srq_limit_reached",
	C.IBV_EVENT_QP_LAST_WQE_REACHED: "qp_last_wqe_reached",
	C.IBV_EVENT_CLIENT_REREGISTER:   "client_reregister",
	C.IBV_EVENT_GID_CHANGE:          "gid_change",
	C.IBV_EVENT_WQ_FATAL:            "wq_fatal",
}

// devCounters are what the provider itself sees; the adapter's own
// counters come from sysfs when asked.
type devCounters struct {
	async        [numAsyncTypes]atomic.Uint64
	asyncUnknown atomic.Uint64
	bad          atomic.Uint64 // completions with an error other than a flush
	flushed      atomic.Uint64 // flushed completions (QP moved to error or closed)
	stale        atomic.Uint64 // completions of a closed or reset QP, dropped
	pollErrors   atomic.Uint64 // ibv_poll_cq failed
	notifyErrors atomic.Uint64 // a CQ could not be re-armed or its events read
	cqEvents     atomic.Uint64 // completion events taken: each woke a goroutine
	sendsInline  atomic.Uint64 // sends posted inline (small ones)
	busyPollHits atomic.Uint64 // busy polls of a receive CQ that found completions
	armErrors    atomic.Uint64 // ibv_modify_srq refused an SRQ limit
	ipJoinErrors atomic.Uint64 // RoCE: the interface could not join an IP group
	// lastWQETimeouts counts QPs on an SRQ destroyed without their
	// IBV_EVENT_QP_LAST_WQE_REACHED, after lastWQETimeout (drain.go).
	lastWQETimeouts atomic.Uint64
}

// Counters returns the provider's counters and, where the kernel exposes
// them, the port's hw_counters (RoCE: sent_pkts, rcvd_pkts, ...) as hw_*.
func (d *Device) Counters() []ib.Counter {
	c := &d.ctr
	out := []ib.Counter{
		{Name: "completions_bad", Value: c.bad.Load()},
		{Name: "completions_flushed", Value: c.flushed.Load()},
		{Name: "completions_stale", Value: c.stale.Load()},
		{Name: "poll_errors", Value: c.pollErrors.Load()},
		{Name: "cq_notify_errors", Value: c.notifyErrors.Load()},
		{Name: "cq_events", Value: c.cqEvents.Load()},
		{Name: "sends_inline", Value: c.sendsInline.Load()},
		{Name: "busy_poll_hits", Value: c.busyPollHits.Load()},
		{Name: "srq_arm_errors", Value: c.armErrors.Load()},
		{Name: "ip_join_errors", Value: c.ipJoinErrors.Load()},
		{Name: "qp_last_wqe_timeouts", Value: c.lastWQETimeouts.Load()},
		{Name: "async_unknown", Value: c.asyncUnknown.Load()},
	}
	for t, name := range asyncNames {
		out = append(out, ib.Counter{Name: "async_" + name, Value: c.async[t].Load()})
	}
	return append(out, hostSysfs.hwCounters(d.cfg.Device, int(d.portNum))...)
}
