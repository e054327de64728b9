package mtu

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/inetsum"
)

// verify checks an ICMP error as a receiver would: IP header, checksums,
// types and quoted packet. It returns a description of the first problem.
func verify(p []byte) string { return verifyAs(p, false) }

// verifyAs is verify for TooBig's output or, with unreachable, for
// Unreachable's.
func verifyAs(p []byte, unreachable bool) string {
	if len(p) < 1 {
		return "empty"
	}
	switch p[0] >> 4 {
	case 4:
		if len(p) < 28 || p[0] != 0x45 {
			return "ipv4 header"
		}
		if int(binary.BigEndian.Uint16(p[2:])) != len(p) {
			return "ipv4 total length"
		}
		if len(p) > MaxLen4 {
			return "longer than 576"
		}
		if inetsum.Checksum(0, p[:20]) != 0 {
			return "ipv4 header checksum"
		}
		if p[9] != protoICMP || p[8] == 0 {
			return "ipv4 protocol/ttl"
		}
		if inetsum.Checksum(0, p[20:]) != 0 {
			return "icmp checksum"
		}
		switch {
		case unreachable && (p[20] != 3 || p[21] != 1 || binary.BigEndian.Uint32(p[24:]) != 0):
			return "icmp type/code/unused"
		case unreachable:
		case p[20] != 3 || p[21] != 4 || binary.BigEndian.Uint16(p[24:]) != 0:
			return "icmp type/code/unused"
		case binary.BigEndian.Uint16(p[26:]) < 68:
			return "next-hop mtu"
		}
		if p[28]>>4 != 4 || len(p) < 28+int(p[28]&0xf)*4+8 && len(p) < 28+int(binary.BigEndian.Uint16(p[30:])) {
			return "quote"
		}
		if [4]byte(p[16:20]) != [4]byte(p[40:44]) {
			return "destination is not the quoted source"
		}
	case 6:
		if len(p) < 48 {
			return "ipv6 length"
		}
		if int(binary.BigEndian.Uint16(p[4:]))+40 != len(p) || len(p) > MaxLen6 {
			return "ipv6 payload length"
		}
		if p[6] != protoICMPv6 || p[7] == 0 {
			return "ipv6 next header/hop limit"
		}
		if inetsum.Checksum(inetsum.Add(0, p[8:40])+uint64(len(p)-40)+protoICMPv6, p[40:]) != 0 {
			return "icmpv6 checksum"
		}
		if unreachable && (p[40] != 1 || p[41] != 3 || binary.BigEndian.Uint32(p[44:]) != 0) ||
			!unreachable && (p[40] != 2 || p[41] != 0 || binary.BigEndian.Uint32(p[44:]) < 1280) {
			return "icmpv6 type/code/mtu"
		}
		if p[48]>>4 != 6 {
			return "quote"
		}
		if [16]byte(p[24:40]) != [16]byte(p[56:72]) {
			return "destination is not the quoted source"
		}
	default:
		return "ip version"
	}
	return ""
}
