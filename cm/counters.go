package cm

import (
	"reflect"
	"strings"

	"github.com/ipoibd/ipoibd/ib"
)

// Counters are derived from the stats structs themselves: every uint64
// field with a `counter` tag is shown under that name, and the by-kind and
// by-reason arrays under their prefix plus the kind or reason. Adding a
// field adds a counter; there is no second list to keep in step.

// KindCounts counts MADs by message kind (REQ .. APR), indexed by
// AttrID - AttrREQ.
type KindCounts [AttrAPR - AttrREQ + 1]uint64

// Add counts one MAD of kind a; kinds outside REQ .. APR are not counted.
func (k *KindCounts) Add(a AttrID) {
	if a >= AttrREQ && a <= AttrAPR {
		k[a-AttrREQ]++
	}
}

// Of returns the count of kind a.
func (k *KindCounts) Of(a AttrID) uint64 {
	if a >= AttrREQ && a <= AttrAPR {
		return k[a-AttrREQ]
	}
	return 0
}

// Total returns the count over every kind.
func (k *KindCounts) Total() uint64 {
	var n uint64
	for _, v := range k {
		n += v
	}
	return n
}

// ReasonCounts counts REJs by reason code.
type ReasonCounts [RejVendorOptionNotSupported + 1]uint64

// Add counts one REJ with reason r; codes beyond the table are counted
// under 0, which no REJ has.
func (c *ReasonCounts) Add(r RejectReason) {
	if int(r) < len(c) {
		c[r]++
	} else {
		c[0]++
	}
}

// Of returns the count of reason r.
func (c *ReasonCounts) Of(r RejectReason) uint64 {
	if int(r) < len(c) {
		return c[r]
	}
	return 0
}

// rejectReasonKeys are the counter names of the reasons: Linux's enum
// ib_cm_rej_reason without its IB_CM_REJ_ prefix, in lower case (28 is
// shortened from CONSUMER_DEFINED).
var rejectReasonKeys = []string{
	0:                            "other",
	RejNoQP:                      "no_qp",
	RejNoEEC:                     "no_eec",
	RejNoResources:               "no_resources",
	RejTimeout:                   "timeout",
	RejUnsupportedRequest:        "unsupported",
	RejInvalidCommID:             "invalid_comm_id",
	RejInvalidCommInstance:       "invalid_comm_instance",
	RejInvalidServiceID:          "invalid_service_id",
	RejInvalidTransportType:      "invalid_transport_type",
	RejStaleConnection:           "stale_conn",
	RejRDCNotExist:               "rdc_not_exist",
	RejInvalidGID:                "invalid_gid",
	RejInvalidLID:                "invalid_lid",
	RejInvalidSL:                 "invalid_sl",
	RejInvalidTrafficClass:       "invalid_traffic_class",
	RejInvalidHopLimit:           "invalid_hop_limit",
	RejInvalidPacketRate:         "invalid_packet_rate",
	RejInvalidAltGID:             "invalid_alt_gid",
	RejInvalidAltLID:             "invalid_alt_lid",
	RejInvalidAltSL:              "invalid_alt_sl",
	RejInvalidAltTrafficClass:    "invalid_alt_traffic_class",
	RejInvalidAltHopLimit:        "invalid_alt_hop_limit",
	RejInvalidAltPacketRate:      "invalid_alt_packet_rate",
	RejPortCMRedirect:            "port_cm_redirect",
	RejPortRedirect:              "port_redirect",
	RejInvalidMTU:                "invalid_mtu",
	RejInsufficientRespResources: "insufficient_resp_resources",
	RejConsumerReject:            "consumer",
	RejInvalidRNRRetry:           "invalid_rnr_retry",
	RejDuplicateLocalCommID:      "duplicate_local_comm_id",
	RejInvalidClassVersion:       "invalid_class_version",
	RejInvalidFlowLabel:          "invalid_flow_label",
	RejInvalidAltFlowLabel:       "invalid_alt_flow_label",
	34:                           "reason_34",
	RejVendorOptionNotSupported:  "vendor_option_not_supported",
}

// CounterKey returns the reason's counter name, e.g. "stale_conn".
func (r RejectReason) CounterKey() string {
	if int(r) < len(rejectReasonKeys) {
		return rejectReasonKeys[r]
	}
	return "other"
}

var (
	kindCountsType   = reflect.TypeFor[KindCounts]()
	reasonCountsType = reflect.TypeFor[ReasonCounts]()
)

// StatCounters lists the counters of a stats struct (a pointer to one).
// Every counter appears, zero or not, in the struct's order, so that the
// daemon's stats have the same keys in every state.
func StatCounters(stats any) []ib.Counter {
	v := reflect.ValueOf(stats).Elem()
	t := v.Type()
	var out []ib.Counter
	for i := range t.NumField() {
		name, ok := t.Field(i).Tag.Lookup("counter")
		if !ok {
			continue
		}
		f := v.Field(i)
		switch f.Type() {
		case kindCountsType:
			for j := range f.Len() {
				out = append(out, ib.Counter{Name: name + strings.ToLower(AttrID(int(AttrREQ)+j).String()), Value: f.Index(j).Uint()})
			}
		case reasonCountsType:
			for j := range f.Len() {
				out = append(out, ib.Counter{Name: name + RejectReason(j).CounterKey(), Value: f.Index(j).Uint()})
			}
		default:
			out = append(out, ib.Counter{Name: name, Value: f.Uint()})
		}
	}
	return out
}
