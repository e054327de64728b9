package ibfwd

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ipoibd/ipoibd/softib/wire"
)

// Subnet is the Routes of a subnet of any number of switches as its
// subnet manager programmed them, read back by SMP (ReadSubnet): the
// links between switch ports and CA ports, and each switch's linear and
// multicast forwarding tables and SL-to-VL tables. A packet is walked
// from the switch its sender is attached to, hop by hop, as the switches
// would forward it: by each LFT to the CA port the DLID leads to, or
// along each MFT (a spanning tree) to every member CA port; the VL of
// each hop is that switch's SL-to-VL entry for the pair of ports it
// crosses, and VL15 on any hop drops it there.
//
// The walks are made once, for every CA port and every LID and MLID the
// tables hold, when the Subnet is built: forwarding only looks them up.
type Subnet struct {
	Switches map[uint64]*FabricSwitch // by node GUID
	CAs      map[uint64]CAPort        // by port GUID

	routes map[routeKey][]target // what Route answers, built by Build
}

// FabricSwitch is one switch of a Subnet: its identity, its links and
// the tables its subnet manager programmed.
type FabricSwitch struct {
	GUID  uint64
	LID   uint16
	Name  string
	Links map[int]PortRef      // switch port -> the port at the other end of its link
	LFT   map[uint16]int       // LID -> output port
	MFT   map[uint16][]int     // MLID -> output ports
	SL2VL map[[2]int][16]uint8 // (input port, output port) -> VL by SL
}

// CAPort is a channel adapter port of a Subnet and where it is attached.
type CAPort struct {
	GUID uint64 // port GUID
	LID  uint16 // base LID
	Name string
	At   PortRef // the switch port its link leads to
}

// PortRef names a port of a node: its GUID (a switch's node GUID, a CA's
// port GUID), its number and whether the node is a switch.
type PortRef struct {
	GUID   uint64
	Port   int
	Switch bool
}

// Hop is one switch a packet crosses: the switch's GUID, the port it
// comes in on and the port it leaves on.
type Hop struct {
	Switch  uint64
	In, Out int
}

type routeKey struct {
	from uint64
	dlid uint16
}

type target struct {
	to   uint64
	vl   [16]uint8 // the VL of the last hop by SL; 15 where any hop's is
	hops []Hop     // a unicast walk's switches (Hops); nil for multicast
}

var _ Routes = (*Subnet)(nil)

// Route implements Routes.
func (s *Subnet) Route(out []Delivery, from uint64, dlid uint16, sl uint8) ([]Delivery, bool) {
	ts, ok := s.routes[routeKey{from, dlid}]
	for _, t := range ts {
		out = append(out, Delivery{To: t.to, VL: t.vl[sl&15]})
	}
	return out, ok
}

// ReadSubnet reads a subnet as its subnet manager programmed it: run runs
// an infiniband-diags command on a node of the subnet and returns its
// output. The links come from ibnetdiscover -p; for each switch, the LFT
// from ibroute, the MFT from ibroute -M and, for each linked port, the
// SL-to-VL tables of every input port to it from smpquery sl2vl.
func ReadSubnet(run func(args ...string) (string, error)) (*Subnet, error) {
	out, err := run("ibnetdiscover", "-p")
	if err != nil {
		return nil, err
	}
	s, err := ParseNetDiscover(out)
	if err != nil {
		return nil, err
	}
	for _, sw := range s.Switches {
		lid := strconv.Itoa(int(sw.LID))
		if out, err = run("ibroute", lid); err != nil {
			return nil, err
		}
		if sw.LFT, _, err = ParseLFT(out); err != nil {
			return nil, err
		}
		if out, err = run("ibroute", "-M", lid); err != nil {
			return nil, err
		}
		if sw.MFT, err = ParseMFT(out); err != nil {
			return nil, err
		}
		for p := range sw.Links {
			if out, err = run("smpquery", "sl2vl", lid, strconv.Itoa(p)); err != nil {
				return nil, err
			}
			if err := ParseSL2VLTable(out, sw.SL2VL); err != nil {
				return nil, err
			}
		}
	}
	s.Build()
	return s, nil
}

// Refresh reads the subnet again (ReadSubnet) and hands the new tables
// to f in one swap, as after the subnet manager programmed new MFT
// entries for a join or gave new LIDs: frames already being forwarded
// finish on the old tables, the next ones take the new. The LIDs f's
// registered ports show are updated from it. On an error f keeps the
// tables it has.
func Refresh(f *Forwarder, run func(args ...string) (string, error)) (*Subnet, error) {
	s, err := ReadSubnet(run)
	if err != nil {
		return nil, err
	}
	f.SetRoutes(s)
	for _, p := range f.Ports() {
		if ca, ok := s.CAs[p.GUID]; ok && ca.LID != p.LID {
			p.LID = ca.LID
			if err := f.Register(p); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// ParseNetDiscover reads ibnetdiscover -p's port list: rows "CA 4 1
// 0x0000000000100003 4x SDR - SW 2 2 0x0000000000200000 ( 'h2' - 'sw1' )"
// (type, LID, port, GUID, width, speed, then after "-" the same of the
// port at the other end of the link, then the names), a port with no
// link ending after its speed and the node's name. It returns the
// switches and CA ports with their links; the tables are left empty.
func ParseNetDiscover(out string) (*Subnet, error) {
	s := &Subnet{Switches: map[uint64]*FabricSwitch{}, CAs: map[uint64]CAPort{}}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 4 || (f[0] != "SW" && f[0] != "CA") {
			continue
		}
		me, lid, err := parsePortRef(f[0:4])
		if err != nil {
			return nil, fmt.Errorf("ibfwd: ibnetdiscover row %q: %v", line, err)
		}
		var peer PortRef
		linked := false
		if i := slices.Index(f[4:], "-"); i >= 0 && len(f) >= 4+i+5 {
			if peer, _, err = parsePortRef(f[4+i+1 : 4+i+5]); err != nil {
				return nil, fmt.Errorf("ibfwd: ibnetdiscover row %q: %v", line, err)
			}
			linked = true
		}
		name := ""
		if q := strings.Split(line, "'"); len(q) >= 2 {
			name = q[1]
		}
		if !me.Switch {
			if !linked || !peer.Switch {
				continue // a CA port with no switch at the other end is no part of the switched subnet
			}
			s.CAs[me.GUID] = CAPort{GUID: me.GUID, LID: lid, Name: name, At: peer}
			continue
		}
		sw := s.Switches[me.GUID]
		if sw == nil {
			sw = &FabricSwitch{GUID: me.GUID, LID: lid, Name: name, Links: map[int]PortRef{}, SL2VL: map[[2]int][16]uint8{}}
			s.Switches[me.GUID] = sw
		}
		if linked {
			sw.Links[me.Port] = peer
		}
	}
	if len(s.Switches) == 0 {
		return nil, fmt.Errorf("ibfwd: no switches in ibnetdiscover's output %q", out)
	}
	return s, nil
}

// parsePortRef reads "SW 2 5 0x0000000000200000": type, LID, port, GUID.
func parsePortRef(f []string) (PortRef, uint16, error) {
	lid, err1 := strconv.ParseUint(f[1], 10, 16)
	port, err2 := strconv.ParseUint(f[2], 10, 8)
	guid, err3 := strconv.ParseUint(f[3], 0, 64)
	if (f[0] != "SW" && f[0] != "CA") || err1 != nil || err2 != nil || err3 != nil {
		return PortRef{}, 0, fmt.Errorf("port %q", strings.Join(f, " "))
	}
	return PortRef{GUID: guid, Port: int(port), Switch: f[0] == "SW"}, uint16(lid), nil
}

// Build walks every CA port's packets to every LID and MLID the tables
// hold; call it once the tables are filled (ReadSubnet does), and not
// on a Subnet a Forwarder has: change a copy and swap it in.
func (s *Subnet) Build() {
	s.routes = map[routeKey][]target{}
	lids, mlids := map[uint16]bool{}, map[uint16]bool{}
	for _, sw := range s.Switches {
		for lid := range sw.LFT {
			lids[lid] = true
		}
		for mlid := range sw.MFT {
			mlids[mlid] = true
		}
	}
	for g, ca := range s.CAs {
		for lid := range lids {
			to, vl, hops, ok := s.walk(ca, lid, []Hop{})
			if ok {
				s.routes[routeKey{g, lid}] = []target{{to: to, vl: vl, hops: hops}}
			}
		}
		for mlid := range mlids {
			if ts, ok := s.flood(ca, mlid); ok {
				s.routes[routeKey{g, mlid}] = ts
			}
		}
	}
}

// Trace returns the switches a unicast packet from the CA port from to
// lid crosses, in order, and the CA port it reaches; ok is false when it
// reaches none (no LFT entry, a loop, a dead end). It is what ibtracert
// shows for the same LIDs.
func (s *Subnet) Trace(from uint64, lid uint16) (hops []Hop, to uint64, ok bool) {
	ca, found := s.CAs[from]
	if !found {
		return nil, 0, false
	}
	to, _, hops, ok = s.walk(ca, lid, []Hop{})
	return hops, to, ok
}

// walk follows the LFTs from ca's switch towards lid. It returns the CA
// port reached and the VL of the last hop by SL (15 where a hop maps the
// SL to VL15); hops, if not nil, gets each switch crossed.
func (s *Subnet) walk(ca CAPort, lid uint16, hops []Hop) (to uint64, vl [16]uint8, _ []Hop, ok bool) {
	at := ca.At
	var drop [16]bool
	for range len(s.Switches) + 1 { // a switch crossed twice is a loop
		sw := s.Switches[at.GUID]
		if sw == nil {
			return 0, vl, hops, false
		}
		out, routed := sw.LFT[lid]
		if !routed || out == 0 { // no entry, or the switch's own LID
			return 0, vl, hops, false
		}
		if hops != nil {
			hops = append(hops, Hop{Switch: sw.GUID, In: at.Port, Out: out})
		}
		vl = sw.vls(at.Port, out)
		for sl, v := range vl {
			drop[sl] = drop[sl] || v >= 15
		}
		next, linked := sw.Links[out]
		if !linked {
			return 0, vl, hops, false
		}
		if !next.Switch {
			for sl := range vl {
				if drop[sl] {
					vl[sl] = 15
				}
			}
			return next.GUID, vl, hops, true
		}
		at = next
	}
	return 0, vl, hops, false
}

// flood follows the MFTs from ca's switch: every switch sends the packet
// out of each port its MFT lists for mlid but the one it came in on. ok
// is false when ca's switch has no entry for mlid.
func (s *Subnet) flood(ca CAPort, mlid uint16) (ts []target, ok bool) {
	first := s.Switches[ca.At.GUID]
	if first == nil || len(first.MFT[mlid]) == 0 {
		return nil, false
	}
	type visit struct {
		at   PortRef
		drop [16]bool
	}
	seen := map[uint64]bool{}
	queue := []visit{{at: ca.At}}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		sw := s.Switches[v.at.GUID]
		if sw == nil || seen[sw.GUID] {
			continue // a tree reaches each switch once; a second way in is a loop, and a switch drops nothing twice
		}
		seen[sw.GUID] = true
		for _, out := range sw.MFT[mlid] {
			next, linked := sw.Links[out]
			if out == v.at.Port || !linked {
				continue
			}
			vl := sw.vls(v.at.Port, out)
			drop := v.drop
			for sl, x := range vl {
				drop[sl] = drop[sl] || x >= 15
			}
			if next.Switch {
				queue = append(queue, visit{at: next, drop: drop})
				continue
			}
			if next.GUID == ca.GUID {
				continue
			}
			for sl := range vl {
				if drop[sl] {
					vl[sl] = 15
				}
			}
			ts = append(ts, target{to: next.GUID, vl: vl})
		}
	}
	return ts, true
}

// vls is the switch's SL-to-VL table from port in to port out: VL0 for
// every SL where it has none.
func (sw *FabricSwitch) vls(in, out int) [16]uint8 { return sw.SL2VL[[2]int{in, out}] }

// Hops implements HopRoutes: the switches a unicast packet from the CA
// port from to lid crosses, as walked when the tables were read (the
// slice is the Subnet's: not to be changed). ok is false for an MLID or
// a LID with no route.
func (s *Subnet) Hops(from uint64, lid uint16) (_ []Hop, ok bool) {
	ts := s.routes[routeKey{from, lid}]
	if wire.IsMulticastLID(lid) || len(ts) != 1 {
		return nil, false
	}
	return ts[0].hops, true
}

// Unicast returns the CA port a packet from the CA port from to lid
// reaches, for tests and tools (Route is what forwarding uses).
func (s *Subnet) Unicast(from uint64, lid uint16) (uint64, bool) {
	ts, ok := s.routes[routeKey{from, lid}]
	if !ok || wire.IsMulticastLID(lid) || len(ts) != 1 {
		return 0, false
	}
	return ts[0].to, true
}
