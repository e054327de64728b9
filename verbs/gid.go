package verbs

import (
	"fmt"
	"strings"

	"github.com/ipoibd/ipoibd/ib"
)

// gidEntry is one valid entry of a port's GID table.
type gidEntry struct {
	index   int
	gid     ib.GID
	roceV2  bool // RoCEv2 (UDP-encapsulated); false for InfiniBand and RoCEv1
	ifindex int  // RoCE: the network interface the GID belongs to (0 if unknown)
}

// chooseGID picks the port's GID when the operator gave no index: on
// InfiniBand the port GID at index 0; on RoCE the first RoCEv2 GID that is
// an IPv4-mapped address, since RoCEv2 over IPv4 is what routes, what
// rdma_cm's IP addressing uses and what the kernel joins multicast groups
// for.
func chooseGID(entries []gidEntry, ethernet bool) (gidEntry, error) {
	if !ethernet {
		for _, e := range entries {
			if e.index == 0 && e.gid != (ib.GID{}) {
				return e, nil
			}
		}
		return gidEntry{}, fmt.Errorf("GID index 0 is empty")
	}
	var seen []string
	for _, e := range entries {
		if e.roceV2 && e.gid.IsIPv4Mapped() && e.gid != (ib.GID{}) {
			return e, nil
		}
		kind := "RoCEv1"
		if e.roceV2 {
			kind = "RoCEv2"
		}
		seen = append(seen, fmt.Sprintf("%d: %v (%s)", e.index, e.gid, kind))
	}
	if len(seen) == 0 {
		return gidEntry{}, fmt.Errorf("the GID table is empty (does the network interface have an address?)")
	}
	return gidEntry{}, fmt.Errorf("no RoCEv2 GID with an IPv4 address among [%s]: give the network interface an IPv4 address, or choose a GID index", strings.Join(seen, ", "))
}

// pickGID returns the entry at the index the operator chose.
func pickGID(entries []gidEntry, index int) (gidEntry, error) {
	for _, e := range entries {
		if e.index == index {
			return e, nil
		}
	}
	return gidEntry{}, fmt.Errorf("GID index %d is empty", index)
}

// parseGIDType reads a sysfs gid_attrs/types/N file: "RoCE v2" or
// "IB/RoCE v1" (the kernel writes the same text for both InfiniBand and
// RoCEv1 GIDs).
func parseGIDType(text string) (roceV2 bool, err error) {
	switch strings.TrimSpace(text) {
	case "RoCE v2":
		return true, nil
	case "IB/RoCE v1":
		return false, nil
	}
	return false, fmt.Errorf("unknown GID type %q", strings.TrimSpace(text))
}
