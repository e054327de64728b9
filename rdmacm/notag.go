//go:build !rdma

package rdmacm

import (
	"errors"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
)

// New reports that this binary, built without the tag rdma, has no
// librdmacm connection service, and how to get one that has.
func New(dev ib.Device, events func(cm.Event)) (cm.Service, error) {
	return nil, errNoRDMA
}

// NewRFCSender reports the same.
func NewRFCSender(dev ib.Device, events func(cm.Event)) (cm.Service, error) {
	return nil, errNoRDMA
}

var errNoRDMA = errors.New("rdmacm: ipoibd was built without RDMA support, so it has no kernel CM connection service; rebuild with `go build -tags rdma ./ipoibd` (needs libibverbs-dev, librdmacm-dev and libibumad-dev)")
