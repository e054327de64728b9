package ibfwd

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ParsePort reads a port as the command takes it: GUID,LID[,LMC]@addr:port
// (GUID and LID in hex with 0x or in decimal), e.g.
// 0x0002c90300000001,0x11@10.77.0.1:4791.
func ParsePort(s string) (Port, error) {
	ids, addr, ok := strings.Cut(s, "@")
	if !ok {
		return Port{}, fmt.Errorf("ibfwd: port %q: want GUID,LID[,LMC]@addr:port", s)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return Port{}, fmt.Errorf("ibfwd: port %q: %w", s, err)
	}
	f := strings.Split(ids, ",")
	if len(f) < 2 || len(f) > 3 {
		return Port{}, fmt.Errorf("ibfwd: port %q: want GUID,LID[,LMC]@addr:port", s)
	}
	guid, err := strconv.ParseUint(f[0], 0, 64)
	if err != nil || guid == 0 {
		return Port{}, fmt.Errorf("ibfwd: port %q: GUID %q", s, f[0])
	}
	lid, err := strconv.ParseUint(f[1], 0, 16)
	if err != nil {
		return Port{}, fmt.Errorf("ibfwd: port %q: LID %q", s, f[1])
	}
	var lmc uint64
	if len(f) == 3 {
		if lmc, err = strconv.ParseUint(f[2], 0, 3); err != nil {
			return Port{}, fmt.Errorf("ibfwd: port %q: LMC %q", s, f[2])
		}
	}
	return Port{GUID: guid, LID: uint16(lid), LMC: uint8(lmc), Addr: ap}, nil
}

// ParseGroup reads a multicast table entry: MLID=GUID,GUID,...
func ParseGroup(s string) (mlid uint16, guids []uint64, err error) {
	l, members, ok := strings.Cut(s, "=")
	if !ok {
		return 0, nil, fmt.Errorf("ibfwd: group %q: want MLID=GUID[,GUID]", s)
	}
	v, err := strconv.ParseUint(l, 0, 16)
	if err != nil {
		return 0, nil, fmt.Errorf("ibfwd: group %q: MLID %q", s, l)
	}
	for _, g := range strings.Split(members, ",") {
		guid, err := strconv.ParseUint(g, 0, 64)
		if err != nil {
			return 0, nil, fmt.Errorf("ibfwd: group %q: GUID %q", s, g)
		}
		guids = append(guids, guid)
	}
	return uint16(v), guids, nil
}

// ParseSL2VL reads SL=VL pairs, comma-separated, e.g. "0=15,1=1", into m.
func ParseSL2VL(s string, m *[16]uint8) error {
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		sl, err1 := strconv.ParseUint(k, 10, 8)
		vl, err2 := strconv.ParseUint(v, 10, 8)
		if !ok || err1 != nil || err2 != nil || sl > 15 || vl > 15 {
			return fmt.Errorf("ibfwd: SL-to-VL %q: want SL=VL with both 0-15", kv)
		}
		m[sl] = uint8(vl)
	}
	return nil
}
