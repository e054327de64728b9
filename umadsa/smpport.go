package umadsa

import (
	"encoding/binary"
	"fmt"
)

// SMP attributes a port's own SMA answers (IBA 14.2.5).
const (
	attrPortInfo    = 0x0015
	attrPKeyTable   = 0x0016
	smpDataLen      = 64
	pkeysPerBlock   = smpDataLen / 2
	portStateActive = 4
)

// parsePortInfo reads the SMA's PortInfo attribute (64 octets) and the
// first block of its P_Key table (32 entries) into a PortInfo: what
// umad_get_port gives from sysfs, but as the SM left it now. Short input
// is an error, never a panic: it came off the fabric.
func parsePortInfo(pi, pkeys []byte) (PortInfo, error) {
	if len(pi) < smpDataLen || len(pkeys) < smpDataLen {
		return PortInfo{}, fmt.Errorf("umadsa: PortInfo of %d octets and P_Key block of %d, want %d", len(pi), len(pkeys), smpDataLen)
	}
	var p PortInfo
	copy(p.GID[:8], pi[8:16])
	p.LID = binary.BigEndian.Uint16(pi[16:])
	p.SMLID = binary.BigEndian.Uint16(pi[18:])
	p.State = int(pi[32] & 0x0f)
	p.Active = p.State == portStateActive
	p.LMC = pi[34] & 0x07
	p.SMSL = pi[36] & 0x0f // MasterSMSL, the low nibble after NeighborMTU
	t := make([]uint16, pkeysPerBlock)
	for i := range t {
		t[i] = binary.BigEndian.Uint16(pkeys[2*i:])
	}
	p.PKeys = pkeyTable(t)
	if len(p.PKeys) > 0 {
		p.PKey0 = p.PKeys[0]
	}
	return p, nil
}
