package cm

import (
	"encoding/binary"

	"github.com/ipoibd/ipoibd/ib"
)

// IPoIBServiceIDPrefix is the RFC 4755 service ID of IPoIB-CM without its
// QPN: the IETF block, Type 0, reserved bits zero (Linux IPOIB_CM_IETF_ID).
const IPoIBServiceIDPrefix = 0x1000000000000000

// ipoibServiceIDFixed covers every bit of the service ID except the QPN.
const ipoibServiceIDFixed = 0xffffffffff000000

// IPoIBServiceID returns the service ID a REQ to the IPoIB interface with
// UD QPN udQPN is addressed to, and that interface listens on. A QPN
// wider than 24 bits is cut to 24 bits; link addresses cannot carry more.
func IPoIBServiceID(udQPN ib.QPN) uint64 {
	return IPoIBServiceIDPrefix | uint64(udQPN&ib.QPNMask)
}

// ParseIPoIBServiceID returns the destination UD QPN of an IPoIB-CM service
// ID, or an error when id is not one.
func ParseIPoIBServiceID(id uint64) (ib.QPN, error) {
	switch {
	case id>>56 != IPoIBServiceIDPrefix>>56:
		return 0, ib.ErrField("IPoIB-CM service ID", "prefix", "%#016x is outside the IETF IPoIB-CM block %#016x", id, uint64(IPoIBServiceIDPrefix))
	case id&ipoibServiceIDFixed != IPoIBServiceIDPrefix:
		return 0, ib.ErrField("IPoIB-CM service ID", "reserved", "%#016x has non-zero type or reserved bits", id)
	}
	return ib.QPN(id) & ib.QPNMask, nil
}

// IPoIB-CM private data (RFC 4755 §6, Linux struct ipoib_cm_data).
const (
	// IPoIBPrivateDataLen is the meaningful part of a REQ's or REP's private
	// data; the rest is zero.
	IPoIBPrivateDataLen = 8
	// IPoIBMarkedLen is that with ipoibd's mark after it, in octets 8–11
	// (PrivateData.BothWays): reserved by RFC 4755, zero from Linux, which
	// reads only the first 8.
	IPoIBMarkedLen = 12
	// LinuxReceiveMTU is the receive MTU Linux advertises in every REQ and
	// REP: a 65520-octet IP packet plus the 4-octet IPoIB header.
	LinuxReceiveMTU = 65524
	// ipoibHeaderLen is why a receive MTU must exceed 4: the connection MTU
	// is the receive MTU minus the IPoIB header.
	ipoibHeaderLen = 4
)

// PrivateData is what IPoIB-CM puts in the private data of its REQs and
// REPs.
type PrivateData struct {
	UDQPN ib.QPN // the sender's UD QPN, to form its link address
	// ReceiveMTU is the largest IPoIB message (header + IP packet) the
	// sender accepts on this connection; it must exceed 4.
	ReceiveMTU uint32
	// BothWays marks an ipoibd sender: it receives on every connection,
	// also those it opened, so its peer may send on a connection the
	// sender opened. The kernel's ipoib cannot take that (it receives on
	// the connections it accepted only), and sends no mark.
	BothWays bool
}

// bothWaysMark is octets 8–11 of a marked private data: "ipd" and 1.
var bothWaysMark = [4]byte{'i', 'p', 'd', 1}

// Encode writes d into the first 8 octets of a private-data area (e.g.
// REQ.PrivateData[:]), and the mark into the next 4 when BothWays; the
// octets after them are left as they are (zero in a fresh message).
func (d PrivateData) Encode(b []byte) error {
	if err := ib.NeedLen("IPoIB-CM private data", "buffer", b, IPoIBPrivateDataLen); err != nil {
		return err
	}
	if !d.UDQPN.Valid() {
		return ib.ErrField("IPoIB-CM private data", "UD QPN", "%#x does not fit in 24 bits", uint32(d.UDQPN))
	}
	if d.ReceiveMTU <= ipoibHeaderLen {
		return ib.ErrField("IPoIB-CM private data", "receive MTU", "%d leaves no room for an IP packet after the %d-octet IPoIB header", d.ReceiveMTU, ipoibHeaderLen)
	}
	binary.BigEndian.PutUint32(b[0:4], uint32(d.UDQPN))
	binary.BigEndian.PutUint32(b[4:8], d.ReceiveMTU)
	if d.BothWays {
		if err := ib.NeedLen("IPoIB-CM private data", "buffer", b, IPoIBMarkedLen); err != nil {
			return err
		}
		copy(b[8:12], bothWaysMark[:])
	}
	return nil
}

// DecodePrivateData reads IPoIB-CM private data from a REQ's or REP's
// private-data area. The reserved top octet of the QPN word is ignored, as
// Linux does.
func DecodePrivateData(b []byte) (PrivateData, error) {
	if err := ib.NeedLen("IPoIB-CM private data", "private data", b, IPoIBPrivateDataLen); err != nil {
		return PrivateData{}, err
	}
	d := PrivateData{
		UDQPN:      ib.QPN(ib.Get24(b[1:4])),
		ReceiveMTU: binary.BigEndian.Uint32(b[4:8]),
	}
	d.BothWays = len(b) >= IPoIBMarkedLen && [4]byte(b[8:12]) == bothWaysMark
	// Linux refuses such a REP too (REJ Consumer Reject): the connection MTU
	// would be zero or negative.
	if d.ReceiveMTU <= ipoibHeaderLen {
		return PrivateData{}, ib.ErrField("IPoIB-CM private data", "receive MTU", "%d leaves no room for an IP packet after the %d-octet IPoIB header", d.ReceiveMTU, ipoibHeaderLen)
	}
	return d, nil
}
