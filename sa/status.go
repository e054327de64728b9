package sa

import (
	"fmt"
	"strings"
)

// Status is the 16-bit MAD status of an SA response. The low octet is
// common to all classes (IBA Table 127: busy, redirect, an invalid-field
// code in bits 2-4); the high octet carries the SA's own code (IBA
// Table 157).
type Status uint16

// Common MAD status bits and codes.
const (
	StatusBusy     Status = 0x0001 // the SA is busy: retry later
	StatusRedirect Status = 0x0002 // redirect required (ClassPortInfo)
	statusCodeMask Status = 0x001c

	StatusBadVersion        Status = 0x0004 // base or class version not supported
	StatusMethodUnsupported Status = 0x0008
	StatusMethodAttrUnsupp  Status = 0x000c // method/attribute combination not supported
	StatusInvalidAttrValue  Status = 0x001c // invalid attribute or attribute modifier
)

// SA-specific status codes (IBA Table 157; rdma-core UMAD_SA_STATUS_*),
// the high octet.
const (
	StatusNoResources     Status = 0x0100
	StatusReqInvalid      Status = 0x0200
	StatusNoRecords       Status = 0x0300
	StatusTooManyRecords  Status = 0x0400
	StatusInvalidGID      Status = 0x0500
	StatusInsufComponents Status = 0x0600
	StatusReqDenied       Status = 0x0700
	StatusPriSuggested    Status = 0x0800
	statusSAMask          Status = 0xff00
)

var commonCodes = map[Status]string{
	StatusBadVersion:        "bad base or class version",
	StatusMethodUnsupported: "method not supported",
	StatusMethodAttrUnsupp:  "method and attribute combination not supported",
	StatusInvalidAttrValue:  "invalid attribute or attribute modifier value",
}

var saCodes = map[Status]string{
	StatusNoResources:     "ERR_NO_RESOURCES: the SA has no resources to complete the request",
	StatusReqInvalid:      "ERR_REQ_INVALID: the request is invalid (a join whose Q_Key, P_Key or MTU conflicts with the group's; a leave of a port that is no member)",
	StatusNoRecords:       "ERR_NO_RECORDS: no record matches the request",
	StatusTooManyRecords:  "ERR_TOO_MANY_RECORDS: more than one record matches a Get",
	StatusInvalidGID:      "ERR_REQ_INVALID_GID: a GID in the request is not valid",
	StatusInsufComponents: "ERR_REQ_INSUFFICIENT_COMPONENTS: the component mask lacks what the SA needs (for a join to a new group: the create components)",
	StatusReqDenied:       "ERR_REQ_DENIED: the SA refused the request",
	StatusPriSuggested:    "ERR_REQ_PRI_SUGGESTED: a path with the requested priority is suggested",
}

// OK reports a status of 0.
func (s Status) OK() bool { return s == 0 }

// Code is the SA-specific code of the high octet (1 to 8 are defined).
func (s Status) Code() uint8 { return uint8(s >> 8) }

// String names every part set, e.g.
// "0x0200 ERR_REQ_INVALID: the request is invalid ...".
func (s Status) String() string {
	if s == 0 {
		return "0x0000 success"
	}
	var parts []string
	if s&StatusBusy != 0 {
		parts = append(parts, "busy")
	}
	if s&StatusRedirect != 0 {
		parts = append(parts, "redirect required")
	}
	if c := s & statusCodeMask; c != 0 {
		if n, ok := commonCodes[c]; ok {
			parts = append(parts, n)
		} else {
			parts = append(parts, fmt.Sprintf("reserved MAD status code %d", c>>2))
		}
	}
	if s&0x00e0 != 0 {
		parts = append(parts, fmt.Sprintf("reserved bits %#04x", uint16(s&0x00e0)))
	}
	if c := s & statusSAMask; c != 0 {
		if n, ok := saCodes[c]; ok {
			parts = append(parts, n)
		} else {
			parts = append(parts, fmt.Sprintf("unknown SA status code %d", c>>8))
		}
	}
	return fmt.Sprintf("%#04x %s", uint16(s), strings.Join(parts, ", "))
}

// StatusError is an SA answer with a non-zero status.
type StatusError struct {
	Method Method
	Attr   AttrID
	Status Status
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("SA %s %s: status %v", e.Method, e.Attr, e.Status)
}
