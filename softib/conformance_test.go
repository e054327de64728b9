package softib_test

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibconform"
	"github.com/ipoibd/ipoibd/softib"
)

// TestConformance runs the provider contract (package ibconform) on two
// devices over UDP on 127.0.0.x, which needs no root.
func TestConformance(t *testing.T) {
	ibconform.Run(t, func(t *testing.T) (a, b ib.Device) {
		// A port of this process's own: tests of other packages run
		// softib on 127.0.0.x at the same time.
		port := uint16(30000 + os.Getpid()%20000)
		var ds [2]ib.Device
		for k := range ds {
			d, err := softib.Open(softib.Config{Name: fmt.Sprintf("softib%d", k), Addr: netip.AddrFrom4([4]byte{127, 0, 0, byte(21 + k)}), Port: port})
			if err != nil {
				if k > 0 {
					ds[0].Close()
				}
				t.Skipf("softib cannot open on 127.0.0.%d:%d here: %v", 21+k, port, err)
			}
			ds[k] = d
		}
		return ds[0], ds[1]
	})
}
