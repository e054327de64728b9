package wire

import (
	"fmt"
	"time"

	"github.com/ipoibd/ipoibd/ib"
)

// AETH is the ACK extended transport header of RC ACKs and NAKs (spec §6):
// a syndrome and the responder's 24-bit message sequence number.
type AETH struct {
	Syndrome uint8
	MSN      uint32
}

// AckKind is the type in bits 7-5 of an AETH syndrome.
type AckKind uint8

// ACK kinds.
const (
	AckKindACK      AckKind = 0
	AckKindRNRNAK   AckKind = 1
	AckKindReserved AckKind = 2
	AckKindNAK      AckKind = 3
)

func (k AckKind) String() string {
	switch k {
	case AckKindACK:
		return "ACK"
	case AckKindRNRNAK:
		return "RNR NAK"
	case AckKindNAK:
		return "NAK"
	}
	return fmt.Sprintf("reserved(%d)", uint8(k))
}

// NAK codes (syndrome bits 4-0 of a NAK).
const (
	NAKPSNSequenceError  uint8 = 0
	NAKInvalidRequest    uint8 = 1
	NAKRemoteAccessError uint8 = 2
	NAKRemoteOperational uint8 = 3
	NAKInvalidRDRequest  uint8 = 4 // IBA; not in rxe, unused without RD
)

const (
	// CreditsUnlimited is the ACK credit count meaning "no credit
	// information": end-to-end flow control is off, as in IPoIB.
	CreditsUnlimited uint8 = 0x1f

	msnMask       uint32 = 0xffffff
	syndromeCode  uint8  = 0x1f
	syndromeShift        = 5
)

// ACK acknowledges with credit count 0x1F (no end-to-end flow control).
func ACK(msn uint32) AETH { return AETH{Syndrome: CreditsUnlimited, MSN: msn & msnMask} }

// RNRNAK tells the requester to retry after RNRTimer(timerCode); only the
// low five bits of timerCode are used.
func RNRNAK(timerCode uint8, msn uint32) AETH {
	return AETH{Syndrome: uint8(AckKindRNRNAK)<<syndromeShift | timerCode&syndromeCode, MSN: msn & msnMask}
}

// NAK reports an error code (NAKPSNSequenceError...); only the low five
// bits of code are used.
func NAK(code uint8, msn uint32) AETH {
	return AETH{Syndrome: uint8(AckKindNAK)<<syndromeShift | code&syndromeCode, MSN: msn & msnMask}
}

// Kind returns the syndrome's type.
func (a AETH) Kind() AckKind { return AckKind(a.Syndrome >> syndromeShift) }

// Credits returns the credit count of an ACK.
func (a AETH) Credits() uint8 { return a.Syndrome & syndromeCode }

// RNRTimerCode returns the timer code of an RNR NAK.
func (a AETH) RNRTimerCode() uint8 { return a.Syndrome & syndromeCode }

// RNRTimer returns how long an RNR NAK asks the requester to wait.
func (a AETH) RNRTimer() time.Duration { return RNRTimer(a.RNRTimerCode()) }

// NAKCode returns the code of a NAK.
func (a AETH) NAKCode() uint8 { return a.Syndrome & syndromeCode }

// rnrTimerMicros are the RNR NAK timer codes in microseconds (Linux enum
// ib_rnr_timeout); code 0 is the longest, not the shortest.
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimer decodes an RNR timer code (low five bits of code).
func RNRTimer(code uint8) time.Duration {
	return time.Duration(rnrTimerMicros[code&syndromeCode]) * time.Microsecond
}

// Encode writes the AETH into b[:4].
func (a AETH) Encode(b []byte) error {
	if err := ib.NeedLen("AETH", "buffer", b, AETHLen); err != nil {
		return err
	}
	if a.MSN > msnMask {
		return ib.ErrField("AETH", "MSN", "%#x exceeds 24 bits", a.MSN)
	}
	_ = b[3]
	b[0] = a.Syndrome
	ib.Put24(b[1:4], a.MSN)
	return nil
}

// DecodeAETH reads an AETH from b[:4]. A syndrome of the reserved type
// (bits 7-5 = 010) is an error.
func DecodeAETH(b []byte) (AETH, error) {
	if err := ib.NeedLen("AETH", "header", b, AETHLen); err != nil {
		return AETH{}, err
	}
	_ = b[3]
	a := AETH{Syndrome: b[0], MSN: ib.Get24(b[1:4])}
	if a.Kind() == AckKindReserved {
		return AETH{}, ib.ErrField("AETH", "Syndrome", "reserved type in 0x%02x", a.Syndrome)
	}
	return a, nil
}
