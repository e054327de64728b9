package ipoib

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/sa"
)

// slidSA is the fake SA as one host asks it: its PathRecords name that
// host's LID as their source, as a real SA's do.
type slidSA struct {
	*fakeSA
	slid uint16
}

func (s slidSA) PathRecord(dgid ib.GID, pkey ib.PKey) (sa.PathRecord, error) {
	r, err := s.fakeSA.PathRecord(dgid, pkey)
	r.SLID = s.slid
	return r, err
}

// TestREQFloodFromOneLID (issue 27 item 1, on an InfiniBand subnet): a
// third port floods a host's CM with REQs without a GRH, each claiming
// another port GID and CA GUID, and never completes one. They hold only
// their source LID's share of the setup slots, so a real peer that starts
// talking during the flood still gets its RC connection at once (its
// MADs, like the flood's, go by LID without a GRH: the SA's path has no
// hop limit).
func TestREQFloodFromOneLID(t *testing.T) {
	const qkey = 0x0b1b
	f := newFakeSA(qkey)
	h, fab := lidHosts(t, f, 2, func(k int, c *Config) {
		c.Subnet = slidSA{f, uint16(0x10 + k)}
	})
	a, b := h[0], h[1]
	m := newRawPort(t, fab, 0x30, qkey)
	mads, err := m.dev.MADs()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mads.Close() })
	go func() { // the flood's answers (REPs, REJs) go unread
		for range mads.Recv() {
		}
	}()

	const flood = 400
	to := ib.MADAddr{QPN: ib.QP1, PKey: ib.DefaultPKey, Path: ib.Path{DLID: 0x10}}
	var buf [256]byte
	for n := range flood {
		var claim ib.GID
		claim[0], claim[1] = 0xfe, 0x80
		binary.BigEndian.PutUint64(claim[8:], 0x0002c903000a0000+uint64(n))
		req := cm.REQ{
			LocalCommID: uint32(0x1000 + n), ServiceID: cm.IPoIBServiceID(a.port.local.QPN),
			LocalCAGUID: 0x0002c903000a0000 + uint64(n), LocalQPN: ib.QPN(0x5000 + n),
			TransportType: cm.TransportRC, PathMTU: ib.MTU2048, StartingPSN: 1,
			RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, MaxCMRetries: 15, PKey: ib.DefaultPKey,
			Primary: cm.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: claim, RemoteGID: a.port.local.GID, HopLimit: 64},
		}
		_ = cm.PrivateData{UDQPN: ib.QPN(0x6000 + n), ReceiveMTU: 65524}.Encode(req.PrivateData[:])
		if err := req.MarshalMAD(buf[:], uint64(n)); err != nil {
			t.Fatal(err)
		}
		if err := mads.Send(to, buf[:]); err != nil {
			t.Fatal(err)
		}
		if n%64 == 63 { // let a's CM keep up: the device queues 256 MADs
			waitFor(t, "a takes the flood", func() bool { return a.stat(t, "cm_mads_in") > uint64(n-8) })
		}
	}
	waitFor(t, "a refuses the flood beyond its share", func() bool {
		return a.stat(t, "cm_req_busy_source") >= flood-cm.DefaultMaxHalfOpenPerSource-8
	})
	if full := a.stat(t, "cm_req_refused_full"); full != 0 {
		t.Errorf("%d REQs refused as full: the flood took every setup slot", full)
	}

	start := time.Now()
	out := packetTo(b.ip4, a.ip4, 3000, 1)
	b.send(out)
	if got := a.next(t); string(got) != string(out) {
		t.Fatalf("a got %d octets, want b's packet", len(got))
	}
	waitFor(t, "b connects to a during the flood", func() bool {
		for _, c := range b.Connections() {
			if c.State == "established" {
				return true
			}
		}
		return false
	})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("b connected after %v, want within 2 s", d)
	}
}
