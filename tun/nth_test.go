package tun

import "net/netip"

// nth returns the address k after a.
func nth(a netip.Addr, k int) netip.Addr {
	for ; k > 0; k-- {
		a = a.Next()
	}
	return a
}
