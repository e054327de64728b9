package rdmacm

import "github.com/ipoibd/ipoibd/cm"

// The values of librdmacm's enum rdma_cm_event_type and of the libibverbs
// QP attribute mask bits the service reads (both ABI; abi.go checks
// them against the headers). Kept here so that the tables and decisions
// below are plain Go, tested without the libraries.
const (
	evAddrResolved    = 0
	evAddrError       = 1
	evRouteResolved   = 2
	evRouteError      = 3
	evConnectRequest  = 4
	evConnectResponse = 5
	evConnectError    = 6
	evUnreachable     = 7
	evRejected        = 8
	evEstablished     = 9
	evDisconnected    = 10
	evDeviceRemoval   = 11
	evMulticastJoin   = 12
	evMulticastError  = 13
	evAddrChange      = 14
	evTimewaitExit    = 15
	numCMEvents       = 16

	qpTimeout         = 1 << 9  // IBV_QP_TIMEOUT
	qpRetryCnt        = 1 << 10 // IBV_QP_RETRY_CNT
	qpRNRRetry        = 1 << 11 // IBV_QP_RNR_RETRY
	qpMinRNRTimer     = 1 << 15 // IBV_QP_MIN_RNR_TIMER
	qpMaxDestRDAtomic = 1 << 17 // IBV_QP_MAX_DEST_RD_ATOMIC
)

// cmEventNames are counter names for the event types.
var cmEventNames = [numCMEvents]string{
	evAddrResolved:    "addr_resolved",
	evAddrError:       "addr_error",
	evRouteResolved:   "route_resolved",
	evRouteError:      "route_error",
	evConnectRequest:  "connect_request",
	evConnectResponse: "connect_response",
	evConnectError:    "connect_error",
	evUnreachable:     "unreachable",
	evRejected:        "rejected",
	evEstablished:     "established",
	evDisconnected:    "disconnected",
	evDeviceRemoval:   "device_removal",
	evMulticastJoin:   "multicast_join",
	evMulticastError:  "multicast_error",
	evAddrChange:      "addr_change",
	evTimewaitExit:    "timewait_exit",
}

// transportOf tells an incoming connection's transport from the masks
// rdma_init_qp_attr returns for RTR and RTS. librdmacm does not report the
// QP type of a connection request (the new id inherits the listener's, and
// ours listens for any), but the kernel CM fills the responder and retry
// attributes only for RC (cm_init_qp_rtr_attr, cm_init_qp_rts_attr): RC
// has both, UC neither; anything else (XRC) is refused.
func transportOf(rtrMask, rtsMask int) (cm.TransportType, bool) {
	rcRTR := rtrMask&(qpMinRNRTimer|qpMaxDestRDAtomic) == qpMinRNRTimer|qpMaxDestRDAtomic
	rcRTS := rtsMask&(qpRetryCnt|qpRNRRetry) == qpRetryCnt|qpRNRRetry
	switch {
	case rcRTR && rcRTS:
		return cm.TransportRC, true
	case rtrMask&(qpMinRNRTimer|qpMaxDestRDAtomic) == 0 && rtsMask&(qpRetryCnt|qpRNRRetry|qpTimeout) == 0:
		return cm.TransportUC, true
	}
	return 0, false
}
