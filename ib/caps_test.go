package ib_test

import (
	"slices"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
)

// bare has no optional capability; full has them all, and its CQs take a
// handler.
type bare struct{ ib.Device }

type full struct{ bare }

func (full) CQHandlers() bool         { return true }
func (full) SubnetEvents() uint64     { return 3 }
func (full) PortActive() bool         { return true }
func (full) QPCounterNames() []string { return []string{"x"} }

type handledCQ struct {
	ib.CQ
	f func()
}

func (c *handledCQ) SetHandler(f func()) { c.f = f }

func TestCapsOf(t *testing.T) {
	if c := ib.CapsOf(bare{}); c.Names() != nil || c.SetCQHandler(&handledCQ{}, func() {}) {
		t.Errorf("a device with no capability: %v", c.Names())
	}
	c := ib.CapsOf(full{})
	want := []string{"CQHandler", "SubnetEventer", "PortStater", "QPCounterNamer"}
	if !slices.Equal(c.Names(), want) {
		t.Errorf("capabilities %v, want %v", c.Names(), want)
	}
	if c.SubnetEvents.SubnetEvents() != 3 || !c.PortState.PortActive() || c.QPCounters.QPCounterNames()[0] != "x" {
		t.Error("the capabilities are not the device's")
	}
	cq, ran := &handledCQ{}, false
	if !c.SetCQHandler(cq, func() { ran = true }) || cq.f == nil {
		t.Fatal("SetCQHandler did not set the handler")
	}
	if cq.f(); !ran {
		t.Error("the handler set is not f")
	}
}
