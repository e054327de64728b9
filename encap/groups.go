package encap

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net/netip"
	"os"
	"strings"
)

// KernelGroups returns the IP multicast groups the kernel has joined on
// interface ifname (for its own use or for sockets), from igmp and igmp6
// in procNet: /proc/net for the process's network namespace,
// /proc/thread-self/net for the calling thread's. The UD endpoint joins
// their MGIDs so that the groups' traffic reaches the interface.
func KernelGroups(procNet, ifname string) ([]netip.Addr, error) {
	var groups []netip.Addr
	for _, f := range []struct {
		path  string
		parse func(io.Reader, string) ([]netip.Addr, error)
	}{
		{procNet + "/igmp", ParseIGMP},
		{procNet + "/igmp6", ParseIGMP6},
	} {
		file, err := os.Open(f.path)
		if err != nil {
			if os.IsNotExist(err) {
				continue // no IPv6 (or IPv4) in this kernel
			}
			return nil, err
		}
		g, err := f.parse(file, ifname)
		file.Close()
		if err != nil {
			return nil, err
		}
		groups = append(groups, g...)
	}
	return groups, nil
}

// ParseIGMP reads /proc/net/igmp: a line per device ("Idx Device : ...")
// followed by a tab-indented line per group, the group in host-order hex
// (little-endian on the machines we run on).
func ParseIGMP(r io.Reader, ifname string) ([]netip.Addr, error) {
	var groups []netip.Addr
	in := false
	s := bufio.NewScanner(r)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "\t") {
			f := strings.Fields(line)
			in = len(f) >= 2 && f[1] == ifname
			continue
		}
		if !in {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 || len(f[0]) != 8 {
			continue
		}
		b, err := hex.DecodeString(f[0])
		if err != nil {
			continue
		}
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], binary.LittleEndian.Uint32(b))
		groups = append(groups, netip.AddrFrom4(a))
	}
	return groups, s.Err()
}

// ParseIGMP6 reads /proc/net/igmp6: "idx device group users flags timer",
// the group as 32 hex digits.
func ParseIGMP6(r io.Reader, ifname string) ([]netip.Addr, error) {
	var groups []netip.Addr
	s := bufio.NewScanner(r)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 3 || f[1] != ifname || len(f[2]) != 32 {
			continue
		}
		b, err := hex.DecodeString(f[2])
		if err != nil {
			continue
		}
		groups = append(groups, netip.AddrFrom16([16]byte(b)))
	}
	return groups, s.Err()
}
