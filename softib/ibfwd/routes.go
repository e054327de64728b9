package ibfwd

import (
	"fmt"
	"maps"
	"slices"
)

// Routes are the forwarding tables of the subnet, as a subnet manager
// programs them. Implementations are read from the forwarding goroutine
// and must not be changed after they are handed to Forwarder.SetRoutes:
// swap in a new one instead.
type Routes interface {
	// Unicast returns the port (by port GUID) a packet to lid leaves on.
	Unicast(lid uint16) (guid uint64, ok bool)
	// Multicast returns the ports a packet to mlid leaves on; none when
	// the group has no entry.
	Multicast(mlid uint16) []uint64
	// VL returns the virtual lane a packet of service level sl travels
	// on from port from to port to (GUIDs); 15 means it is dropped.
	VL(sl uint8, from, to uint64) uint8
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

// Unicast implements Routes.
func (s *Static) Unicast(lid uint16) (uint64, bool) {
	g, ok := s.LFT[lid]
	return g, ok
}

// Multicast implements Routes.
func (s *Static) Multicast(mlid uint16) []uint64 { return s.MFT[mlid] }

// VL implements Routes.
func (s *Static) VL(sl uint8, _, _ uint64) uint8 { return s.SL2VL[sl&15] }
