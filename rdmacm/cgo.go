//go:build rdma

package rdmacm

/*
#include <errno.h>
#include <endian.h>
#include <string.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <infiniband/ib.h>
#include <rdma/rdma_cma.h>

// Writes an address of family (AF_INET: the last four octets of addr16,
// AF_INET6, AF_IB: addr16 is the GID) into ss; returns its length, or 0.
static socklen_t ipoibd_sockaddr(struct sockaddr_storage *ss, int family, const uint8_t *addr16,
		uint16_t port, uint32_t scope, uint16_t pkey, uint64_t sid) {
	memset(ss, 0, sizeof *ss);
	switch (family) {
	case AF_INET: {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, addr16 + 12, 4);
		return sizeof *s;
	}
	case AF_INET6: {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, addr16, 16);
		s->sin6_scope_id = scope;
		return sizeof *s;
	}
	case AF_IB: {
		struct sockaddr_ib *s = (struct sockaddr_ib *)ss;
		s->sib_family = AF_IB;
		s->sib_pkey = htons(pkey);
		memcpy(&s->sib_addr, addr16, 16);
		s->sib_sid = htobe64(sid);
		s->sib_sid_mask = htobe64(~0ULL);
		return sizeof *s;
	}
	}
	return 0;
}

// The peer's address of an id as 16 octets (IPv4 as IPv4-mapped, AF_IB as
// the GID); returns the family, 0 if unknown.
static int ipoibd_peer_addr(struct rdma_cm_id *id, uint8_t *out16) {
	struct sockaddr *sa = rdma_get_peer_addr(id);
	memset(out16, 0, 16);
	switch (sa->sa_family) {
	case AF_INET:
		out16[10] = out16[11] = 0xff;
		memcpy(out16 + 12, &((struct sockaddr_in *)sa)->sin_addr, 4);
		return AF_INET;
	case AF_INET6:
		memcpy(out16, &((struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return AF_INET6;
	case AF_IB:
		memcpy(out16, &((struct sockaddr_ib *)sa)->sib_addr, 16);
		return AF_IB;
	}
	return 0;
}

// Makes an id of QP type qp_type (0: any, for a listener) bound to src, on
// channel ch. rdma_create_id cannot choose the QP type (in RDMA_PS_IB it
// makes RC ids); rdma_create_ep can, but makes a synchronous id with its
// own channel, which rdma_migrate_id then moves to ch. Returns 0 or an
// errno; *step is 1 if rdma_create_ep failed, 2 if rdma_migrate_id did.
static int ipoibd_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id,
		struct sockaddr_storage *src, socklen_t len, int qp_type, int *step) {
	struct rdma_addrinfo ai;
	int err;
	memset(&ai, 0, sizeof ai);
	ai.ai_flags = RAI_PASSIVE; // only bind: no blocking address or route resolution
	ai.ai_family = src->ss_family;
	ai.ai_qp_type = qp_type;
	ai.ai_port_space = RDMA_PS_IB;
	ai.ai_src_addr = (struct sockaddr *)src;
	ai.ai_src_len = len;
	*id = NULL;
	*step = 1;
	if (rdma_create_ep(id, &ai, NULL, NULL))
		return errno ? errno : EIO;
	*step = 2;
	if (rdma_migrate_id(*id, ch)) {
		err = errno ? errno : EIO;
		rdma_destroy_ep(*id);
		*id = NULL;
		return err;
	}
	return 0;
}

// One event, copied out and acknowledged at once, so that destroying its
// id never waits for us.
struct ipoibd_cm_event {
	int err; // errno of rdma_get_cm_event, 0 if there is an event
	int type;
	int status;
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	uint32_t qp_num;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint8_t private_data_len;
	uint8_t private_data[256]; // RDMA_MAX_PRIVATE_DATA
};

static void ipoibd_next_cm_event(struct rdma_event_channel *ch, struct ipoibd_cm_event *r) {
	struct rdma_cm_event *ev;
	memset(r, 0, offsetof(struct ipoibd_cm_event, private_data));
	if (rdma_get_cm_event(ch, &ev)) {
		r->err = errno ? errno : EIO;
		return;
	}
	r->type = ev->event;
	r->status = ev->status;
	r->id = ev->id;
	r->listen_id = ev->listen_id;
	// The service has no UD ids: param is always the connection one.
	r->qp_num = ev->param.conn.qp_num;
	r->retry_count = ev->param.conn.retry_count;
	r->rnr_retry_count = ev->param.conn.rnr_retry_count;
	r->srq = ev->param.conn.srq;
	if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
		r->private_data_len = ev->param.conn.private_data_len;
		memcpy(r->private_data, ev->param.conn.private_data, r->private_data_len);
	}
	rdma_ack_cm_event(ev);
}

// What rdma_init_qp_attr says for one state.
struct ipoibd_qp_attr {
	int err;
	int mask;
	uint32_t rq_psn, sq_psn, dest_qp_num;
	int path_mtu;
	uint8_t retry_cnt, rnr_retry, timeout;
	uint8_t dgid[16];
};

static void ipoibd_init_qp_attr(struct rdma_cm_id *id, int state, struct ipoibd_qp_attr *r) {
	struct ibv_qp_attr a;
	int mask = 0;
	memset(&a, 0, sizeof a);
	memset(r, 0, sizeof *r);
	a.qp_state = state;
	if (rdma_init_qp_attr(id, &a, &mask)) {
		r->err = errno ? errno : EIO;
		return;
	}
	r->mask = mask;
	r->rq_psn = a.rq_psn;
	r->sq_psn = a.sq_psn;
	r->dest_qp_num = a.dest_qp_num;
	r->path_mtu = a.path_mtu;
	r->retry_cnt = a.retry_cnt;
	r->rnr_retry = a.rnr_retry;
	r->timeout = a.timeout;
	memcpy(r->dgid, a.ah_attr.grh.dgid.raw, 16);
}

// rdma_connect and rdma_accept with a QP of our own on an SRQ; no RDMA
// reads or atomics (responder resources and initiator depth 0).
static int ipoibd_connect(struct rdma_cm_id *id, const void *pd, uint8_t len, uint32_t qpn,
		uint8_t retry, uint8_t rnr_retry, int accept) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.private_data = len ? pd : NULL;
	p.private_data_len = len;
	p.retry_count = retry;
	p.rnr_retry_count = rnr_retry;
	p.srq = 1;
	p.qp_num = qpn;
	if (accept ? rdma_accept(id, &p) : rdma_connect(id, &p))
		return errno ? errno : EIO;
	return 0;
}

// The rest return 0 or an errno.
static int ipoibd_errno(int rc) { return rc ? (errno ? errno : EIO) : 0; }

static int ipoibd_resolve_addr(struct rdma_cm_id *id, struct sockaddr_storage *src, struct sockaddr_storage *dst, int ms) {
	return ipoibd_errno(rdma_resolve_addr(id, (struct sockaddr *)src, (struct sockaddr *)dst, ms));
}
static int ipoibd_resolve_route(struct rdma_cm_id *id, int ms) { return ipoibd_errno(rdma_resolve_route(id, ms)); }
static int ipoibd_listen(struct rdma_cm_id *id, int backlog) { return ipoibd_errno(rdma_listen(id, backlog)); }
static int ipoibd_reject(struct rdma_cm_id *id, const void *pd, uint8_t len) {
	return ipoibd_errno(rdma_reject(id, len ? pd : NULL, len));
}
static int ipoibd_establish(struct rdma_cm_id *id) { return ipoibd_errno(rdma_establish(id)); }
static int ipoibd_disconnect(struct rdma_cm_id *id) { return ipoibd_errno(rdma_disconnect(id)); }
static int ipoibd_destroy_id(struct rdma_cm_id *id) { return ipoibd_errno(rdma_destroy_id(id)); }
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/ipoibd/ipoibd/ib"
)

// callError reports a failed librdmacm call with its errno.
func callError(call string, errno syscall.Errno) error {
	if errno == 0 {
		errno = syscall.EIO // the library failed without saying why
	}
	return fmt.Errorf("rdmacm: %s: %w", call, errno)
}

// cgoErrno extracts the errno of cgo's second return value.
func cgoErrno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// cmID is an rdma_cm id.
type cmID = *C.struct_rdma_cm_id

// sockaddr is an address for librdmacm.
type sockaddr struct {
	ss  C.struct_sockaddr_storage
	len C.socklen_t
}

// addrFor builds our (port 0: any) or a peer's address in mode m.
func addrFor(m addrMode, gid ib.GID, port uint16, scope int, pkey ib.PKey) *sockaddr {
	a := &sockaddr{}
	var sid uint64
	if m == modeIB {
		sid = sidOf(port)
	}
	a.len = C.ipoibd_sockaddr(&a.ss, C.int(m.family()), (*C.uint8_t)(unsafe.Pointer(&gid[0])),
		C.uint16_t(port), C.uint32_t(scope), C.uint16_t(pkey), C.uint64_t(sid))
	return a
}

// addrForSID is a peer's AF_IB address at service ID sid as it is.
func addrForSID(m addrMode, gid ib.GID, sid uint64, pkey ib.PKey) *sockaddr {
	a := &sockaddr{}
	a.len = C.ipoibd_sockaddr(&a.ss, C.int(m.family()), (*C.uint8_t)(unsafe.Pointer(&gid[0])),
		0, 0, C.uint16_t(pkey), C.uint64_t(sid))
	return a
}

// createID makes an id of QP type qpType (0: any) bound to src on ch.
func createID(ch *C.struct_rdma_event_channel, src *sockaddr, qpType int) (cmID, error) {
	var id cmID
	var step C.int
	if e := C.ipoibd_create_id(ch, &id, &src.ss, src.len, C.int(qpType), &step); e != 0 {
		call := "rdma_create_ep"
		if step == 2 {
			call = "rdma_migrate_id"
		}
		return nil, callError(call, syscall.Errno(e))
	}
	return id, nil
}

// peerGID returns the GID of an id's peer address.
func peerGID(id cmID) (ib.GID, bool) {
	var g ib.GID
	fam := C.ipoibd_peer_addr(id, (*C.uint8_t)(unsafe.Pointer(&g[0])))
	return g, fam != 0
}

// qpAttr is what rdma_init_qp_attr says for one QP state.
type qpAttr = C.struct_ipoibd_qp_attr

func initQPAttr(id cmID, state C.int) (qpAttr, error) {
	var a qpAttr
	C.ipoibd_init_qp_attr(id, state, &a)
	if a.err != 0 {
		return a, callError("rdma_init_qp_attr", syscall.Errno(a.err))
	}
	return a, nil
}

// bytesPtr passes a byte slice to C (nil when empty).
func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func cmCall(call string, e C.int) error {
	if e == 0 {
		return nil
	}
	return callError(call, syscall.Errno(e))
}

// Go wrappers of the helpers above, for the other files (a cgo preamble is
// private to its file). Each returns a Go error naming the call.

// cmEventBuf receives one event.
type cmEventBuf = C.struct_ipoibd_cm_event

func nextEvent(ch *C.struct_rdma_event_channel, buf *cmEventBuf) { C.ipoibd_next_cm_event(ch, buf) }

// eventData returns the private data an event buffer holds.
func eventData(buf *cmEventBuf) []byte {
	return C.GoBytes(unsafe.Pointer(&buf.private_data[0]), C.int(buf.private_data_len))
}

func resolveAddr(id cmID, src, dst *sockaddr) error {
	return cmCall("rdma_resolve_addr", C.ipoibd_resolve_addr(id, &src.ss, &dst.ss, resolveMs))
}

func resolveRoute(id cmID) error {
	return cmCall("rdma_resolve_route", C.ipoibd_resolve_route(id, resolveMs))
}

func listenOn(id cmID, backlog int) error {
	return cmCall("rdma_listen", C.ipoibd_listen(id, C.int(backlog)))
}

// connectQP is rdma_connect (accept false) or rdma_accept for our QP qpn.
func connectQP(id cmID, private []byte, qpn ib.QPN, retry, rnrRetry uint8, accept bool) error {
	call, acc := "rdma_connect", C.int(0)
	if accept {
		call, acc = "rdma_accept", 1
	}
	if len(private) > 255 {
		return fmt.Errorf("rdmacm: %s: %d octets of private data", call, len(private))
	}
	return cmCall(call, C.ipoibd_connect(id, bytesPtr(private), C.uint8_t(len(private)), C.uint32_t(qpn&ib.QPNMask),
		C.uint8_t(min(retry, 7)), C.uint8_t(min(rnrRetry, 7)), acc))
}

func rejectID(id cmID, private []byte) error {
	if len(private) > 255 {
		private = private[:255] // the kernel takes at most 148
	}
	return cmCall("rdma_reject", C.ipoibd_reject(id, bytesPtr(private), C.uint8_t(len(private))))
}

func establishID(id cmID) error  { return cmCall("rdma_establish", C.ipoibd_establish(id)) }
func disconnectID(id cmID) error { return cmCall("rdma_disconnect", C.ipoibd_disconnect(id)) }
func destroyID(id cmID) error    { return cmCall("rdma_destroy_id", C.ipoibd_destroy_id(id)) }
