//go:build !(linux && rdma)

package umadsa

import "errors"

// PortClient is an SA client on a port; without rdma-core there is none.
type PortClient struct{ *Client }

// OpenPortClient reports that this binary has no libibumad.
func OpenPortClient(ca string, port int) (*PortClient, error) {
	return nil, errors.New("umadsa: ipoibd was built without RDMA support (build tag rdma): no SA client")
}

// Close does nothing.
func (p *PortClient) Close() error { return nil }
