package wire

import (
	"testing"
	"time"
)

func TestPSNWrap(t *testing.T) {
	if got := PSN(0xffffff).Add(1); got != 0 {
		t.Errorf("0xFFFFFF + 1 = %#x", got)
	}
	if got := PSN(0xffffff).Next(); got != 0 {
		t.Errorf("Next(0xFFFFFF) = %#x", got)
	}
	if got := PSN(0xfffff0).Add(0x20); got != 0x10 {
		t.Errorf("0xFFFFF0 + 0x20 = %#x", got)
	}
	if got := PSN(0).Prev(); got != 0xffffff {
		t.Errorf("Prev(0) = %#x", got)
	}
	if got := Distance(0xfffffe, 1); got != 3 {
		t.Errorf("Distance(0xFFFFFE, 1) = %d", got)
	}
	if !PSN(0xffffff).Valid() || PSN(0x1000000).Valid() {
		t.Error("Valid")
	}
}

func TestPSNCompare(t *testing.T) {
	tests := []struct {
		a, b PSN
		want int
	}{
		{0, 0, 0},
		{1, 0, 1},
		{0, 1, -1},
		{0, 0xffffff, 1}, // wrap: 0 follows 0xFFFFFF
		{0xffffff, 0, -1},
		{0x10, 0xfffff0, 1},
		{0x7fffff, 0, 1},  // 2^23 - 1 ahead: after
		{0x800001, 0, -1}, // more than 2^23 ahead: behind
		{0x800000, 0, -1}, // exactly 2^23 apart: each before the other (rxe rule)
		{0, 0x800000, -1}, //
		{0x123456, 0x123456, 0},
	}
	for _, tt := range tests {
		if got := Compare(tt.a, tt.b); got != tt.want {
			t.Errorf("Compare(%#x, %#x) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if tt.a.Before(tt.b) != (tt.want < 0) || tt.a.After(tt.b) != (tt.want > 0) {
			t.Errorf("Before/After(%#x, %#x) disagree with %d", tt.a, tt.b, tt.want)
		}
	}
}

func TestLocalACKTimeout(t *testing.T) {
	tests := []struct {
		code uint8
		want time.Duration
	}{
		{0, 0}, // infinite
		{1, 8192 * time.Nanosecond},
		{14, 67108864 * time.Nanosecond}, // 4.096 µs × 16384 ≈ 67 ms
		{18, 4096 * time.Nanosecond << 18},
		{31, 4096 * time.Nanosecond << 31}, // ≈ 2.4 h
		{32, 4096 * time.Nanosecond << 31}, // beyond the 5-bit field: clamped
		{255, 4096 * time.Nanosecond << 31},
	}
	for _, tt := range tests {
		if got := LocalACKTimeout(tt.code); got != tt.want {
			t.Errorf("LocalACKTimeout(%d) = %v, want %v", tt.code, got, tt.want)
		}
	}
}
