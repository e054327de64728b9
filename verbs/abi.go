//go:build rdma

package verbs

/*
#include <infiniband/verbs.h>
*/
import "C"

import "github.com/ipoibd/ipoibd/ib"

// Compile-time checks that the plain-Go copies of libibverbs constants
// (status.go) and the value conversions match the header: a constant index
// outside [0,1) does not compile.
var _ = [1]struct{}{}[wcSuccess-C.IBV_WC_SUCCESS]
var _ = [1]struct{}{}[wcLocLenErr-C.IBV_WC_LOC_LEN_ERR]
var _ = [1]struct{}{}[wcLocQPOpErr-C.IBV_WC_LOC_QP_OP_ERR]
var _ = [1]struct{}{}[wcLocEECOpErr-C.IBV_WC_LOC_EEC_OP_ERR]
var _ = [1]struct{}{}[wcLocProtErr-C.IBV_WC_LOC_PROT_ERR]
var _ = [1]struct{}{}[wcWRFlushErr-C.IBV_WC_WR_FLUSH_ERR]
var _ = [1]struct{}{}[wcMWBindErr-C.IBV_WC_MW_BIND_ERR]
var _ = [1]struct{}{}[wcBadRespErr-C.IBV_WC_BAD_RESP_ERR]
var _ = [1]struct{}{}[wcLocAccessErr-C.IBV_WC_LOC_ACCESS_ERR]
var _ = [1]struct{}{}[wcRemInvReqErr-C.IBV_WC_REM_INV_REQ_ERR]
var _ = [1]struct{}{}[wcRemAccessErr-C.IBV_WC_REM_ACCESS_ERR]
var _ = [1]struct{}{}[wcRemOpErr-C.IBV_WC_REM_OP_ERR]
var _ = [1]struct{}{}[wcRetryExcErr-C.IBV_WC_RETRY_EXC_ERR]
var _ = [1]struct{}{}[wcRNRRetryExcErr-C.IBV_WC_RNR_RETRY_EXC_ERR]
var _ = [1]struct{}{}[wcLocRDDViolErr-C.IBV_WC_LOC_RDD_VIOL_ERR]
var _ = [1]struct{}{}[wcRemInvRdReqErr-C.IBV_WC_REM_INV_RD_REQ_ERR]
var _ = [1]struct{}{}[wcRemAbortErr-C.IBV_WC_REM_ABORT_ERR]
var _ = [1]struct{}{}[wcInvEECNErr-C.IBV_WC_INV_EECN_ERR]
var _ = [1]struct{}{}[wcInvEECStateErr-C.IBV_WC_INV_EEC_STATE_ERR]
var _ = [1]struct{}{}[wcFatalErr-C.IBV_WC_FATAL_ERR]
var _ = [1]struct{}{}[wcRespTimeoutErr-C.IBV_WC_RESP_TIMEOUT_ERR]
var _ = [1]struct{}{}[wcGeneralErr-C.IBV_WC_GENERAL_ERR]
var _ = [1]struct{}{}[wcTMErr-C.IBV_WC_TM_ERR]
var _ = [1]struct{}{}[wcTMRndvIncomplete-C.IBV_WC_TM_RNDV_INCOMPLETE]

// The IB MTU codes are verbs' enum ibv_mtu, converted by value.
var _ = [1]struct{}{}[int(ib.MTU256)-C.IBV_MTU_256]
var _ = [1]struct{}{}[int(ib.MTU4096)-C.IBV_MTU_4096]
