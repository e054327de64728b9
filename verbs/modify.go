//go:build rdma

package verbs

/*
#include <string.h>
#include <infiniband/verbs.h>
#include "ibpath.h"

// The transitions of ib.QPModify, one helper each so that Go passes plain
// values and never a struct with unions. All return 0 or an errno value.

static int ipoibd_qp_init(struct ibv_qp *qp, uint16_t pkey_index, uint8_t port, uint32_t qkey) {
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = pkey_index;
	a.port_num = port;
	if (qp->qp_type == IBV_QPT_UD) {
		a.qkey = qkey;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = 0; // send/receive only: no remote access
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	return ibv_modify_qp(qp, &a, mask);
}

// ib is NULL for the GID-only address (RoCE); otherwise the InfiniBand
// path, and hop_limit is unused.
static int ipoibd_qp_rtr(struct ibv_qp *qp, const uint8_t *dgid, uint8_t sgid_index, uint8_t hop_limit,
		uint8_t port, uint32_t dest_qpn, uint32_t rq_psn, int path_mtu, uint8_t min_rnr_timer,
		const struct ipoibd_ib_path *ib) {
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	if (qp->qp_type != IBV_QPT_UD && ib != NULL) {
		ipoibd_ib_av(&a.ah_attr, dgid, sgid_index, port, ib);
	} else if (qp->qp_type != IBV_QPT_UD) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.sgid_index = sgid_index;
		a.ah_attr.grh.hop_limit = hop_limit;
		a.ah_attr.port_num = port;
	}
	if (qp->qp_type != IBV_QPT_UD) {
		a.dest_qp_num = dest_qpn;
		a.rq_psn = rq_psn;
		a.path_mtu = (enum ibv_mtu)path_mtu;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	}
	if (qp->qp_type == IBV_QPT_RC) {
		a.max_dest_rd_atomic = 0; // no RDMA reads or atomics
		a.min_rnr_timer = min_rnr_timer;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	return ibv_modify_qp(qp, &a, mask);
}

static int ipoibd_qp_rts(struct ibv_qp *qp, uint32_t sq_psn, uint8_t timeout, uint8_t retry_cnt, uint8_t rnr_retry) {
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	if (qp->qp_type == IBV_QPT_RC) {
		a.timeout = timeout;
		a.retry_cnt = retry_cnt;
		a.rnr_retry = rnr_retry;
		a.max_rd_atomic = 0;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return ibv_modify_qp(qp, &a, mask);
}

// Moves to a state that takes no attributes (ERR, RESET).
static int ipoibd_qp_to(struct ibv_qp *qp, int state) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = (enum ibv_qp_state)state;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
)

// Modify performs the transition m.State with the attributes
// ib.QPModify documents for it.
func (q *qp) Modify(m ib.QPModify) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ib.ErrClosed
	}
	from := q.queryStateLocked()
	var rc C.int
	switch m.State {
	case ib.StateInit:
		table := q.dev.pkeyTable()
		idx, ok := pkeyIndex(table, m.PKey)
		if !ok {
			return fmt.Errorf("verbs: QP %v to INIT: P_Key %v is not in %s port %d's table %v", q.num, m.PKey, q.dev.cfg.Device, q.dev.portNum, table)
		}
		if rc = C.ipoibd_qp_init(q.qp, C.uint16_t(idx), C.uint8_t(q.dev.portNum), C.uint32_t(m.QKey)); rc == 0 {
			q.pkey.Store(uint32(table[idx]))
		}
	case ib.StateRTR:
		if q.typ != ib.UD && !m.PathMTU.Valid() {
			return fmt.Errorf("verbs: QP %v to RTR: path MTU %v", q.num, m.PathMTU)
		}
		mtu := min(m.PathMTU, q.dev.port.ActiveMTU)
		gid := m.DestGID
		var path *C.struct_ipoibd_ib_path
		if p, ok := q.dev.ibPath(m.Path); ok {
			path = &p
		}
		rc = C.ipoibd_qp_rtr(q.qp, (*C.uint8_t)(unsafe.Pointer(&gid[0])), C.uint8_t(q.dev.gidIndex), C.uint8_t(q.dev.hopLimit(gid)),
			C.uint8_t(q.dev.portNum), C.uint32_t(m.DestQPN&ib.QPNMask), C.uint32_t(m.RecvPSN&0xffffff), C.int(mtu), C.uint8_t(m.MinRNRTmr&31), path)
	case ib.StateRTS:
		if from == ib.StateRTS {
			return nil // verbs cannot change the PSN or retry limits of a QP in RTS
		}
		rc = C.ipoibd_qp_rts(q.qp, C.uint32_t(m.SendPSN&0xffffff), C.uint8_t(m.Timeout&31), C.uint8_t(min(m.RetryCount, 7)), C.uint8_t(min(m.RNRRetry, 7)))
	case ib.StateError:
		rc = q.moveTo(C.IBV_QPS_ERR)
	case ib.StateReset:
		return q.resetLocked(from)
	default:
		return fmt.Errorf("verbs: QP %v: no transition to %v", q.num, m.State)
	}
	if rc != 0 {
		return fmt.Errorf("verbs: ibv_modify_qp QP %v %v→%v: %w", q.num, from, m.State, errnoValue(rc))
	}
	q.state = m.State
	return nil
}

// resetLocked moves the QP to RESET. The adapter discards outstanding work
// on that move without completing it, while ib promises flushes: so the
// QP goes through ERROR first (the adapter flushes what it can), the CQs
// are drained, and the old tables are retired (what is left completes as
// flushed) for fresh ones. q.mu is held.
func (q *qp) resetLocked(from ib.QPState) error {
	if from != ib.StateReset && from != ib.StateError {
		_ = q.moveTo(C.IBV_QPS_ERR)
	}
	q.sendCQ.drain()
	q.recvCQ.drain()
	if rc := q.moveTo(C.IBV_QPS_RESET); rc != 0 {
		return fmt.Errorf("verbs: ibv_modify_qp QP %v %v→%v: %w", q.num, from, ib.StateReset, errnoValue(rc))
	}
	q.state = ib.StateReset
	q.pkey.Store(0)

	q.sendMu.Lock()
	old := q.send
	fresh := newWRTable(len(old.entries), old.wrOwner)
	err := q.dev.reg.add(fresh)
	if err == nil {
		q.send = fresh
	}
	q.sendMu.Unlock()
	if err != nil {
		return err
	}
	q.sendCQ.retire(old)
	if q.rq != nil {
		q.rq.mu.Lock()
		old := q.rq.tab
		q.rq.mu.Unlock()
		fresh := newWRTable(len(old.entries), old.wrOwner)
		if err := q.dev.reg.add(fresh); err != nil {
			return err
		}
		q.recvCQ.retire(q.rq.swap(fresh))
	}
	return nil
}

// moveTo makes a transition that takes no attributes (ERROR, RESET) and
// returns 0 or the errno.
func (q *qp) moveTo(state C.int) C.int { return C.ipoibd_qp_to(q.qp, state) }

// pkeyIndex finds a P_Key in a port's table: the exact value, else the
// same partition (a full member asking for a partition where the port is
// a limited member, or the reverse, gets the port's entry).
func pkeyIndex(table []ib.PKey, p ib.PKey) (int, bool) {
	for i, k := range table {
		if k == p {
			return i, true
		}
	}
	for i, k := range table {
		if k.Valid() && k.Partition() == p.Partition() {
			return i, true
		}
	}
	return 0, false
}
