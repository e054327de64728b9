package verbs

import "github.com/ipoibd/ipoibd/ib"

// The values of enum ibv_wc_status (part of the libibverbs ABI; abi.go
// checks them against the header at compile time). Kept here so that the
// mapping is plain Go and tested without the library.
const (
	wcSuccess          = 0
	wcLocLenErr        = 1
	wcLocQPOpErr       = 2
	wcLocEECOpErr      = 3
	wcLocProtErr       = 4
	wcWRFlushErr       = 5
	wcMWBindErr        = 6
	wcBadRespErr       = 7
	wcLocAccessErr     = 8
	wcRemInvReqErr     = 9
	wcRemAccessErr     = 10
	wcRemOpErr         = 11
	wcRetryExcErr      = 12
	wcRNRRetryExcErr   = 13
	wcLocRDDViolErr    = 14
	wcRemInvRdReqErr   = 15
	wcRemAbortErr      = 16
	wcInvEECNErr       = 17
	wcInvEECStateErr   = 18
	wcFatalErr         = 19
	wcRespTimeoutErr   = 20
	wcGeneralErr       = 21
	wcTMErr            = 22
	wcTMRndvIncomplete = 23
	numWCStatus        = 24
)

// wcStatusMap maps every verbs status to the nearest ib.WCStatus. The ten
// that ib names map one to one; the others say where the fault lies:
//   - local protection or access faults (memory window bind, local access,
//     RDD violation) → WCLocalProtectionError;
//   - the responder refused or failed the request (bad response, remote
//     abort) → WCRemoteOperationalError, a read request it found invalid →
//     WCRemoteInvalidRequest;
//   - the remote side never answered (responder timeout) → WCRetryExceeded,
//     which makes IPoIB drop the connection as a dead peer;
//   - everything else (EE context errors, fatal and general errors, tag
//     matching, unknown values) → WCLocalQPError: the local QP is unusable.
var wcStatusMap = [numWCStatus]ib.WCStatus{
	wcSuccess:          ib.WCSuccess,
	wcLocLenErr:        ib.WCLocalLengthError,
	wcLocQPOpErr:       ib.WCLocalQPError,
	wcLocEECOpErr:      ib.WCLocalQPError,
	wcLocProtErr:       ib.WCLocalProtectionError,
	wcWRFlushErr:       ib.WCFlushError,
	wcMWBindErr:        ib.WCLocalProtectionError,
	wcBadRespErr:       ib.WCRemoteOperationalError,
	wcLocAccessErr:     ib.WCLocalProtectionError,
	wcRemInvReqErr:     ib.WCRemoteInvalidRequest,
	wcRemAccessErr:     ib.WCRemoteAccessError,
	wcRemOpErr:         ib.WCRemoteOperationalError,
	wcRetryExcErr:      ib.WCRetryExceeded,
	wcRNRRetryExcErr:   ib.WCRNRRetryExceeded,
	wcLocRDDViolErr:    ib.WCLocalProtectionError,
	wcRemInvRdReqErr:   ib.WCRemoteInvalidRequest,
	wcRemAbortErr:      ib.WCRemoteOperationalError,
	wcInvEECNErr:       ib.WCLocalQPError,
	wcInvEECStateErr:   ib.WCLocalQPError,
	wcFatalErr:         ib.WCLocalQPError,
	wcRespTimeoutErr:   ib.WCRetryExceeded,
	wcGeneralErr:       ib.WCLocalQPError,
	wcTMErr:            ib.WCLocalQPError,
	wcTMRndvIncomplete: ib.WCLocalQPError,
}

// wcStatus maps a verbs completion status to ib's.
func wcStatus(s uint32) ib.WCStatus {
	if s < numWCStatus {
		return wcStatusMap[s]
	}
	return ib.WCLocalQPError
}
