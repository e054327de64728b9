//go:build !rdma

package verbs

import (
	"strings"
	"testing"
)

// The daemon's --provider verbs ends with this message: it must say how
// to get a build that has the provider.
func TestOpenWithoutRDMA(t *testing.T) {
	d, err := Open(Config{Device: "mlx5_0", Port: 1, GIDIndex: -1})
	if d != nil || err == nil {
		t.Fatalf("Open = %v, %v; want no device and an error", d, err)
	}
	for _, want := range []string{"-tags rdma", "libibverbs-dev", "librdmacm-dev"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
