//go:build !rdma

package verbs

import (
	"errors"

	"github.com/ipoibd/ipoibd/ib"
)

// Open reports that this binary has no rdma-core provider.
func Open(cfg Config) (ib.Device, error) {
	return nil, errors.New("verbs: ipoibd was built without RDMA support; rebuild with `go build -tags rdma ./ipoibd` (needs libibverbs-dev, librdmacm-dev and libibumad-dev)")
}
