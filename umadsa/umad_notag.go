//go:build !(linux && rdma)

package umadsa

import (
	"errors"
	"os"
)

// OpenPortClient reports that this binary has no libibumad.
func OpenPortClient(ca string, port int) (*Client, error) {
	return nil, errors.New("umadsa: ipoibd was built without RDMA support (build tag rdma): no SA client")
}

// errNoRDMA says that this binary has no libibumad.
var errNoRDMA = errors.New("umadsa: ipoibd was built without RDMA support (build tag rdma): no libibumad to read the port from (build with -tags rdma)")

// QueryPort reports that this binary has no libibumad.
func QueryPort(ca string, port int) (PortInfo, error) { return PortInfo{}, errNoRDMA }

// Exit is os.Exit: without libibumad no C atexit handler waits.
func Exit(code int) { os.Exit(code) }

// SMAPort reads a port from its SMA; without libibumad there is none.
type SMAPort struct{}

// OpenSMAPort reports that this binary has no libibumad.
func OpenSMAPort(ca string, port int) (*SMAPort, error) { return nil, errNoRDMA }

// Query reports that this binary has no libibumad.
func (s *SMAPort) Query() (PortInfo, error) { return PortInfo{}, errNoRDMA }

// Close does nothing.
func (s *SMAPort) Close() error { return nil }
