package verbs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ipoibd/ipoibd/ib"
)

// sysfs reads what the kernel publishes about RDMA devices under a sysfs
// mount ("/sys"; tests use a fake tree).
type sysfs string

func (s sysfs) portDir(dev string, port int) string {
	return filepath.Join(string(s), "class", "infiniband", dev, "ports", strconv.Itoa(port))
}

// gidType reads whether GID index idx of a port is RoCEv2, for kernels or
// libraries without ibv_query_gid_table.
func (s sysfs) gidType(dev string, port, idx int) (bool, error) {
	b, err := os.ReadFile(filepath.Join(s.portDir(dev, port), "gid_attrs", "types", strconv.Itoa(idx)))
	if err != nil {
		return false, err
	}
	return parseGIDType(string(b))
}

// netdevIndex returns the interface index of a RoCE GID's network device,
// for kernels without ibv_query_gid_table.
func (s sysfs) netdevIndex(dev string, port, idx int) (int, error) {
	b, err := os.ReadFile(filepath.Join(s.portDir(dev, port), "gid_attrs", "ndevs", strconv.Itoa(idx)))
	if err != nil {
		return 0, err
	}
	name := strings.TrimSpace(string(b))
	b, err = os.ReadFile(filepath.Join(string(s), "class", "net", name, "ifindex"))
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("ifindex of %s: %w", name, err)
	}
	return n, nil
}

// hwCounters reads a port's hw_counters directory (RoCE: sent_pkts,
// rcvd_pkts, ...), named hw_*; nil if the port has none.
func (s sysfs) hwCounters(dev string, port int) []ib.Counter {
	return readCounterDir(filepath.Join(s.portDir(dev, port), "hw_counters"), "hw_")
}

// readCounterDir reads every file of dir holding one unsigned number,
// named prefix+file name, in name order (os.ReadDir sorts). Files that are
// missing, unreadable or not numbers are skipped: counters are best effort.
func readCounterDir(dir, prefix string) []ib.Counter {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []ib.Counter
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			continue
		}
		out = append(out, ib.Counter{Name: prefix + e.Name(), Value: v})
	}
	return out
}

// portActive reports whether a port's state is ACTIVE.
func (s sysfs) portActive(dev string, port int) bool {
	b, err := os.ReadFile(filepath.Join(s.portDir(dev, port), "state"))
	return err == nil && parsePortActive(string(b))
}

// parsePortActive reads a port's sysfs state file, e.g. "4: ACTIVE".
func parsePortActive(s string) bool {
	return strings.TrimSpace(s) == "4: ACTIVE"
}
