package ibfwd

import (
	"fmt"
	"maps"
	"slices"

	"github.com/ipoibd/ipoibd/softib/wire"
)

// Routes are the forwarding tables of the subnet, as a subnet manager
// programs them. Implementations are read from the forwarding goroutine
// and must not be changed after they are handed to Forwarder.SetRoutes:
// swap in a new one instead.
type Routes interface {
	// Route appends to out where a packet of service level sl that the
	// CA port from (a port GUID) sends to dlid arrives: one CA port for a
	// unicast LID, every member CA port but the sender for an MLID, each
	// with the VL it arrives on (15 when a hop on the way maps the SL to
	// VL15, where a switch drops it). ok is false when the tables have
	// no entry: an unrouted LID (no LFT entry, a loop or a dead end on the
	// way) or an MLID with no MFT entry at the sender's switch. It must
	// not allocate once out has room.
	Route(out []Delivery, from uint64, dlid uint16, sl uint8) (_ []Delivery, ok bool)
}

// Delivery is one copy of a packet arriving at a CA port.
type Delivery struct {
	To uint64 // the CA port's GUID
	VL uint8  // the VL of its last hop; 15: dropped on the way
}

// Static is a Routes given as tables.
type Static struct {
	LFT   map[uint16]uint64   // unicast LID -> port GUID
	MFT   map[uint16][]uint64 // MLID -> port GUIDs
	SL2VL [16]uint8           // SL -> VL, the same between all ports; the zero value sends every SL on VL0
}

var _ Routes = (*Static)(nil)

// NewStatic returns empty tables with every SL on VL0.
func NewStatic() *Static {
	return &Static{LFT: map[uint16]uint64{}, MFT: map[uint16][]uint64{}}
}

// AddPort routes the 2^lmc LIDs from lid on to the port, as the SM does
// for a port it gave that LID and LMC.
func (s *Static) AddPort(guid uint64, lid uint16, lmc uint8) error {
	if lid == 0 || lmc > 7 || int(lid)+1<<lmc-1 >= 0xc000 {
		return fmt.Errorf("ibfwd: LID %#x with LMC %d is no unicast LID range", lid, lmc)
	}
	for i := range uint16(1) << lmc {
		s.LFT[lid+i] = guid
	}
	return nil
}

// AddGroup makes the ports members of the group with this MLID.
func (s *Static) AddGroup(mlid uint16, guids ...uint64) error {
	if mlid < 0xc000 || mlid == 0xffff {
		return fmt.Errorf("ibfwd: %#x is not a multicast LID", mlid)
	}
	for _, g := range guids {
		if !slices.Contains(s.MFT[mlid], g) {
			s.MFT[mlid] = append(s.MFT[mlid], g)
		}
	}
	return nil
}

// Clone returns a copy to change and hand to SetRoutes.
func (s *Static) Clone() *Static {
	c := &Static{LFT: maps.Clone(s.LFT), MFT: map[uint16][]uint64{}, SL2VL: s.SL2VL}
	for k, v := range s.MFT {
		c.MFT[k] = slices.Clone(v)
	}
	return c
}

// Unicast returns the port a packet to lid leaves on.
func (s *Static) Unicast(lid uint16) (uint64, bool) {
	g, ok := s.LFT[lid]
	return g, ok
}

// Multicast returns the member ports of mlid.
func (s *Static) Multicast(mlid uint16) []uint64 { return s.MFT[mlid] }

// VL returns the VL of sl: the same between all ports.
func (s *Static) VL(sl uint8, _, _ uint64) uint8 { return s.SL2VL[sl&15] }

// Route implements Routes: the ports of the tables, reached in one hop.
func (s *Static) Route(out []Delivery, from uint64, dlid uint16, sl uint8) ([]Delivery, bool) {
	vl := s.SL2VL[sl&15]
	if wire.IsMulticastLID(dlid) {
		m := s.MFT[dlid]
		for _, g := range m {
			if g != from {
				out = append(out, Delivery{To: g, VL: vl})
			}
		}
		return out, len(m) > 0
	}
	g, ok := s.LFT[dlid]
	if !ok {
		return out, false
	}
	return append(out, Delivery{To: g, VL: vl}), true
}
