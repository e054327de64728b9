package ipoib

import (
	"testing"
	"time"
)

// TestUnreachableRateLimit: a flood to a dead address gets a burst of
// errors, then no more than the rate, and the limit recovers with time.
func TestUnreachableRateLimit(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, c := range []struct {
		name  string
		every time.Duration // between packets
		n     int
		want  int // errors sent
	}{
		{"burst at once", 0, 1000, unreachBurst},
		{"flood for a second", time.Millisecond, 1000, unreachBurst + unreachRate - 1},
		{"below the rate", 20 * time.Millisecond, 200, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b tokenBucket
			got := 0
			for k := range c.n {
				if b.take(t0.Add(time.Duration(k)*c.every), unreachRate, unreachBurst) {
					got++
				}
			}
			// The clock's last step may or may not complete one token.
			if got < c.want || got > c.want+1 {
				t.Fatalf("%d errors for %d packets, want %d", got, c.n, c.want)
			}
		})
	}
}
