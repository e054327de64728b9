package ibtest_test

import (
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibconform"
	"github.com/ipoibd/ipoibd/ib/ibtest"
)

// TestConformance runs the provider contract (package ibconform) on two
// devices of one fabric.
func TestConformance(t *testing.T) { ibconform.Run(t, openPair) }

// openPair opens two devices on a fabric of their own.
func openPair(t *testing.T) (a, b ib.Device) {
	f := ibtest.NewFabric()
	da, err := f.Open(ibtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err = f.Open(ibtest.Config{}); err != nil {
		da.Close()
		t.Fatal(err)
	}
	return da, b
}
