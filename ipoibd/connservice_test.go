package main

import (
	"strings"
	"testing"

	"github.com/ipoibd/ipoibd/ipoib"
)

// TestChooseConnService: which connection service runs and whether
// connected mode is advertised, for every combination that matters; never
// the kernel CM advertising connected mode unless the operator said every
// peer is ipoibd.
func TestChooseConnService(t *testing.T) {
	loaded := func() (bool, []string) { return true, []string{"rdma_cm", "ib_ipoib"} }
	unloaded := func() (bool, []string) { return false, nil }
	for _, tc := range []struct {
		name, provider, cm, peers string
		mode                      ipoib.Mode
		cmLoaded                  func() (bool, []string)
		service                   string
		advertise                 bool
		err                       string // in the error, or in Why
	}{
		{"softib default", "softib", "auto", "any", ipoib.Connected, loaded, connServiceOwn, true, "software adapter"},
		{"softib own", "softib", "own", "any", ipoib.Connected, loaded, connServiceOwn, true, ""},
		{"softib kernel", "softib", "kernel", "any", ipoib.Connected, unloaded, "", false, "--cm kernel is for --provider verbs"},
		{"verbs auto, ib_cm unloaded", "verbs", "auto", "any", ipoib.Connected, unloaded, connServiceOwn, true, "ib_cm is not loaded"},
		{"verbs auto, ib_cm loaded", "verbs", "auto", "any", ipoib.Connected, loaded, connServiceKernel, false, "ib_cm is loaded (used by rdma_cm, ib_ipoib)"},
		{"verbs auto, ib_cm loaded: what the user gets", "verbs", "auto", "any", ipoib.Connected, loaded, connServiceKernel, false, "ib_cm is loaded (used by rdma_cm, ib_ipoib): datagram only, with every peer"},
		{"verbs auto, ib_cm loaded: how to get connected mode", "verbs", "auto", "any", ipoib.Connected, loaded, connServiceKernel, false, "unload ib_cm and use --cm own"},
		{"verbs auto, ib_cm loaded, ipoibd peers", "verbs", "auto", "ipoibd-only", ipoib.Connected, loaded, connServiceKernel, true, "connected mode with ipoibd peers only"},
		{"verbs auto, ib_cm unloaded: kernel peers too", "verbs", "auto", "any", ipoib.Connected, unloaded, connServiceOwn, true, "connected mode with kernel ipoib and ipoibd peers"},
		{"verbs own, ib_cm unloaded", "verbs", "own", "any", ipoib.Connected, unloaded, connServiceOwn, true, "ib_umad"},
		{"verbs own, ib_cm loaded", "verbs", "own", "any", ipoib.Connected, loaded, "", false, "ib_cm is loaded (used by rdma_cm, ib_ipoib)"},
		{"verbs kernel", "verbs", "kernel", "any", ipoib.Connected, unloaded, connServiceKernel, false, "--cm kernel: datagram only"},
		{"verbs kernel, ipoibd peers", "verbs", "kernel", "ipoibd-only", ipoib.Connected, unloaded, connServiceKernel, true, "--peers ipoibd-only"},
		{"verbs datagram", "verbs", "kernel", "any", ipoib.Datagram, loaded, "", false, "--mode datagram"},
		{"bad cm", "verbs", "kernel-ish", "any", ipoib.Connected, loaded, "", false, "--cm \"kernel-ish\""},
		{"bad peers", "verbs", "auto", "some", ipoib.Connected, loaded, "", false, "--peers \"some\""},
		{"verbs auto, ib_cm loaded, rfc-send", "verbs", "auto", "rfc-send", ipoib.Connected, loaded, connServiceKernel, false, "connected mode as a sender only"},
		{"verbs kernel, rfc-send: paper only", "verbs", "kernel", "rfc-send", ipoib.Connected, unloaded, connServiceKernel, false, "judged on paper"},
		{"verbs auto, ib_cm unloaded, rfc-send: our own CM does both ways", "verbs", "auto", "rfc-send", ipoib.Connected, unloaded, connServiceOwn, true, "kernel ipoib and ipoibd peers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := chooseConnService(tc.provider, tc.cm, tc.peers, tc.mode, tc.cmLoaded)
			if err != nil {
				if tc.service != "" || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v; want service %q (or an error with %q)", err, tc.service, tc.err)
				}
				return
			}
			if got.Service != tc.service || got.Advertise != tc.advertise || !strings.Contains(got.Why, tc.err) {
				t.Errorf("%+v; want service %q advertise %v, why with %q", got, tc.service, tc.advertise, tc.err)
			}
			if want := tc.peers == "rfc-send" && tc.service == connServiceKernel; got.SendOnly != want {
				t.Errorf("send only %v, want %v", got.SendOnly, want)
			}
		})
	}
}
