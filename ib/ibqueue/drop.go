package ibqueue

import "github.com/ipoibd/ipoibd/ib"

// Drop is a cause of a lost packet or completion that both software
// providers count, under the same counter names so that tests read the
// same names on both. ib/ibtest reports them in this order; softib keeps
// its own order and adds causes of its wire (ICRC, PSN, LIDs).
type Drop int

// The drop causes.
const (
	DropPKey        Drop = iota // partition check failed
	DropQKey                    // UD Q_Key check failed
	DropUnknownQP               // no such destination QP
	DropQPState                 // QP not ready to receive
	DropNoRecv                  // UD/UC or QP1: no receive buffer
	DropTooLong                 // message larger than the posted buffer
	DropNotMember               // multicast for a group nobody here joined
	DropCQOverrun               // completion queue full
	DropWrongSource             // RC/UC: not from the QP's peer
	DropMalformed               // a packet (or MAD) that does not parse
	NumDrops
)

var dropNames = [NumDrops]string{
	DropPKey:        "rx_drop_pkey",
	DropQKey:        "rx_drop_qkey",
	DropUnknownQP:   "rx_drop_unknown_qp",
	DropQPState:     "rx_drop_qp_state",
	DropNoRecv:      "rx_drop_no_recv_buffer",
	DropTooLong:     "rx_drop_too_long",
	DropNotMember:   "rx_drop_not_member",
	DropCQOverrun:   "cq_overrun",
	DropWrongSource: "rx_drop_wrong_source",
	DropMalformed:   "rx_drop_malformed",
}

// Name returns the counter name of the cause, e.g. "rx_drop_qkey".
func (d Drop) Name() string {
	if d >= 0 && d < NumDrops {
		return dropNames[d]
	}
	return ""
}

// Admit says whether a QP in state st whose partition is own takes a
// packet of partition pkey: only in RTR or RTS, and only of its own
// partition (the port's table may hold others). If not, cause is what to
// count: DropQPState or DropPKey.
func Admit(st ib.QPState, own, pkey ib.PKey) (cause Drop, ok bool) {
	switch {
	case st != ib.StateRTR && st != ib.StateRTS:
		return DropQPState, false
	case !own.Accepts(pkey):
		return DropPKey, false
	}
	return 0, true
}
