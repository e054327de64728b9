package wire

import (
	"github.com/ipoibd/ipoibd/ib"
)

// IBFrame is a packet as it travels on an InfiniBand link (IBA Vol 1
// §7): LRH, a GRH when LRH.LNH says global, the IB transport packet
// (BTH onwards), ICRC and VCRC. On softib's InfiniBand link layer each
// one is a UDP payload between a port and the fabric forwarder.
type IBFrame struct {
	LRH    LRH
	HasGRH bool
	GRH    GRH
	Packet Packet // Payload: ParseIBFrame gives a sub-slice of its input
}

// IBFrameLen returns the length of the frame (LRH through VCRC) that
// carries payloadLen octets with opcode op.
func IBFrameLen(op Opcode, global bool, payloadLen int) int {
	n := LRHLen + PacketLen(op, payloadLen) + VCRCLen
	if global {
		n += ib.GRHLen
	}
	return n
}

// ParseIBFrame parses b, one frame from the LRH through the VCRC, into f
// without allocating on success. It checks that the LRH announces an IBA
// transport packet, that its PktLen covers exactly the octets up to the
// VCRC, the GRH's IPVer, NxtHdr and PayLen, then the transport packet as
// ParsePacket does. It does not verify the CRCs (CheckIBCRCs). On error
// f is unchanged.
func ParseIBFrame(b []byte, f *IBFrame) error {
	lrh, err := DecodeLRH(b)
	if err != nil {
		return err
	}
	if lrh.LNH != LNHLocal && lrh.LNH != LNHGlobal {
		return ib.ErrField("LRH", "LNH", "%#b is no IBA transport packet", lrh.LNH)
	}
	if len(b)%4 != VCRCLen || int(lrh.PktLen)*4 != len(b)-VCRCLen {
		return ib.ErrField("LRH", "PktLen", "%d words, frame has %d octets before the VCRC", lrh.PktLen, len(b)-VCRCLen)
	}
	rest := b[LRHLen : len(b)-VCRCLen]
	var grh GRH
	global := lrh.LNH == LNHGlobal
	if global {
		if err := DecodeGRH(rest, &grh); err != nil {
			return err
		}
		rest = rest[ib.GRHLen:]
		switch {
		case grh.NxtHdr != grhNextIBA:
			return ib.ErrField("GRH", "NxtHdr", "%#x, want %#x (IBA transport)", grh.NxtHdr, grhNextIBA)
		case int(grh.PayLen) != len(rest):
			return ib.ErrField("GRH", "PayLen", "%d, %d octets follow the GRH", grh.PayLen, len(rest))
		}
	}
	var p Packet
	if err := ParsePacket(rest, &p); err != nil {
		return err
	}
	f.LRH, f.HasGRH, f.Packet = lrh, global, p
	if global {
		f.GRH = grh
	} else {
		f.GRH = GRH{}
	}
	return nil
}

// CheckIBCRCs verifies the VCRC and the ICRC of b, a frame ParseIBFrame
// took (global: it has a GRH). A bad VCRC is a link error; a good VCRC
// with a bad ICRC is a packet damaged end to end.
func CheckIBCRCs(b []byte, global bool) (vcrcOK, icrcOK bool) {
	hdr := LRHLen
	if global {
		hdr += ib.GRHLen
	}
	if len(b) < hdr+BTHLen+ICRCLen+VCRCLen {
		return false, false
	}
	n := len(b) - VCRCLen
	if VCRC(b[:n]) != GetVCRC(b[n:]) {
		return false, false
	}
	var grh []byte
	if global {
		grh = b[LRHLen:hdr]
	}
	d, _ := StartIBICRC(b[:LRHLen], grh)
	d.Update(b[hdr : n-ICRCLen])
	return true, d.Sum32() == GetICRC(b[n-ICRCLen:n])
}

// PutIBHeaders writes into b the headers a sender puts in front of a
// payload of payloadLen octets: the LRH, the GRH if f.HasGRH, then the
// transport headers from f.Packet (PutHeaders). It fills the lengths and
// the fields that follow from the frame: LRH.LNH, LRH.PktLen, GRH.PayLen,
// GRH.NxtHdr and BTH.PadCnt; the ones in f are ignored. It returns the
// header length.
func PutIBHeaders(b []byte, f *IBFrame, payloadLen int) (int, error) {
	op := f.Packet.BTH.Opcode
	if !op.Valid() {
		return 0, errUnsupportedOpcode(op)
	}
	hdr := LRHLen
	if f.HasGRH {
		hdr += ib.GRHLen
	}
	if err := ib.NeedLen("frame", "buffer", b, hdr); err != nil {
		return 0, err
	}
	n, err := PutHeaders(b[hdr:], &f.Packet, payloadLen)
	if err != nil {
		return 0, err
	}
	pktLen := PacketLen(op, payloadLen) // BTH through ICRC
	lrh := f.LRH
	lrh.LNH = LNHLocal
	lrh.PktLen = uint16((hdr + pktLen) / 4)
	if f.HasGRH {
		lrh.LNH = LNHGlobal
		grh := f.GRH
		grh.PayLen, grh.NxtHdr = uint16(pktLen), grhNextIBA
		if err := grh.Encode(b[LRHLen:]); err != nil {
			return 0, err
		}
	}
	if err := lrh.Encode(b); err != nil {
		return 0, err
	}
	return hdr + n, nil
}

// AppendIBFrame appends the whole frame f to dst: headers (PutIBHeaders),
// f.Packet.Payload, zero pad, ICRC and VCRC.
func AppendIBFrame(dst []byte, f *IBFrame) ([]byte, error) {
	start := len(dst)
	size := IBFrameLen(f.Packet.BTH.Opcode, f.HasGRH, len(f.Packet.Payload))
	dst = append(dst, make([]byte, size)...)
	b := dst[start:]
	n, err := PutIBHeaders(b, f, len(f.Packet.Payload))
	if err != nil {
		return dst[:start], err
	}
	copy(b[n:], f.Packet.Payload) // pad is already zero
	SealIBFrame(b, f.HasGRH)
	return dst, nil
}

// SealIBFrame writes the ICRC and the VCRC of b, a whole frame whose
// headers, payload and pad are in place.
func SealIBFrame(b []byte, global bool) {
	hdr := LRHLen
	var grh []byte
	if global {
		grh = b[LRHLen : LRHLen+ib.GRHLen]
		hdr += ib.GRHLen
	}
	n := len(b) - VCRCLen
	d, _ := StartIBICRC(b[:LRHLen], grh)
	d.Update(b[hdr : n-ICRCLen])
	PutICRC(b[n-ICRCLen:n], d.Sum32())
	PutVCRC(b[n:], VCRC(b[:n]))
}
