package encap

import "github.com/ipoibd/ipoibd/ib"

// MTUForIB returns the IPoIB datagram-mode MTU for an IB MTU: the IB MTU
// less the encapsulation header (2048 → 2044), as Linux IPOIB_UD_MTU does.
// An invalid code gives 0.
func MTUForIB(ibMTU ib.MTU) int {
	if !ibMTU.Valid() {
		return 0
	}
	return ibMTU.Bytes() - HeaderLen
}

// RecvBufLen returns the size of a UD receive buffer for an IB MTU: the
// GRH area the adapter fills in front of every UD receive, then a whole IB
// MTU (Linux IPOIB_UD_BUF_SIZE). An invalid code gives 0.
func RecvBufLen(ibMTU ib.MTU) int {
	if !ibMTU.Valid() {
		return 0
	}
	return ib.GRHLen + ibMTU.Bytes()
}
