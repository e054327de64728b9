package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	current "github.com/containernetworking/cni/pkg/types/100"
)

// An attachment (container ID and interface name) keeps its IPAM result in
// DATADIR/NETWORK/CONTAINERID@IFNAME.json from ADD to DEL: a daemon that
// restarts takes the pods' children with it, and the ADD that makes one
// again must give the pod the addresses it had, which IPAM refuses to
// allocate twice. Container IDs have no '@', so the name splits back.

func statePath(n *NetConf, containerID, ifname string) string {
	return filepath.Join(n.DataDir, n.Name, containerID+"@"+ifname+".json")
}

// loadState returns the attachment's IPAM result, or nil if none is kept.
func loadState(n *NetConf, containerID, ifname string) (*current.Result, error) {
	b, err := os.ReadFile(statePath(n, containerID, ifname))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r := &current.Result{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("attachment state %s: %w", statePath(n, containerID, ifname), err)
	}
	return r, nil
}

func saveState(n *NetConf, containerID, ifname string, r *current.Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	path := statePath(n, containerID, ifname)
	tmp := path + ".tmp"
	// The network's directory goes with its last attachment
	// (removeState), maybe another ADD's between our MkdirAll and write:
	// then it is made again.
	for range 3 {
		if err = os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err = os.WriteFile(tmp, b, 0o600); !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// removeState removes the attachment's state, and the network's
// directory with its last: a failed ADD or the last DEL leaves nothing in
// dataDir.
func removeState(n *NetConf, containerID, ifname string) error {
	path := statePath(n, containerID, ifname)
	_ = os.Remove(path + ".tmp")
	err := os.Remove(path)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	// Not empty (ENOTEMPTY, EEXIST) or gone: as it should be.
	_ = os.Remove(filepath.Dir(path))
	return err
}

// keptAttachments lists the attachments with kept state, for GC.
func keptAttachments(n *NetConf) ([][2]string, error) {
	entries, err := os.ReadDir(filepath.Join(n.DataDir, n.Name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for _, e := range entries {
		cid, ifname, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".json"), "@")
		if ok && strings.HasSuffix(e.Name(), ".json") {
			out = append(out, [2]string{cid, ifname})
		}
	}
	return out, nil
}
