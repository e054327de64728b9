package verbs

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

func TestWCStatus(t *testing.T) {
	for _, c := range []struct {
		verbs uint32
		want  ib.WCStatus
	}{
		{wcSuccess, ib.WCSuccess},
		{wcLocLenErr, ib.WCLocalLengthError},
		{wcLocQPOpErr, ib.WCLocalQPError},
		{wcLocProtErr, ib.WCLocalProtectionError},
		{wcWRFlushErr, ib.WCFlushError},
		{wcRetryExcErr, ib.WCRetryExceeded},
		{wcRNRRetryExcErr, ib.WCRNRRetryExceeded},
		{wcRemInvReqErr, ib.WCRemoteInvalidRequest},
		{wcRemAccessErr, ib.WCRemoteAccessError},
		{wcRemOpErr, ib.WCRemoteOperationalError},
		// The nearest ones.
		{wcLocEECOpErr, ib.WCLocalQPError},
		{wcMWBindErr, ib.WCLocalProtectionError},
		{wcBadRespErr, ib.WCRemoteOperationalError},
		{wcLocAccessErr, ib.WCLocalProtectionError},
		{wcLocRDDViolErr, ib.WCLocalProtectionError},
		{wcRemInvRdReqErr, ib.WCRemoteInvalidRequest},
		{wcRemAbortErr, ib.WCRemoteOperationalError},
		{wcRespTimeoutErr, ib.WCRetryExceeded},
		{wcFatalErr, ib.WCLocalQPError},
		{wcGeneralErr, ib.WCLocalQPError},
		{wcTMRndvIncomplete, ib.WCLocalQPError},
		{numWCStatus, ib.WCLocalQPError},
		{0xffffffff, ib.WCLocalQPError},
	} {
		if got := wcStatus(c.verbs); got != c.want {
			t.Errorf("wcStatus(%d) = %v, want %v", c.verbs, got, c.want)
		}
	}
}

// Only success maps to success: an error must never look like a delivery.
func TestWCStatusOnlySuccessSucceeds(t *testing.T) {
	for s := uint32(1); s < numWCStatus; s++ {
		if wcStatus(s) == ib.WCSuccess {
			t.Errorf("verbs status %d maps to success", s)
		}
	}
}
