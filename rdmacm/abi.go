//go:build rdma

package rdmacm

/*
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
*/
import "C"

// Compile-time checks that the plain-Go copies in events.go and
// addr.go match the headers (an index outside [0,1) does not compile).
var _ = [1]struct{}{}[evAddrResolved-C.RDMA_CM_EVENT_ADDR_RESOLVED]
var _ = [1]struct{}{}[evAddrError-C.RDMA_CM_EVENT_ADDR_ERROR]
var _ = [1]struct{}{}[evRouteResolved-C.RDMA_CM_EVENT_ROUTE_RESOLVED]
var _ = [1]struct{}{}[evRouteError-C.RDMA_CM_EVENT_ROUTE_ERROR]
var _ = [1]struct{}{}[evConnectRequest-C.RDMA_CM_EVENT_CONNECT_REQUEST]
var _ = [1]struct{}{}[evConnectResponse-C.RDMA_CM_EVENT_CONNECT_RESPONSE]
var _ = [1]struct{}{}[evConnectError-C.RDMA_CM_EVENT_CONNECT_ERROR]
var _ = [1]struct{}{}[evUnreachable-C.RDMA_CM_EVENT_UNREACHABLE]
var _ = [1]struct{}{}[evRejected-C.RDMA_CM_EVENT_REJECTED]
var _ = [1]struct{}{}[evEstablished-C.RDMA_CM_EVENT_ESTABLISHED]
var _ = [1]struct{}{}[evDisconnected-C.RDMA_CM_EVENT_DISCONNECTED]
var _ = [1]struct{}{}[evDeviceRemoval-C.RDMA_CM_EVENT_DEVICE_REMOVAL]
var _ = [1]struct{}{}[evMulticastJoin-C.RDMA_CM_EVENT_MULTICAST_JOIN]
var _ = [1]struct{}{}[evMulticastError-C.RDMA_CM_EVENT_MULTICAST_ERROR]
var _ = [1]struct{}{}[evAddrChange-C.RDMA_CM_EVENT_ADDR_CHANGE]
var _ = [1]struct{}{}[evTimewaitExit-C.RDMA_CM_EVENT_TIMEWAIT_EXIT]
var _ = [1]struct{}{}[numCMEvents-1-C.RDMA_CM_EVENT_TIMEWAIT_EXIT]

var _ = [1]struct{}{}[qpTimeout-C.IBV_QP_TIMEOUT]
var _ = [1]struct{}{}[qpRetryCnt-C.IBV_QP_RETRY_CNT]
var _ = [1]struct{}{}[qpRNRRetry-C.IBV_QP_RNR_RETRY]
var _ = [1]struct{}{}[qpMinRNRTimer-C.IBV_QP_MIN_RNR_TIMER]
var _ = [1]struct{}{}[qpMaxDestRDAtomic-C.IBV_QP_MAX_DEST_RD_ATOMIC]

var _ = [1]struct{}{}[rdmaPSIB-C.RDMA_PS_IB]
var _ = [1]struct{}{}[rdmaIBPSIB-C.RDMA_IB_PS_IB]
