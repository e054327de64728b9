package ibfwd

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"

	"github.com/ipoibd/ipoibd/softib/wire"
)

// Switch is the Routes of a subnet of one switch as its subnet manager
// programmed it, read back by SMP the way infiniband-diags' ibroute and
// smpquery read them: the linear forwarding table (LID to output port,
// and from its destination column the CA port each LID leads to), the
// multicast forwarding table (MLID to output ports) and the SL-to-VL
// tables of each pair of ports. A LID that leads to no CA port (the
// switch's own) routes nowhere.
type Switch struct {
	LFT   map[uint16]int       // LID -> output port
	Dest  map[uint16]uint64    // LID -> the CA port GUID it leads to
	MFT   map[uint16][]int     // MLID -> output ports
	SL2VL map[[2]int][16]uint8 // (input port, output port) -> VL by SL

	ca    map[int]uint64      // switch port -> CA port GUID on it, built by Build
	port  map[uint64]int      // CA port GUID -> switch port
	mcast map[uint16][]uint64 // MLID -> CA port GUIDs
}

var _ Routes = (*Switch)(nil)

// Build derives the lookups forwarding uses; call it once the tables are
// filled.
// A switch port leads to a CA port when every LID it forwards leads
// there; a port that leads to more (a link to another switch) is none.
func (s *Switch) Build() {
	s.ca, s.port = map[int]uint64{}, map[uint64]int{}
	many := map[int]bool{}
	for lid, g := range s.Dest {
		p := s.LFT[lid]
		if old, ok := s.ca[p]; ok && old != g {
			many[p] = true
		}
		s.ca[p] = g
	}
	for p := range many {
		delete(s.ca, p)
	}
	for p, g := range s.ca {
		s.port[g] = p
	}
	s.mcast = map[uint16][]uint64{}
	for mlid, ports := range s.MFT {
		for _, p := range ports {
			if g, ok := s.ca[p]; ok {
				s.mcast[mlid] = append(s.mcast[mlid], g)
			}
		}
	}
}

// Unicast returns the CA port a packet to lid leaves to.
func (s *Switch) Unicast(lid uint16) (uint64, bool) {
	g, ok := s.Dest[lid]
	return g, ok
}

// Multicast returns the CA ports a packet to mlid leaves to.
func (s *Switch) Multicast(mlid uint16) []uint64 { return s.mcast[mlid] }

// Route implements Routes: one switch, one hop.
func (s *Switch) Route(out []Delivery, from uint64, dlid uint16, sl uint8) ([]Delivery, bool) {
	if wire.IsMulticastLID(dlid) {
		m := s.mcast[dlid]
		for _, g := range m {
			if g != from {
				out = append(out, Delivery{To: g, VL: s.VL(sl, from, g)})
			}
		}
		return out, len(m) > 0
	}
	g, ok := s.Dest[dlid]
	if !ok {
		return out, false
	}
	return append(out, Delivery{To: g, VL: s.VL(sl, from, g)}), true
}

// VL returns the SL-to-VL table of the pair of switch ports
// the packet goes between; VL0 where the SM programmed none.
func (s *Switch) VL(sl uint8, from, to uint64) uint8 {
	in, ok1 := s.port[from]
	out, ok2 := s.port[to]
	if !ok1 || !ok2 {
		return 0
	}
	t, ok := s.SL2VL[[2]int{in, out}]
	if !ok {
		return 0
	}
	return t[sl&15]
}

// ReadSwitch reads the tables of the switch with LID swLID: run runs an
// infiniband-diags command on a node of the subnet (ibroute, smpquery)
// and returns its output.
func ReadSwitch(run func(args ...string) (string, error), swLID string) (*Switch, error) {
	out, err := run("ibroute", swLID)
	if err != nil {
		return nil, err
	}
	s := &Switch{SL2VL: map[[2]int][16]uint8{}}
	if s.LFT, s.Dest, err = ParseLFT(out); err != nil {
		return nil, err
	}
	if out, err = run("ibroute", "-M", swLID); err != nil {
		return nil, err
	}
	if s.MFT, err = ParseMFT(out); err != nil {
		return nil, err
	}
	s.Build()
	for p := range s.ca {
		if out, err = run("smpquery", "sl2vl", swLID, strconv.Itoa(p)); err != nil {
			return nil, err
		}
		if err := ParseSL2VLTable(out, s.SL2VL); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ParseLFT reads ibroute's unicast dump: rows "0x0003 002 : (Channel
// Adapter portguid 0x0000000000100003: 'h2')". It returns the output port
// of each LID and, for the LIDs of channel adapters, their port GUIDs.
func ParseLFT(out string) (lft map[uint16]int, dest map[uint16]uint64, err error) {
	lft, dest = map[uint16]int{}, map[uint16]uint64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || !strings.HasPrefix(f[0], "0x") || f[2] != ":" {
			continue
		}
		lid, err1 := strconv.ParseUint(f[0], 0, 16)
		port, err2 := strconv.ParseUint(f[1], 10, 8)
		if err1 != nil || err2 != nil {
			return nil, nil, fmt.Errorf("ibfwd: ibroute row %q", sc.Text())
		}
		lft[uint16(lid)] = int(port)
		line := sc.Text()
		if i := strings.Index(line, "Channel Adapter portguid "); i >= 0 {
			g := strings.TrimSuffix(strings.Fields(line[i+len("Channel Adapter portguid "):])[0], ":")
			guid, err := strconv.ParseUint(g, 0, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("ibfwd: ibroute row %q: GUID %q", line, g)
			}
			dest[uint16(lid)] = guid
		}
	}
	if len(lft) == 0 {
		return nil, nil, fmt.Errorf("ibfwd: no LFT rows in ibroute's output %q", out)
	}
	return lft, dest, nil
}

// ParseMFT reads ibroute -M's multicast dump: a header "Ports: 0 1 2 ..."
// and rows "0xc000      x   x" with an x under each member port.
func ParseMFT(out string) (map[uint16][]int, error) {
	mft := map[uint16][]int{}
	var header string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, "Ports:") {
			header = l
			continue
		}
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(f[0], "0x") {
			continue
		}
		mlid, err := strconv.ParseUint(f[0], 0, 16)
		if err != nil || header == "" {
			return nil, fmt.Errorf("ibfwd: ibroute -M row %q", l)
		}
		// A port number ends at column i in the header; an x in that
		// column of the row makes the port a member.
		var ports []int
		for i := 0; i < len(header) && i < len(l); i++ {
			if l[i] != 'x' || header[i] < '0' || header[i] > '9' {
				continue
			}
			j := strings.LastIndexByte(header[:i+1], ' ')
			p, err := strconv.Atoi(header[j+1 : i+1])
			if err != nil {
				return nil, fmt.Errorf("ibfwd: ibroute -M row %q: column %d", l, i)
			}
			ports = append(ports, p)
		}
		mft[uint16(mlid)] = ports
	}
	return mft, nil
}

// ParseSL2VLTable reads smpquery sl2vl's rows "ports: in  2, out  1: |
// 0| 1| ...| 7|" into t.
func ParseSL2VLTable(out string, t map[[2]int][16]uint8) error {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "ports: in") {
			continue
		}
		head, cells, ok := strings.Cut(l, ": |")
		var in, outp int
		if _, err := fmt.Sscanf(strings.ReplaceAll(head, " ", ""), "ports:in%d,out%d", &in, &outp); !ok || err != nil {
			return fmt.Errorf("ibfwd: smpquery sl2vl row %q", l)
		}
		f := strings.Split(strings.TrimSuffix(cells, "|"), "|")
		if len(f) != 16 {
			return fmt.Errorf("ibfwd: smpquery sl2vl row %q: %d SLs", l, len(f))
		}
		var row [16]uint8
		for sl, c := range f {
			vl, err := strconv.ParseUint(strings.TrimSpace(c), 10, 4)
			if err != nil {
				return fmt.Errorf("ibfwd: smpquery sl2vl row %q: SL %d", l, sl)
			}
			row[sl] = uint8(vl)
		}
		t[[2]int{in, outp}] = row
	}
	return nil
}
