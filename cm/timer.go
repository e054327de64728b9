package cm

import "time"

// MaxTimerCode is the largest value of the 5-bit CM time fields.
const MaxTimerCode = 31

// timerUnit is 4.096 µs, the unit every CM time field is a power-of-two
// multiple of.
const timerUnit = 4096 * time.Nanosecond

// TimeoutDuration returns the time a 5-bit CM timer code stands for:
// 4.096 µs × 2^code, exactly (code 31 is about 2.4 hours). Codes above 31
// cannot come off the wire and are treated as 31. For a QP's Local ACK
// Timeout, code 0 means "infinite"; callers handle that themselves.
func TimeoutDuration(code uint8) time.Duration {
	return timerUnit << min(code, MaxTimerCode)
}
