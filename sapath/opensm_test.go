//go:build linux && rdma

package sapath

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/internal/ibsim"
	"github.com/ipoibd/ipoibd/umadsa"
)

// The judge, as in umadsa's OpenSM test: OpenSM on a fabric simulated by
// ibsim (internal/ibsim) answers a path query that goes through the cache
// and its worker as an event loop drives them, and saquery -p, asked
// independently, must know the same path. The test binary is its own
// client, run again as a simulated node (ibsim.Main).

func TestMain(m *testing.M) { ibsim.Main(m, child, umadsa.Exit) }

// child prints its port ("port") or the path to a GID as the cache
// converted it.
func child(arg string) error {
	if arg == "port" {
		pi, err := umadsa.QueryPort("", 0)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"gid": pi.GID.String(), "lid": pi.LID})
	}
	g, err := ib.ParseGID(arg)
	if err != nil {
		return err
	}
	c, err := umadsa.NewPortClient("", 0, 300*time.Millisecond, 2)
	if err != nil {
		return err
	}
	defer c.Close()
	w := NewWorker(c, 0xffff)
	defer w.Close()
	cache := New(Config{})
	if _, ok := cache.Lookup(g, time.Now()); ok {
		return errors.New("an empty cache hit")
	}
	w.Ask(cache.Due(time.Now())...)
	var r Result
	select {
	case r = <-w.Results():
	case <-time.After(10 * time.Second):
		return errors.New("no answer from the worker")
	}
	cache.Done(r.DGID, r.Record, r.Err, time.Now())
	p, ok := cache.Lookup(g, time.Now())
	if !ok {
		return fmt.Errorf("no path after the answer (%v)", r.Err)
	}
	return json.NewEncoder(os.Stdout).Encode(p)
}

func TestOpenSM(t *testing.T) {
	ibsim.Need(t, "saquery")
	f := ibsim.Up(t)
	ports := map[string]struct {
		GID string `json:"gid"`
		LID uint16 `json:"lid"`
	}{}
	for _, h := range []string{"h2", "h3"} {
		p := ports[h]
		f.JSON(t, h, &p, client("port"))
		ports[h] = p
	}
	var p Path
	f.JSON(t, "h2", &p, client(ports["h3"].GID))
	sq := ibsim.Dump(f.Output(t, "h3", exec.Command("saquery", "-p", "--sgid-to-dgid", ports["h2"].GID+"-"+ports["h3"].GID)))
	r := p.Record
	t.Logf("h2→h3: %+v", r)
	// saquery prints LIDs in decimal and selector-and-value octets in hex.
	for _, c := range []struct {
		key  string
		ours uint64
	}{
		{"dlid", uint64(r.DLID)}, {"slid", uint64(r.SLID)}, {"sl", uint64(r.SL)},
		{"mtu", uint64(r.MTU.Selector)<<6 | uint64(r.MTU.Value)},
		{"rate", uint64(r.Rate.Selector)<<6 | uint64(r.Rate.Value)},
		{"pkt_life", uint64(r.Lifetime.Selector)<<6 | uint64(r.Lifetime.Value)},
		{"hop_flow_raw", uint64(r.FlowLabel)<<8 | uint64(r.HopLimit)},
		{"pkey", uint64(r.PKey)},
	} {
		v, err := strconv.ParseUint(sq[c.key], 0, 32)
		if err != nil || v != c.ours {
			t.Errorf("%s: saquery %q, the cache %#x", c.key, sq[c.key], c.ours)
		}
	}
	if r.DLID != ports["h3"].LID || r.SLID != ports["h2"].LID || !p.MTU.Valid() {
		t.Fatalf("record %+v: want h3's LID %d from h2's %d and an MTU", r, ports["h3"].LID, ports["h2"].LID)
	}
	// OpenSM's paths within its subnet have hop limit 0: LRH only, and
	// the REQ names the LIDs.
	wantAH := ib.Path{DLID: r.DLID, SL: r.SL, StaticRate: r.Rate.Value}
	if p.AH != wantAH {
		t.Errorf("AH path %+v, want %+v", p.AH, wantAH)
	}
	c := p.CM
	if c.RemoteLID != r.DLID || c.LocalLID != r.SLID || c.SL != r.SL || c.PacketRate != r.Rate.Value || !c.SubnetLocal ||
		c.LocalACKTimeout != ACKTimeout(0, r.Lifetime.Value) || c.RemoteGID.String() != ports["h3"].GID {
		t.Errorf("REQ path %+v from record %+v", c, r)
	}
	if p.MTU != r.MTU.MTU() {
		t.Errorf("MTU %v, record's %v", p.MTU, r.MTU.MTU())
	}
}

// client is this test binary run again as a node's client with arg: "port"
// or a GID to ask the path to (see child).
func client(arg string) *exec.Cmd { return ibsim.Child(arg) }
