package wire

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// The CRCs of a native InfiniBand packet (IBA Vol 1 §7.8).
//
// The ICRC is the CRC-32 the RoCEv2 ICRC is (icrc.go): same polynomial,
// same bit order, sent least significant octet first, BTH octet 4
// (resv8a, FECN/BECN) hashed as ones. What comes before the BTH differs:
// a local packet (no GRH) hashes its LRH with the VL, the one field a
// switch rewrites, as ones; a global packet hashes 8 octets of ones in
// place of the LRH (a router rewrites all of it, which RoCEv2 inherited)
// and its GRH with TClass, FlowLabel and HopLmt as ones, as RoCEv2 does
// with the IPv6 header.
//
// The VCRC is a CRC-16 with polynomial 0x100B over the whole packet from
// the LRH through the ICRC. Each hop recomputes it (a switch rewrites the
// VL). softib computes it in the ICRC's conventions: register preset to
// ones, bits reflected, result complemented, least significant octet
// first.

// StartIBICRC begins the ICRC of a native InfiniBand packet from its LRH
// and, for a global packet, its GRH (nil for a local one). Hash the BTH
// onwards with Update, as for RoCEv2.
func StartIBICRC(lrh, grh []byte) (ICRCDigest, error) {
	if err := ib.NeedLen("ICRC", "LRH", lrh, LRHLen); err != nil {
		return ICRCDigest{}, err
	}
	var s [LRHLen + ib.GRHLen]byte
	if grh == nil {
		copy(s[:LRHLen], lrh)
		s[0] |= 0xf0 // VL
		return ICRCDigest{crc: crcBytes(0, s[:LRHLen])}, nil
	}
	if err := ib.NeedLen("ICRC", "GRH", grh, ib.GRHLen); err != nil {
		return ICRCDigest{}, err
	}
	for i := range LRHLen {
		s[i] = 0xff
	}
	g := s[LRHLen:]
	copy(g, grh[:ib.GRHLen])
	g[0] |= 0x0f                        // TClass, high nibble
	g[1], g[2], g[3] = 0xff, 0xff, 0xff // TClass, FlowLabel
	g[7] = 0xff                         // HopLmt
	return ICRCDigest{crc: crcBytes(0, s[:])}, nil
}

// vcrcPoly is 0x100B bit-reflected, for the reflected table.
const vcrcPoly = 0xd008

var vcrcTable = func() (t [256]uint16) {
	for i := range 256 {
		c := uint16(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ vcrcPoly
			} else {
				c >>= 1
			}
		}
		t[i] = c
	}
	return t
}()

// VCRCDigest accumulates the VCRC of a packet fed in pieces. Start one
// with StartVCRC.
type VCRCDigest struct{ crc uint16 }

// StartVCRC begins a VCRC.
func StartVCRC() VCRCDigest { return VCRCDigest{crc: 0xffff} }

// Update hashes the next octets of the packet.
func (d *VCRCDigest) Update(p []byte) {
	c := d.crc
	for _, v := range p {
		c = vcrcTable[byte(c)^v] ^ c>>8
	}
	d.crc = c
}

// Sum16 returns the VCRC of what was hashed.
func (d *VCRCDigest) Sum16() uint16 { return ^d.crc }

// VCRC computes the variant CRC of b, a packet from the LRH through the
// ICRC.
func VCRC(b []byte) uint16 {
	d := StartVCRC()
	d.Update(b)
	return d.Sum16()
}

// PutVCRC writes v into b[:2] least significant octet first.
func PutVCRC(b []byte, v uint16) { binary.LittleEndian.PutUint16(b, v) }

// GetVCRC reads a VCRC written by PutVCRC.
func GetVCRC(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
