package verbs

import "github.com/ipoibd/ipoibd/ib"

// rawWC is the part of a verbs work completion (struct ibv_wc) the
// provider reads, copied out of C memory so that the conversion below is
// plain Go.
type rawWC struct {
	wrID      uint64
	status    uint32 // enum ibv_wc_status
	byteLen   uint32
	qpNum     uint32
	srcQP     uint32
	pkeyIndex uint16
	slid      uint16 // the sender's LID (InfiniBand; 0 on RoCE)
	sl        uint8
	grh       bool // wc_flags has IBV_WC_GRH: a GRH area precedes the data
}

// complete turns one adapter completion into out, finding the caller's
// request through the registry and freeing its entry. It returns false for
// a stale completion (of a QP that closed or reset), which is dropped.
// pkeys is the port's P_Key table.
func (r *registry) complete(w *rawWC, pkeys []ib.PKey, out *ib.Completion) bool {
	t, entry := r.lookup(w.wrID)
	if t == nil {
		return false
	}
	t.mu.Lock()
	e, ok := t.takeLocked(entry)
	t.mu.Unlock()
	if !ok {
		return false
	}
	st := wcStatus(w.status)
	// Opcode, length and the UD fields are only valid on success; the
	// table says whether this was a send or a receive.
	*out = ib.Completion{ID: e.id, Status: st, Opcode: ib.WCSend, QPN: ib.QPN(w.qpNum)}
	if t.recv {
		out.Opcode = ib.WCRecv
	}
	t.stats.count(st)
	if st != ib.WCSuccess || !t.recv {
		return true
	}
	out.ByteLen = w.byteLen
	if t.ud || w.grh {
		out.SrcQPN = ib.QPN(w.srcQP) & ib.QPNMask
		out.PKey = t.recvPKey(int(w.pkeyIndex), pkeys)
		out.SrcLID, out.SL = w.slid, w.sl&0xf
	}
	if w.grh {
		out.SrcGID, _ = srcGIDFromGRH(e.buf)
	}
	return true
}

// recvPKey is the P_Key of a UD receive. verbs reports pkey_index only for
// QP1, but a UD QP only accepts its own partition, so its P_Key is the
// answer; a table without one (an SRQ) falls back to the index.
func (t *wrTable) recvPKey(index int, pkeys []ib.PKey) ib.PKey {
	if t.pkey != nil {
		if p := ib.PKey(t.pkey.Load()); p != 0 {
			return p
		}
	}
	if index < len(pkeys) {
		return pkeys[index]
	}
	return 0
}

// flushCompletion is the completion the provider makes for a request
// still outstanding when its table retires.
func (t *wrTable) flushCompletion(e wrEntry) ib.Completion {
	t.stats.count(ib.WCFlushError)
	c := ib.Completion{ID: e.id, Status: ib.WCFlushError, Opcode: ib.WCSend, QPN: t.qpn}
	if t.recv {
		c.Opcode = ib.WCRecv
	}
	return c
}

// count records a completion with status st.
func (s *queueStats) count(st ib.WCStatus) {
	s.completed.Add(1)
	switch st {
	case ib.WCSuccess:
	case ib.WCFlushError:
		s.flushed.Add(1)
	default:
		s.errors.Add(1)
	}
}

// counters names the queue's counters with prefix ("send_", "recv_").
func (s *queueStats) counters(prefix string) []ib.Counter {
	return []ib.Counter{
		{Name: prefix + "posted", Value: s.posted.Load()},
		{Name: prefix + "completed", Value: s.completed.Load()},
		{Name: prefix + "errors", Value: s.errors.Load()},
		{Name: prefix + "flushed", Value: s.flushed.Load()},
	}
}
