package cm

import (
	"encoding/binary"
	"fmt"

	"github.com/ipoibd/ipoibd/ib"
)

// checker validates fields before an encoder writes anything, keeping the
// first failure. It lets an encoder list its width checks one per line
// without an if-block each, and it only allocates when a check fails.
type checker struct {
	format string // the message being encoded, e.g. "REQ"
	prefix string // prepended to field names, e.g. "Primary " for a REQ path
	err    error
}

// width fails when v needs more than bits bits.
func (c *checker) width(field string, v uint64, bits uint) {
	if c.err == nil && v>>bits != 0 {
		c.err = ib.ErrField(c.format, c.prefix+field, "%#x does not fit in %d bits", v, bits)
	}
}

// atMost fails when v exceeds limit.
func (c *checker) atMost(field string, v, limit uint64) {
	if c.err == nil && v > limit {
		c.err = ib.ErrField(c.format, c.prefix+field, "%d exceeds the maximum %d", v, limit)
	}
}

// fail records an arbitrary inconsistency.
func (c *checker) fail(field, reason string, args ...any) {
	if c.err == nil {
		c.err = ib.ErrField(c.format, c.prefix+field, reason, args...)
	}
}

// checkPayload rejects anything but a whole CM payload, so that a private
// data area is never silently cut short.
func checkPayload(format string, p []byte) error {
	if len(p) != PayloadLen {
		return ib.ErrField(format, "payload", "have %d octets, a CM payload is exactly %d", len(p), PayloadLen)
	}
	return nil
}

func bit(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// enumName returns names[v], or typ(v) for values without a name.
func enumName(names []string, v uint64, typ string) string {
	if v < uint64(len(names)) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// TransportType is the 2-bit Transport Service Type of a REQ.
type TransportType uint8

// Transport service types.
const (
	TransportRC  TransportType = 0
	TransportUC  TransportType = 1
	TransportRD  TransportType = 2 // IBA only; Linux does not support it
	TransportExt TransportType = 3 // see the REQ's Extended Transport Type (1 = XRC)
)

var transportNames = []string{"RC", "UC", "RD", "Ext"}

func (t TransportType) String() string { return enumName(transportNames, uint64(t), "TransportType") }

// MsgType is the 2-bit "Message MRAed" / "Message REJected" field: which
// message an MRA or REJ answers.
type MsgType uint8

// Message types an MRA or REJ can refer to. 3 is undefined.
const (
	MsgREQ   MsgType = 0
	MsgREP   MsgType = 1
	MsgOther MsgType = 2 // LAP for an MRA; "no message" for a REJ
)

var msgTypeNames = []string{"REQ", "REP", "other"}

func (t MsgType) String() string { return enumName(msgTypeNames, uint64(t), "MsgType") }

// putCommIDs writes the layout RTU and DREP share: the two communication
// IDs, then private data.
func putCommIDs(p []byte, local, remote uint32, private []byte) {
	binary.BigEndian.PutUint32(p[0:4], local)
	binary.BigEndian.PutUint32(p[4:8], remote)
	copy(p[8:], private)
}

// commIDs reads the two communication IDs that open RTU and DREP.
func commIDs(p []byte) (local, remote uint32) {
	return binary.BigEndian.Uint32(p[0:4]), binary.BigEndian.Uint32(p[4:8])
}
