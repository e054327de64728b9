package main

import (
	"testing"

	"github.com/ipoibd/ipoibd/offload"
)

// The offload header crosses the relay in 10 octets ahead of the packet
// and comes out as it went in.
func TestHdrRoundTrip(t *testing.T) {
	for _, h := range []offload.Hdr{
		{},
		{Flags: offload.FlagNeedsCsum, CsumStart: 34, CsumOffset: 16},
		{Flags: offload.FlagNeedsCsum, GSOType: offload.GSOTCPv4, HdrLen: 66, GSOSize: 65428, CsumStart: 34, CsumOffset: 16},
		{Flags: 0xff, GSOType: 0xff, HdrLen: 0xffff, GSOSize: 0xffff, CsumStart: 0xffff, CsumOffset: 0xffff},
	} {
		var b [hdrLen]byte
		encodeHdr(b[:], h)
		if got := decodeHdr(b[:]); got != h {
			t.Errorf("header %+v came out as %+v", h, got)
		}
	}
}
