package cm

import (
	"bytes"
	"encoding/binary"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/mad"
)

// FuzzDecodeMAD: DecodeMAD never panics, and whatever it accepts marshals
// back to the same octets except for reserved bits and the header fields
// CM does not use, and decodes again to the same message.
func FuzzDecodeMAD(f *testing.F) {
	for _, name := range goldenNames() {
		g := goldens[name]
		f.Add(g.wire)
		f.Add(g.wire[:MADLen-1])
		f.Add(g.wire[:mad.HeaderLen])
		f.Add(append(bytes.Clone(g.wire), 0))
		all := bytes.Clone(g.wire) // every reserved bit set
		for _, r := range g.reserved {
			all[mad.HeaderLen+r.off] |= r.bits
		}
		f.Add(all)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, m, err := DecodeMAD(b)
		if err != nil {
			if m != nil {
				t.Fatalf("message %+v returned with error %v", m, err)
			}
			return
		}
		var out [MADLen]byte
		if err := m.MarshalMAD(out[:], h.TransactionID); err != nil {
			t.Fatalf("decoded %+v does not encode: %v", m, err)
		}
		if g, ok := goldenFor(AttrID(h.AttributeID)); ok {
			skip := notCarried(g)
			for i := range out {
				if out[i] != b[i]&^skip[i] {
					t.Fatalf("%v octet %d: re-encoded %#02x from %#02x", AttrID(h.AttributeID), i, out[i], b[i])
				}
			}
		}
		h2, m2, err := DecodeMAD(out[:])
		if err != nil {
			t.Fatalf("re-encoded %v does not decode: %v", h.AttributeID, err)
		}
		if h2.TransactionID != h.TransactionID || h2.AttributeID != h.AttributeID || !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the message:\n%+v %+v\n%+v %+v", h, m, h2, m2)
		}
	})
}

// FuzzPrivateData: DecodePrivateData never panics, and what it accepts
// re-encodes to the same 8 octets with the reserved QPN octet cleared.
func FuzzPrivateData(f *testing.F) {
	f.Add(goldenREQ[mad.HeaderLen+140:])
	f.Add(goldenREP[mad.HeaderLen+36:])
	f.Add([]byte{0xff, 0, 0, 0x48, 0, 0, 0xff, 0xf4})
	f.Add([]byte{0, 0, 0, 0x48, 0, 0, 0, 4})
	f.Add([]byte{0, 0, 0, 0x48, 0, 0, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodePrivateData(b)
		if err != nil {
			return
		}
		out := bytes.Repeat([]byte{0xee}, IPoIBPrivateDataLen+1)
		if err := d.Encode(out); err != nil {
			t.Fatalf("%+v does not encode: %v", d, err)
		}
		want := append([]byte{0}, b[1:IPoIBPrivateDataLen]...)
		if !bytes.Equal(out[:IPoIBPrivateDataLen], want) || out[IPoIBPrivateDataLen] != 0xee {
			t.Fatalf("re-encoded % x from % x", out, b[:IPoIBPrivateDataLen])
		}
		if d2, err := DecodePrivateData(out); err != nil || d2 != d {
			t.Fatalf("second decode %+v, %v; want %+v", d2, err, d)
		}
	})
}

// FuzzParseIPoIBServiceID: parsing never panics, and what parses rebuilds
// the same service ID.
func FuzzParseIPoIBServiceID(f *testing.F) {
	f.Add(uint64(0x1000000000000048))
	f.Add(uint64(0x1000000000ffffff))
	f.Add(uint64(0x1000000001000048))
	f.Add(uint64(0x2000000000000048))
	f.Add(uint64(0))
	f.Fuzz(func(t *testing.T, id uint64) {
		q, err := ParseIPoIBServiceID(id)
		if err != nil {
			return
		}
		if !q.Valid() || IPoIBServiceID(q) != id {
			t.Fatalf("%#016x parsed to %v, rebuilds %#016x", id, q, IPoIBServiceID(q))
		}
	})
}

// FuzzEngineMAD feeds one arbitrary MAD to the passive end of a live
// connection, from a third host or from the peer, optionally naming the
// connection's comm IDs. Nothing panics, the half-open accounting stays
// exact, and from a third host the connection is never disturbed.
func FuzzEngineMAD(f *testing.F) {
	for _, name := range goldenNames() {
		f.Add(goldens[name].wire, false, true)
		f.Add(goldens[name].wire, true, true)
	}
	f.Fuzz(func(t *testing.T, b []byte, fromPeer, nameConn bool) {
		fab, a, e, ac, bc := establishedEngines(t)
		var m ib.MAD
		copy(m.Data[:], b)
		if nameConn {
			binary.BigEndian.PutUint32(m.Data[mad.HeaderLen:], ac.LocalCommID)
			binary.BigEndian.PutUint32(m.Data[mad.HeaderLen+4:], bc.LocalCommID)
		}
		m.From = ib.MADAddr{GID: gidN(3), QPN: ib.QP1}
		if fromPeer {
			m.From.GID = a.gid
		}
		e.e.HandleMAD(fab.Now, &m)
		checkAccounting(t, e.e)
		fab.Run(time.Hour)
		checkAccounting(t, e.e)
		checkAccounting(t, a.e)
		if !fromPeer && (bc.State != StateEstablished || ac.State != StateEstablished) {
			t.Fatalf("a MAD from a third host moved the connection to %v / %v", ac.State, bc.State)
		}
	})
}

// checkAccounting: the half-open counts agree with the connections' states.
func checkAccounting(tb testing.TB, e *Engine) {
	tb.Helper()
	n, from := 0, map[sourceKey]int{}
	for _, c := range e.byLocal {
		if halfOpen(c.State) {
			n++
			from[c.source]++
		}
	}
	if n != e.halfOpen || !maps.Equal(from, e.halfOpenFrom) {
		tb.Fatalf("half-open %d counted %d; by source %v counted %v", n, e.halfOpen, from, e.halfOpenFrom)
	}
}
