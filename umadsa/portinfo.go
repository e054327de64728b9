package umadsa

import "github.com/ipoibd/ipoibd/ib"

// PortInfo is what libibumad reports of a port: what the subnet manager
// assigned it, as the kernel shows it in sysfs.
type PortInfo struct {
	CA     string
	Port   int
	LID    uint16 // base LID
	LMC    uint8  // LID mask count: the port answers to LID .. LID+2^LMC-1
	SMLID  uint16
	SMSL   uint8
	State  int // 4: active
	GID    ib.GID
	PKey0  ib.PKey // the P_Key at index 0, which our MADs carry
	Active bool
	// PKeys is the P_Key table, by index, up to its last valid entry:
	// an invalid entry (0) in between keeps its index.
	PKeys []ib.PKey
}

// pkeyTable is the P_Key table t (host order, as libibumad reads sysfs)
// without its trailing invalid entries.
func pkeyTable(t []uint16) []ib.PKey {
	n := len(t)
	for n > 0 && t[n-1]&0x7fff == 0 {
		n--
	}
	out := make([]ib.PKey, n)
	for i, v := range t[:n] {
		out[i] = ib.PKey(v)
	}
	return out
}
