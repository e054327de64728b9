//go:build !rdma

package rdmacm

import (
	"strings"
	"testing"
)

// A connected-mode daemon built without the tag must say how to get one
// that has the kernel CM service.
func TestNewWithoutRDMA(t *testing.T) {
	s, err := New(nil, nil)
	if s != nil || err == nil || !strings.Contains(err.Error(), "-tags rdma") {
		t.Fatalf("New = %v, %v; want no service and an error naming -tags rdma", s, err)
	}
}
