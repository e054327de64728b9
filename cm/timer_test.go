package cm

import (
	"testing"
	"time"
)

func TestTimeoutDuration(t *testing.T) {
	tests := []struct {
		code uint8
		want time.Duration
	}{
		{0, 4096 * time.Nanosecond},
		{1, 8192 * time.Nanosecond},
		{8, 1048576 * time.Nanosecond},        // about 1 ms
		{18, 1073741824 * time.Nanosecond},    // about 1.07 s
		{20, 4294967296 * time.Nanosecond},    // Linux IPoIB's CM response timeout, 4.29 s
		{31, 8796093022208 * time.Nanosecond}, // about 2.4 h
		{32, 8796093022208 * time.Nanosecond}, // not a wire value: as 31
		{255, 8796093022208 * time.Nanosecond},
	}
	for _, tt := range tests {
		if got := TimeoutDuration(tt.code); got != tt.want {
			t.Errorf("TimeoutDuration(%d) = %v, want %v", tt.code, got, tt.want)
		}
	}
}
