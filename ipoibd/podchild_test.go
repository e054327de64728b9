package main

import (
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ipoib"
)

// A pod's child tells its peers apart by UD QPN alone (they may share a GID), and without --idle-timeout reaps idle
// connections as the kernel's stale timer does; an operator's timeout
// stands.
func TestPodConfig(t *testing.T) {
	for _, tc := range []struct {
		name     string
		idle     time.Duration
		wantIdle time.Duration
	}{
		{"no --idle-timeout", 0, 512 * time.Second},
		{"--idle-timeout 30s", 30 * time.Second, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := podConfig(ipoib.Config{Name: "net1", IdleTimeout: tc.idle})
			if !got.SharedGIDs || got.IdleTimeout != tc.wantIdle || got.Name != "net1" {
				t.Errorf("podConfig: shared %v idle %v name %q", got.SharedGIDs, got.IdleTimeout, got.Name)
			}
		})
	}
}
