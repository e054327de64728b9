package sa

import "github.com/ipoibd/ipoibd/ib"

// Selector qualifies the MTU, rate and packet lifetime of a record: the
// top two bits of their octet (IBA 15.2.5.16; UMAD_SA_SELECTOR_*).
type Selector uint8

// Selectors.
const (
	GreaterThan Selector = 0
	LessThan    Selector = 1
	Exactly     Selector = 2
	Largest     Selector = 3 // MTU and rate: the largest available; lifetime: the smallest
)

func (s Selector) String() string {
	return [...]string{"greater than", "less than", "exactly", "largest/smallest available"}[s&3]
}

// Selected is a selector and a 6-bit value (MTU code, rate code, or
// packet lifetime exponent) sharing one octet.
type Selected struct {
	Selector Selector
	Value    uint8
}

func (v Selected) octet() uint8 { return uint8(v.Selector)<<6 | v.Value }

func selected(b uint8) Selected { return Selected{Selector(b >> 6), b & 0x3f} }

func (v Selected) check(c *checker, name string) {
	c.width(name+"Selector", uint64(v.Selector), 2)
	c.width(name, uint64(v.Value), 6)
}

// MTU returns the Value as an IB MTU code.
func (v Selected) MTU() ib.MTU { return ib.MTU(v.Value) }

// Rate codes of PathRecord and MCMemberRecord (IBA Table 226). The code is
// not monotonic in speed (5 is 5 Gb/s, 3 is 10): compare with RateGbps.
var rateGbps = map[uint8]float64{
	2: 2.5, 3: 10, 4: 30, 5: 5, 6: 20, 7: 40, 8: 60, 9: 80, 10: 120,
	11: 14, 12: 56, 13: 112, 14: 168, 15: 25, 16: 100, 17: 200, 18: 300,
	19: 28, 20: 50, 21: 400, 22: 600,
}

// RateGbps is the speed a rate code names, 0 for an unknown code.
func RateGbps(code uint8) float64 { return rateGbps[code] }

// checker validates fields before an encoder writes, keeping the first
// failure (as cm's does).
type checker struct {
	format string
	err    error
}

func (c *checker) width(field string, v uint64, bits uint) {
	if c.err == nil && v>>bits != 0 {
		c.err = ib.ErrField(c.format, field, "%#x does not fit in %d bits", v, bits)
	}
}

func bit(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
