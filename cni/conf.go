package cni

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
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
	if err := checkKeys(stdin); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "ipoibd-cni: invalid network configuration", err.Error())
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
	case n.IPAM.Type == "":
		return fmt.Errorf("ipam is missing: the pod's addresses come from an IPAM plugin, e.g. \"ipam\": {\"type\": \"host-local\", \"subnet\": ...}")
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

// runtimeKeys are the keys a runtime adds to a plugin's configuration
// (CNI spec, "Section 3"; libcni's GC adds both attachment lists).
var runtimeKeys = []string{"runtimeConfig", "args", "cni.dev/attachments"}

// knownKeys are the configuration's keys: NetConf's and the runtime's.
var knownKeys = func() map[string]bool {
	keys := map[string]bool{}
	for _, t := range []reflect.Type{reflect.TypeOf(NetConf{}), reflect.TypeOf(types.PluginConf{})} {
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				keys[name] = true
			}
		}
	}
	for _, k := range runtimeKeys {
		keys[k] = true
	}
	return keys
}()

// checkKeys refuses a key the plugin does not know, as a typo ("pkye")
// would otherwise leave the pod in the master's partition unseen. The
// keys inside ipam are the IPAM plugin's to judge.
func checkKeys(stdin []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &m); err != nil {
		return err
	}
	var unknown []string
	for k := range m {
		if !knownKeys[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	k := unknown[0]
	if near := nearestKey(k); near != "" {
		return fmt.Errorf("unknown key %q (did you mean %q?)", k, near)
	}
	return fmt.Errorf("unknown key %q: ipoibd-cni knows master, pkey, mode, mtu, dataDir, ipam, dns and the CNI keys", k)
}

// nearestKey is the known key within two edits of k, if one is.
func nearestKey(k string) string {
	best, bestD := "", 3
	for known := range knownKeys {
		if d := editDistance(strings.ToLower(k), strings.ToLower(known)); d < bestD || (d == bestD && known < best) {
			best, bestD = known, d
		}
	}
	return best
}

// editDistance is the Damerau–Levenshtein (optimal string alignment)
// distance: a swap of two letters, as in "pkye", is one edit.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
