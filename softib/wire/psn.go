package wire

import "time"

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24.
type PSN uint32

const (
	// PSNMask keeps the 24 bits a PSN has on the wire.
	PSNMask PSN = 0xffffff
	// PSNWindow is half the PSN space: a PSN further ahead than this is
	// taken to be behind (Compare).
	PSNWindow = 1 << 23
)

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p&^PSNMask == 0 }

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return (p + PSN(n)) & PSNMask }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return p.Add(1) }

// Prev returns p-1 modulo 2^24.
func (p PSN) Prev() PSN { return (p - 1) & PSNMask }

// Compare orders PSNs in the circular 24-bit space the way rxe's
// psn_compare does: diff = int32((a-b)<<8), so a is after b when b lies
// less than 2^23 behind it. It returns -1, 0 or +1. Two PSNs exactly 2^23
// apart are each "before" the other; a requester never has that many
// packets outstanding.
func Compare(a, b PSN) int {
	d := int32(uint32(a-b) << 8)
	switch {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}

// Before reports whether p comes before q.
func (p PSN) Before(q PSN) bool { return Compare(p, q) < 0 }

// After reports whether p comes after q.
func (p PSN) After(q PSN) bool { return Compare(p, q) > 0 }

// Distance returns how many PSNs b is ahead of a, modulo 2^24.
func Distance(a, b PSN) uint32 { return uint32((b - a) & PSNMask) }

// LocalACKTimeout decodes a QP's local ACK timeout code (5 bits): 4.096 µs
// × 2^code. Code 0 means the timer is disabled ("infinite") and is returned
// as 0, so callers must treat a zero Duration as "never time out". Codes
// above 31 are taken as 31 rather than wrapped to a short timeout.
func LocalACKTimeout(code uint8) time.Duration {
	if code == 0 {
		return 0
	}
	return 4096 * time.Nanosecond << min(code, 31)
}
