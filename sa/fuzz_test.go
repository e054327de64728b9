package sa

import (
	"bytes"
	"testing"
)

func addGoldenSeeds(f *testing.F) {
	gs := goldens(f)
	for _, name := range goldenNames(gs) {
		w := gs[name].mad(f)
		f.Add(w)
		f.Add(w[:MADLen-1])
		f.Add(w[:HeaderLen])
	}
	f.Add([]byte{})
}

// FuzzDecodeMAD: framing and header never panic, the header round-trips
// except its reserved octets, and any data area decodes as either record
// and re-encodes to the same octets but for reserved bits.
func FuzzDecodeMAD(f *testing.F) {
	addGoldenSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, data, err := DecodeMAD(b)
		if err != nil {
			if data != nil {
				t.Fatal("data returned with an error")
			}
			return
		}
		var out [HeaderLen]byte
		if err := h.Encode(out[:]); err != nil {
			t.Fatalf("%+v does not encode: %v", h, err)
		}
		want := bytes.Clone(b[:HeaderLen])
		want[18], want[19], want[46], want[47] = 0, 0, 0, 0
		if !bytes.Equal(out[:], want) {
			t.Fatalf("header re-encoded\n% x\nfrom\n% x", out, want)
		}
		p, err := DecodePathRecord(data)
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, &p, data, pathResv)
		m, err := DecodeMCMemberRecord(data)
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, &m, data, mcmResv)
	})
}

func roundTrip(t *testing.T, r Record, data []byte, resv map[int]byte) {
	out := make([]byte, r.Len())
	if err := r.Encode(out); err != nil {
		t.Fatalf("decoded %+v does not encode: %v", r, err)
	}
	for i := range out {
		if out[i] != data[i]&^resv[i] {
			t.Fatalf("%v octet %d: re-encoded %#02x from %#02x", r.AttrID(), i, out[i], data[i])
		}
	}
}

// FuzzRecords: any record that encodes decodes back to itself.
func FuzzRecords(f *testing.F) {
	f.Add(uint64(1), uint16(2), uint32(0x12345), uint8(0x84), uint8(0x87), uint8(0x92), uint8(5), uint16(0xabc), uint8(0x21))
	f.Add(uint64(0), uint16(0), uint32(1<<20), uint8(0xff), uint8(0), uint8(0), uint8(16), uint16(0x1000), uint8(0x10))
	f.Fuzz(func(t *testing.T, sid uint64, lid uint16, flow uint32, mtu, rate, life, sl uint8, qos uint16, js uint8) {
		p := PathRecord{ServiceID: sid, DLID: lid, SLID: ^lid, FlowLabel: flow, HopLimit: mtu, TClass: rate,
			NumbPath: js, PKey: 0xffff, QoSClass: qos, SL: sl, MTU: selected(mtu), Rate: selected(rate),
			Lifetime: Selected{Selector(life >> 6), life}, Preference: sl}
		var b [PathRecordLen]byte
		if err := p.Encode(b[:]); err == nil {
			if got, _ := DecodePathRecord(b[:]); got != p {
				t.Fatalf("PathRecord %+v came back %+v", p, got)
			}
		}
		m := MCMemberRecord{QKey: 0x0b1b, MLID: lid, MTU: selected(mtu), Rate: selected(rate), Lifetime: selected(life),
			SL: sl, FlowLabel: flow, HopLimit: sl, Scope: js >> 4, JoinState: JoinState(js), ProxyJoin: sid&1 != 0}
		var c [MCMemberRecordLen]byte
		if err := m.Encode(c[:]); err == nil {
			if got, _ := DecodeMCMemberRecord(c[:]); got != m {
				t.Fatalf("MCMemberRecord %+v came back %+v", m, got)
			}
		}
	})
}
