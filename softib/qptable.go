package softib

import (
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
)

// qpTableShards splits the QP table by the low octet of the QPN (random,
// so the shards fill evenly).
const qpTableShards = 256

// qpTable finds a QP by number without a lock on the receive path. Each
// shard is a copy-on-write map: a change copies one shard, ~1/256 of the
// table, so making 10,000 QPs costs ~40 copies each, not 5,000.
// Changes are serialised by Device.mu.
type qpTable struct {
	shards [qpTableShards]atomic.Pointer[map[ib.QPN]*qp]
}

func (t *qpTable) get(n ib.QPN) (*qp, bool) {
	m := t.shards[n%qpTableShards].Load()
	if m == nil {
		return nil, false
	}
	q, ok := (*m)[n]
	return q, ok
}

// has reports whether a live QP holds number n.
func (t *qpTable) has(n ib.QPN) bool {
	_, ok := t.get(n)
	return ok
}

// put enters q; the caller holds Device.mu.
func (t *qpTable) put(q *qp) {
	s := &t.shards[q.num%qpTableShards]
	var old map[ib.QPN]*qp
	if p := s.Load(); p != nil {
		old = *p
	}
	m := make(map[ib.QPN]*qp, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[q.num] = q
	s.Store(&m)
}

// remove takes q out and reports whether it was there; the caller holds
// Device.mu.
func (t *qpTable) remove(q *qp) bool {
	s := &t.shards[q.num%qpTableShards]
	p := s.Load()
	if p == nil || (*p)[q.num] != q {
		return false
	}
	m := make(map[ib.QPN]*qp, len(*p))
	for k, v := range *p {
		if v != q {
			m[k] = v
		}
	}
	s.Store(&m)
	return true
}

// all returns every QP (Close).
func (t *qpTable) all() []*qp {
	var out []*qp
	for i := range t.shards {
		if p := t.shards[i].Load(); p != nil {
			for _, q := range *p {
				out = append(out, q)
			}
		}
	}
	return out
}
