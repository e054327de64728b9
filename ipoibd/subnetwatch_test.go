package main

import (
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/softib"
	"github.com/ipoibd/ipoibd/umadsa"
)

// TestSubnetFollower feeds readings of the port to the follower: each
// step's reading, the port's LID and state after it and the subnet events
// counted so far.
func TestSubnetFollower(t *testing.T) {
	dev, err := softib.Open(softib.Config{Addr: netip.MustParseAddr("127.88.96.1"), Port: uint16(20000 + (os.Getpid()+13)%30000),
		LinkLayer: softib.LinkInfiniBand, IB: softib.IBConfig{LID: 3, SMLID: 1, Forwarder: netip.MustParseAddrPort("127.88.96.254:4790")}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	full := []ib.PKey{ib.DefaultPKey}
	up := func(lid, sm uint16, pkeys ...ib.PKey) umadsa.PortInfo {
		return umadsa.PortInfo{LID: lid, SMLID: sm, State: 4, Active: true, PKeys: pkeys}
	}
	f := subnetFollower{dev: dev, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, s := range []struct {
		name   string
		pi     umadsa.PortInfo
		err    error
		lid    uint16
		down   bool // the port not active after the step
		events uint64
	}{
		{name: "as opened", pi: up(3, 1, full...), lid: 3},
		{name: "read fails", err: errors.New("timeout"), lid: 3},
		{name: "LID moved", pi: up(5, 1, full...), lid: 5, events: 1},
		{name: "SM moved", pi: up(5, 2, full...), lid: 5, events: 2},
		{name: "port down: nothing taken, the port down", pi: umadsa.PortInfo{State: 2}, lid: 5, down: true, events: 2},
		{name: "still down", pi: umadsa.PortInfo{State: 1}, lid: 5, down: true, events: 2},
		{name: "up again unchanged: active, no event", pi: up(5, 2, full...), lid: 5, events: 2},
		{name: "down again", pi: umadsa.PortInfo{State: 1}, lid: 5, down: true, events: 2},
		{name: "up again with a new LID", pi: up(7, 2, full...), lid: 7, events: 3},
		{name: "P_Key table with a gap: kept", pi: up(7, 2, ib.DefaultPKey, 0, 0x8002), lid: 7, events: 3},
		{name: "P_Key added", pi: up(7, 2, ib.DefaultPKey, 0x8002), lid: 7, events: 4},
		{name: "multicast LID refused", pi: up(0xc001, 2, ib.DefaultPKey, 0x8002), lid: 7, events: 4},
	} {
		f.take(s.pi, s.err)
		if got := dev.Port().LID; got != s.lid || dev.SubnetEvents() != s.events {
			t.Fatalf("%s: LID %d, %d events; want %d, %d", s.name, got, dev.SubnetEvents(), s.lid, s.events)
		}
		// The underlay (loopback) is up: only the SM's word can make
		// the port down.
		if down := !dev.PortActive(); down != s.down {
			t.Fatalf("%s: port down %v, want %v", s.name, down, s.down)
		}
	}
}

// lidRecorder is an SA transport that notes the LID of each send and
// fails it, so that a request ends at once.
type lidRecorder struct{ lids []uint16 }

func (l *lidRecorder) Send(_ []byte, lid uint16, _ time.Duration) error {
	l.lids = append(l.lids, lid)
	return errors.New("recorded")
}

func (l *lidRecorder) Recv([]byte, time.Duration) (int, int, error) {
	return 0, 0, umadsa.ErrRecvTimeout
}

// TestSAFollowsTheSM: the SA client of an InfiniBand-link softib port
// sends to the SM LID the port's readings carry (portSMLID), not the one
// libibumad's sysfs gave at start: when the SM moves, the next request
// goes to its new LID.
func TestSAFollowsTheSM(t *testing.T) {
	dev, err := softib.Open(softib.Config{Addr: netip.MustParseAddr("127.88.96.2"), Port: uint16(20000 + (os.Getpid()+17)%30000),
		LinkLayer: softib.LinkInfiniBand, IB: softib.IBConfig{LID: 3, SMLID: 1, Forwarder: netip.MustParseAddrPort("127.88.96.254:4790")}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	f := subnetFollower{dev: dev, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tr := &lidRecorder{}
	sysfs := func() (uint16, error) { return 1, nil } // what umad2sim's sysfs says for ever
	sub := umadsa.New(tr, umadsa.Config{SMLID: sysfs, Timeout: time.Millisecond})
	sub.FollowSM(portSMLID(dev))
	for _, step := range []struct {
		name string
		sm   uint16 // the SM LID the port's SMA reports
	}{
		{"as opened", 1},
		{"the SM moved", 9},
		{"and back", 1},
	} {
		f.take(umadsa.PortInfo{LID: 3, SMLID: step.sm, State: 4, Active: true, PKeys: []ib.PKey{ib.DefaultPKey}}, nil)
		if _, err := sub.PathRecord(ib.GID{0xfe, 0x80}, ib.DefaultPKey); err == nil {
			t.Fatalf("%s: the request did not fail", step.name)
		}
		if got := tr.lids[len(tr.lids)-1]; got != step.sm {
			t.Fatalf("%s: the SA request went to LID %d, want the SM's %d", step.name, got, step.sm)
		}
	}
}
