//go:build rdma

package verbs

import (
	"os"
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibconform"
)

// TestConformance runs the provider contract (package ibconform) on the
// two devices IPOIBD_VERBS_DEVICES names (rxe0 and rxe1 in the rxe test
// bed). QP1's rule needs the kernel's CM unloaded (MADs), so it is left
// out, saying why, while ib_cm holds the CM class.
func TestConformance(t *testing.T) {
	var opts []ibconform.Option
	if loaded, holders := CMModuleHolders(); loaded {
		opts = append(opts, ibconform.WithoutMADs(CMLoadedError(holders).Error()))
	}
	ibconform.Run(t, func(t *testing.T) (a, b ib.Device) {
		names := strings.Split(os.Getenv(devicesEnv), ",")
		if len(names) != 2 || names[0] == "" || names[1] == "" {
			t.Skipf("set %s=rxe0,rxe1 (two RDMA devices on the same link, port 1) to run the verbs tests", devicesEnv)
		}
		var ds [2]ib.Device
		for k, name := range names {
			// Without librdmacm, which would load the kernel's CM again
			// (NoRDMACM): the suite has no use for rdma_cm.
			d, err := Open(Config{Device: name, Port: 1, GIDIndex: -1, NoRDMACM: true})
			if err != nil {
				if k > 0 {
					ds[0].Close()
				}
				t.Fatalf("Open(%s): %v", name, err)
			}
			ds[k] = d
		}
		return ds[0], ds[1]
	}, opts...)
}
