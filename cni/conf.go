package cni

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/ipoibd/ipoibd/ib"
)

// NetConf is the network configuration, written as ipoib-cni users write
// theirs (master, ipam) plus the partition and the link's mode and MTU.
type NetConf struct {
	types.PluginConf
	// Master is the interface whose ipoibd makes the pod's child, in the
	// namespace the plugin runs in (where its control socket is).
	Master string `json:"master"`
	// PKey is the child's partition, e.g. "0x8001" (the full-membership
	// bit is set as the kernel's create_child does); default the master's.
	PKey string `json:"pkey,omitempty"`
	// Mode is connected or datagram (default the master's), MTU the
	// child's (default the mode's: 65520 connected).
	Mode string `json:"mode,omitempty"`
	MTU  int    `json:"mtu,omitempty"`
	// DataDir keeps each attachment's IPAM result, so that an ADD after a
	// daemon restart gets the pod's addresses back (default
	// /var/lib/cni/ipoibd).
	DataDir string `json:"dataDir,omitempty"`
}

// defaultDataDir is where attachments are kept unless dataDir says.
const defaultDataDir = "/var/lib/cni/ipoibd"

// loadConf reads and checks the configuration; its errors are CNI errors
// with code 7 (invalid network configuration).
func loadConf(stdin []byte) (*NetConf, error) {
	n := &NetConf{}
	if err := json.Unmarshal(stdin, n); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "ipoibd-cni: cannot read the network configuration", err.Error())
	}
	if err := n.check(); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "ipoibd-cni: invalid network configuration", err.Error())
	}
	if n.DataDir == "" {
		n.DataDir = defaultDataDir
	}
	return n, nil
}

func (n *NetConf) check() error {
	switch {
	case n.Name == "":
		return fmt.Errorf("name is missing")
	case n.Master == "":
		return fmt.Errorf("master is missing: the interface whose ipoibd makes the pods' children, e.g. \"ib0\"")
	case len(n.Master) >= 16 || strings.ContainsAny(n.Master, "/: \t\n"):
		return fmt.Errorf("master %q is not an interface name", n.Master)
	case n.MTU < 0:
		return fmt.Errorf("mtu %d: must be positive", n.MTU)
	}
	if n.PKey != "" {
		if _, err := ib.ParsePKey(n.PKey); err != nil {
			return fmt.Errorf("pkey: %w", err)
		}
	}
	switch n.Mode {
	case "", "connected", "datagram":
	default:
		return fmt.Errorf("mode %q: want connected or datagram", n.Mode)
	}
	return nil
}

// parsePrev reads prevResult (CHECK must have it) in the configuration's
// version.
func (n *NetConf) parsePrev() error {
	if n.RawPrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "ipoibd-cni: prevResult is missing", "CHECK needs the result of ADD")
	}
	if err := version.ParsePrevResult(&n.PluginConf); err != nil {
		return types.NewError(types.ErrDecodingFailure, "ipoibd-cni: cannot read prevResult", err.Error())
	}
	return nil
}
