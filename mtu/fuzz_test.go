package mtu

import (
	"bytes"
	"net/netip"
	"testing"
)

// FuzzTooBig: TooBig never panics, and whenever it succeeds its output is
// a valid IP packet (lengths, header and ICMP checksums, types, the
// error's destination is the packet's source) quoting the packet's start.
func FuzzTooBig(f *testing.F) {
	f.Add(pkt4(700, df, 17, src4, peer4), 576, []byte{})
	f.Add(pkt4(300, df, 1, src4, peer4, 8), 200, []byte{10, 99, 0, 254})
	f.Add(pkt4(700, 0, 17, src4, peer4), 576, []byte{})
	f.Add(pkt6(1300, 17, src6, peer6), 1280, []byte{})
	f.Add(pkt6(1300, 0, src6, peer6, 58, 0, 1, 4, 0, 0, 0, 0, 128), 1280, []byte{})
	f.Add(pkt6(1300, 44, src6, peer6, 58, 0, 0, 1, 0, 0, 0, 1, 1), 1280, peer6.AsSlice())
	f.Add([]byte{0x60}, 1280, []byte{})
	f.Fuzz(func(t *testing.T, pkt []byte, mtu int, srcb []byte) {
		var src netip.Addr
		if a, ok := netip.AddrFromSlice(srcb); ok {
			src = a
		}
		checkICMPError(t, pkt, verify, func(dst, pkt []byte) (int, error) { return TooBig(dst, pkt, mtu, src) })
	})
}

// FuzzUnreachable: Unreachable never panics, and whenever it succeeds its
// output is a valid ICMP host / ICMPv6 address unreachable error quoting
// the packet's start, the same when written in place.
func FuzzUnreachable(f *testing.F) {
	f.Add(pkt4(700, df, 17, src4, peer4), []byte{})
	f.Add(pkt4(60, 0, 6, src4, peer4), []byte{10, 99, 0, 254})
	f.Add(pkt4(60, 0, 1, src4, peer4, 3, 1), []byte{})
	f.Add(pkt6(20, 6, src6, peer6), []byte{})
	f.Add(pkt6(20, 58, src6, peer6, 128), peer6.AsSlice())
	f.Add([]byte{0x45}, []byte{})
	f.Fuzz(func(t *testing.T, pkt []byte, srcb []byte) {
		var src netip.Addr
		if a, ok := netip.AddrFromSlice(srcb); ok {
			src = a
		}
		checkICMPError(t, pkt, func(out []byte) string { return verifyAs(out, true) },
			func(dst, pkt []byte) (int, error) { return Unreachable(dst, pkt, src) })
	})
}

// checkICMPError runs write (TooBig or Unreachable) on pkt: an error comes
// with no output; an output passes valid and quotes the packet's start;
// written in place it is the same.
func checkICMPError(t *testing.T, pkt []byte, valid func([]byte) string, write func(dst, pkt []byte) (int, error)) {
	t.Helper()
	dst := make([]byte, MaxLen)
	n, err := write(dst, pkt)
	if err != nil {
		if n != 0 {
			t.Fatalf("error %v with length %d", err, n)
		}
		return
	}
	out := dst[:n]
	if msg := valid(out); msg != "" {
		t.Fatalf("invalid output (%s): % x", msg, out)
	}
	hdr := 28
	if out[0]>>4 == 6 {
		hdr = 48
	}
	if !bytes.Equal(out[hdr:], pkt[:n-hdr]) {
		t.Fatal("quote is not the packet's start")
	}
	buf := make([]byte, max(len(pkt), MaxLen))
	copy(buf, pkt)
	m, err := write(buf, buf[:len(pkt)])
	if err != nil || !bytes.Equal(buf[:m], out) {
		t.Fatalf("in place: %v, output differs", err)
	}
}
