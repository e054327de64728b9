//go:build rdma

package verbs

/*
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define IPOIBD_POST_BATCH 32

// Staged work requests: Go fills these plain structs in C memory (verbs'
// work requests have unions cgo cannot write), C builds the chain.
struct ipoibd_send {
	uint64_t wr_id;
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
	struct ibv_ah *ah;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
};

struct ipoibd_recv {
	uint64_t wr_id;
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct ipoibd_posted {
	int err;     // errno of the post verb
	int posted;  // requests the adapter took
	int inlined; // of those, sends that went inline
};

// Posts n (at most IPOIBD_POST_BATCH) staged signalled sends as one chain,
// those of at most max_inline octets inline. The chain lives on this stack
// frame: verbs copies it into the send queue before returning.
static struct ipoibd_posted ipoibd_post_send(struct ibv_qp *qp, const struct ipoibd_send *d, int n, int ud, uint32_t max_inline) {
	struct ibv_send_wr wr[IPOIBD_POST_BATCH], *bad = NULL;
	struct ibv_sge sge[IPOIBD_POST_BATCH];
	struct ipoibd_posted r = {0, n, 0};
	int i;
	memset(wr, 0, n * sizeof wr[0]);
	for (i = 0; i < n; i++) {
		sge[i].addr = d[i].addr;
		sge[i].length = d[i].length;
		sge[i].lkey = d[i].lkey;
		wr[i].wr_id = d[i].wr_id;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = d[i].length ? 1 : 0;
		wr[i].opcode = IBV_WR_SEND;
		wr[i].send_flags = IBV_SEND_SIGNALED;
		if (d[i].length && d[i].length <= max_inline) {
			wr[i].send_flags |= IBV_SEND_INLINE;
			r.inlined++;
		}
		if (ud) {
			wr[i].wr.ud.ah = d[i].ah;
			wr[i].wr.ud.remote_qpn = d[i].remote_qpn;
			wr[i].wr.ud.remote_qkey = d[i].remote_qkey;
		}
	}
	r.err = ibv_post_send(qp, wr, &bad);
	if (r.err) {
		r.posted = bad ? (int)(bad - wr) : 0;
		r.inlined = 0; // which went is not known: count none
	}
	return r;
}

// Posts n staged receives on a QP's own queue, or on srq when it is set.
static struct ipoibd_posted ipoibd_post_recv(struct ibv_qp *qp, struct ibv_srq *srq, const struct ipoibd_recv *d, int n) {
	struct ibv_recv_wr wr[IPOIBD_POST_BATCH], *bad = NULL;
	struct ibv_sge sge[IPOIBD_POST_BATCH];
	struct ipoibd_posted r = {0, n, 0};
	int i;
	for (i = 0; i < n; i++) {
		sge[i].addr = d[i].addr;
		sge[i].length = d[i].length;
		sge[i].lkey = d[i].lkey;
		wr[i].wr_id = d[i].wr_id;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
	}
	r.err = srq ? ibv_post_srq_recv(srq, wr, &bad) : ibv_post_recv(qp, wr, &bad);
	if (r.err)
		r.posted = bad ? (int)(bad - wr) : 0;
	return r;
}
*/
import "C"

import (
	"sync"
	"syscall"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
)

// postBatch is how many work requests go to the adapter in one call.
const postBatch = C.IPOIBD_POST_BATCH

type sendStage [postBatch]C.struct_ipoibd_send
type recvStage [postBatch]C.struct_ipoibd_recv

func newSendStage() (*sendStage, error) {
	p := C.calloc(1, C.sizeof_struct_ipoibd_send*postBatch)
	if p == nil {
		return nil, verbError("calloc", syscall.ENOMEM)
	}
	return (*sendStage)(p), nil
}

func newRecvStage() (*recvStage, error) {
	p := C.calloc(1, C.sizeof_struct_ipoibd_recv*postBatch)
	if p == nil {
		return nil, verbError("calloc", syscall.ENOMEM)
	}
	return (*recvStage)(p), nil
}

// sgeAddr checks that an SGE lies in a region of dev and returns its
// memory with the address and key the adapter needs.
func sgeAddr(dev *Device, s ib.SGE) (buf []byte, addr uintptr, lkey uint32, err error) {
	m, ok := s.MR.(*mr)
	if !ok || m.dev != dev {
		return nil, 0, 0, errForeignMR
	}
	if buf, err = s.Bytes(); err != nil {
		return nil, 0, 0, err
	}
	return buf, m.addr + uintptr(s.Offset), m.lkey, nil
}

// PostSend queues signalled sends, postBatch per verbs call.
func (q *qp) PostSend(wrs []ib.SendWR) (int, error) {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	if q.sendClosed {
		return 0, ib.ErrClosed
	}
	done := 0
	for done < len(wrs) {
		n, err := q.postSends(wrs[done:min(len(wrs), done+postBatch)])
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// postSends stages and posts up to postBatch sends; q.sendMu is held. It
// stops at the first request it cannot stage and reports why after posting
// the ones before it.
func (q *qp) postSends(wrs []ib.SendWR) (int, error) {
	t, st, ud := q.send, q.stage, q.typ == ib.UD
	var stageErr error
	n := 0
	t.mu.Lock()
	for i := range wrs {
		w := &wrs[i]
		_, addr, lkey, err := sgeAddr(q.dev, w.SGE)
		if err != nil {
			stageErr = err
			break
		}
		d := &st[n]
		if ud {
			a, ok := w.AH.(*ah)
			if !ok || a.dev != q.dev {
				stageErr = errForeignAH
				break
			}
			d.ah, d.remote_qpn, d.remote_qkey = a.ah, C.uint32_t(w.RemoteQPN&ib.QPNMask), C.uint32_t(w.RemoteQKey)
		}
		wrid, ok := t.allocLocked(w.ID, nil)
		if !ok {
			stageErr = ib.ErrQueueFull
			break
		}
		d.wr_id, d.addr, d.length, d.lkey = C.uint64_t(wrid), C.uint64_t(addr), C.uint32_t(w.SGE.Length), C.uint32_t(lkey)
		n++
	}
	t.mu.Unlock()
	if n == 0 {
		return 0, stageErr
	}
	udFlag := C.int(0)
	if ud {
		udFlag = 1
	}
	r := C.ipoibd_post_send(q.qp, &st[0], C.int(n), udFlag, C.uint32_t(q.maxInline))
	posted := int(r.posted)
	q.sendStats.posted.Add(uint64(posted))
	if r.inlined > 0 {
		q.dev.ctr.sendsInline.Add(uint64(r.inlined))
	}
	if r.err != 0 {
		t.mu.Lock()
		for i := posted; i < n; i++ {
			t.releaseLocked(uint64(st[i].wr_id))
		}
		t.mu.Unlock()
		return posted, postError("ibv_post_send", r.err)
	}
	return n, stageErr
}

// postError reports a refused post; ENOMEM from a post verb means the queue
// is full.
func postError(verb string, errno C.int) error {
	if errnoValue(errno) == syscall.ENOMEM {
		return ib.ErrQueueFull
	}
	return verbError(verb, errnoValue(errno))
}

// recvQueue posts receives on a QP's own receive queue or on an SRQ.
type recvQueue struct {
	dev   *Device
	qp    *C.struct_ibv_qp  // the QP, or nil for an SRQ
	srq   *C.struct_ibv_srq // the SRQ, or nil for a QP's own queue
	verb  string
	stats *queueStats

	mu     sync.Mutex // serialises posting: stage, tab
	tab    *wrTable
	stage  *recvStage
	closed bool
}

func newRecvQueue(dev *Device, qp *C.struct_ibv_qp, srq *C.struct_ibv_srq, tab *wrTable) (*recvQueue, error) {
	st, err := newRecvStage()
	if err != nil {
		return nil, err
	}
	verb := "ibv_post_recv"
	if srq != nil {
		verb = "ibv_post_srq_recv"
	}
	return &recvQueue{dev: dev, qp: qp, srq: srq, verb: verb, stats: tab.stats, tab: tab, stage: st}, nil
}

// post queues receive buffers, postBatch per verbs call.
func (r *recvQueue) post(wrs []ib.RecvWR) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, ib.ErrClosed
	}
	done := 0
	for done < len(wrs) {
		n, err := r.postBatch(wrs[done:min(len(wrs), done+postBatch)])
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

func (r *recvQueue) postBatch(wrs []ib.RecvWR) (int, error) {
	t, st := r.tab, r.stage
	var stageErr error
	n := 0
	t.mu.Lock()
	for i := range wrs {
		w := &wrs[i]
		buf, addr, lkey, err := sgeAddr(r.dev, w.SGE)
		if err != nil {
			stageErr = err
			break
		}
		wrid, ok := t.allocLocked(w.ID, buf)
		if !ok {
			stageErr = ib.ErrQueueFull
			break
		}
		d := &st[n]
		d.wr_id, d.addr, d.length, d.lkey = C.uint64_t(wrid), C.uint64_t(addr), C.uint32_t(w.SGE.Length), C.uint32_t(lkey)
		n++
	}
	t.mu.Unlock()
	if n == 0 {
		return 0, stageErr
	}
	res := C.ipoibd_post_recv(r.qp, r.srq, &st[0], C.int(n))
	posted := int(res.posted)
	r.stats.posted.Add(uint64(posted))
	if res.err != 0 {
		t.mu.Lock()
		for i := posted; i < n; i++ {
			t.releaseLocked(uint64(st[i].wr_id))
		}
		t.mu.Unlock()
		return posted, postError(r.verb, res.err)
	}
	return n, stageErr
}

// swap installs a fresh table (QP reset) and returns the old one.
func (r *recvQueue) swap(t *wrTable) *wrTable {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.tab
	r.tab = t
	return old
}

// outstanding returns how many receives are posted and not completed.
func (r *recvQueue) outstanding() int {
	r.mu.Lock()
	t := r.tab
	r.mu.Unlock()
	return t.outstanding()
}

// close stops posting and frees the staging memory; it returns the table
// for the caller to retire.
func (r *recvQueue) close() *wrTable {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		C.free(unsafe.Pointer(r.stage))
		r.stage = nil
	}
	return r.tab
}
