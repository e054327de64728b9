//go:build !rdma

package verbs

import (
	"errors"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
)

// NewConnService reports that this binary has no librdmacm connection
// service.
func NewConnService(dev ib.Device, events func(cm.Event)) (cm.Service, error) {
	return nil, errors.New("verbs: ipoibd was built without RDMA support, so it has no kernel CM connection service; rebuild with `go build -tags rdma ./ipoibd` (needs libibverbs-dev and librdmacm-dev)")
}
