package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestTightenGC: the daemon collects at daemonGCPercent unless the
// operator set GOGC, which the runtime read at start and which stays.
func TestTightenGC(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gogc    string // "": unset
		runtime int    // what the runtime made of it at start
		want    int
	}{
		{"GOGC unset", "", 100, daemonGCPercent},
		{"the operator's GOGC", "200", 200, 200},
		{"the operator's GOGC=off", "off", -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", tc.gogc) // restored after the test
			if tc.gogc == "" {
				os.Unsetenv("GOGC")
			}
			old := debug.SetGCPercent(tc.runtime)
			defer debug.SetGCPercent(old)
			tightenGC()
			if got := debug.SetGCPercent(tc.runtime); got != tc.want {
				t.Errorf("GC percent %d, want %d", got, tc.want)
			}
		})
	}
}
