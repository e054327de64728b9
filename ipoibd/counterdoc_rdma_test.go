//go:build rdma

package main

import (
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/counterdoc"
	"github.com/ipoibd/ipoibd/rdmacm"
	"github.com/ipoibd/ipoibd/verbs"
)

// TestEveryVerbsCounterDocumented: the verbs provider's and the kernel
// CM's counters have their entries too. The adapter's sysfs counters
// (dev_hw_*) are a family; ib_umad's (cm_umad_*) are counted by a type
// verbs keeps to itself, and checked by name only.
func TestEveryVerbsCounterDocumented(t *testing.T) {
	names := knownCounters(t)
	for _, c := range (&rdmacm.Service{}).Counters() {
		names = append(names, "cm_"+c.Name)
	}
	var d verbs.Device
	for _, n := range d.QPCounterNames() {
		names = append(names, "conn_"+n)
	}
	for _, c := range d.Counters() {
		names = append(names, "dev_"+c.Name)
	}
	checkDocumented(t, names, func(e counterdoc.Entry) bool { return !strings.HasPrefix(e.Name, "cm_umad_") })
}
