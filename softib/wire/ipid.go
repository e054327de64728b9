package wire

import "hash/crc32"

// The ICRC covers the IPv4 Identification field, but a UDP socket never
// sees the IP header: a receiver knows every field it hashes except that
// one. Senders set it as they like (rxe: the kernel's per-destination
// counter; a kernel GSO train: first ID, +1, +2, ... per segment), so a
// receiver that assumed one value would drop their packets.
//
// The CRC is linear over GF(2): two ICRCs of the same packet with IDs that
// differ by x (XOR) differ by R(x), the CRC register of x followed by the n
// octets after the ID, hashed from a zero register. Undoing the n zero
// octets and then the two ID octets recovers x exactly, or shows that no
// 16-bit x explains the difference (then the packet is corrupt). This
// costs a few hundred operations, paid only when the first guess of the ID
// is wrong. It leaves 16 of the ICRC's 32 bits to catch corruption of an
// IPv4 packet; Ethernet's FCS and the IP checksum still guard each hop.

// crcTopInv[v] is the index of the IEEE table entry whose top octet is v:
// the table's top octets are a permutation, which makes a step of the
// (reflected) CRC register invertible.
var crcTopInv [256]uint8

// unshiftZeros[k] is the matrix (columns) that undoes 2^k zero octets
// hashed into a CRC register.
var unshiftZeros [17][32]uint32

func init() {
	seen := [256]bool{}
	for i, e := range crc32.IEEETable {
		top := uint8(e >> 24)
		if seen[top] {
			panic("wire: CRC table top octets are not a permutation")
		}
		seen[top] = true
		crcTopInv[top] = uint8(i)
	}
	for j := range 32 {
		unshiftZeros[0][j] = unshiftZero(1 << j)
	}
	for k := 1; k < len(unshiftZeros); k++ {
		for j := range 32 {
			unshiftZeros[k][j] = gf2Apply(&unshiftZeros[k-1], unshiftZeros[k-1][j])
		}
	}
}

// unshiftZero undoes one zero octet hashed into register s: the step is
// s = T[byte(r)] ^ r>>8, and the top octet of s names byte(r).
func unshiftZero(s uint32) uint32 {
	i := crcTopInv[s>>24]
	return (s^crc32.IEEETable[i])<<8 | uint32(i)
}

// gf2Apply multiplies the 32x32 bit matrix m (given by columns) by v.
func gf2Apply(m *[32]uint32, v uint32) uint32 {
	var r uint32
	for j := 0; v != 0; j++ {
		r ^= m[j] & -(v & 1)
		v >>= 1
	}
	return r
}

// ipv4IDAfter is how many octets of the ICRC string follow the IPv4
// Identification field for an IB packet of ibLen octets (ICRC slot
// included): the rest of the IP header, the UDP header and the IB packet
// up to its ICRC.
func ipv4IDAfter(ibLen int) int { return IPv4HeaderLen - 6 + UDPHeaderLen + ibLen - ICRCLen }

// solveIPv4ID returns the XOR x between the ID an ICRC was computed with
// and the actual ID of a packet, given diff, the XOR of the two ICRCs; ok
// is false when no ID explains diff.
func solveIPv4ID(diff uint32, ibLen int) (x uint16, ok bool) {
	n := ipv4IDAfter(ibLen)
	if n < 0 || n >= 1<<len(unshiftZeros) {
		return 0, false
	}
	s := diff
	for k := 0; n != 0; k++ {
		if n&1 != 0 {
			s = gf2Apply(&unshiftZeros[k], s)
		}
		n >>= 1
	}
	// s is now the register after the two ID octets (hi, lo) hashed from
	// zero: s = T[byte(T[hi])^lo] ^ T[hi]>>8.
	t := crc32.IEEETable
	i1 := crcTopInv[s>>24]
	u := s ^ t[i1] // T[hi]>>8
	hi := crcTopInv[uint8(u>>16)]
	if t[hi]>>8 != u {
		return 0, false
	}
	lo := i1 ^ uint8(t[hi])
	return uint16(hi)<<8 | uint16(lo), true
}
