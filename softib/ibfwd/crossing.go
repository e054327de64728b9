package ibfwd

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/ipoibd/ipoibd/softib/wire"
)

// Crossing REQs on demand. Two CM peers that connect to each other at
// once send REQs that cross on the wire, each sent before its sender saw
// the other's; on a real fabric that needs luck with timing. With
// CrossREQs the forwarder makes it happen: a CM REQ from port A to port
// B is held until a REQ from B to A comes, and then both go on. A REQ
// nobody answers that way goes on alone once the hold is over.

// The CM REQ as the forwarder recognises it: a MAD to QP1 (UD SEND Only,
// DETH, then the MAD) of management class CM with attribute ID REQ (IBA
// Vol 1 §13.4.2, §12.6.5). ibfwd knows no MAD codec (its layer is the
// fabric), so these are its own constants.
const (
	madClassCM   = 0x07
	madAttrREQ   = 0x0010
	madHeaderLen = 24
)

// Crossing is what became of one held REQ.
type Crossing struct {
	From, To   uint64 // port GUIDs of the REQ held first
	SLID, DLID uint16
	// Crossed: a REQ the other way came within the hold and both were
	// delivered, the held one first; else the REQ waited the hold out and
	// was delivered alone.
	Crossed bool
	Waited  time.Duration
}

func (c Crossing) String() string {
	if c.Crossed {
		return fmt.Sprintf("crossed: REQ LID %d -> %d held %v until the REQ LID %d -> %d came; both delivered",
			c.SLID, c.DLID, c.Waited.Round(time.Millisecond), c.DLID, c.SLID)
	}
	return fmt.Sprintf("alone: REQ LID %d -> %d held %v, no REQ back; delivered alone", c.SLID, c.DLID, c.Waited.Round(time.Millisecond))
}

// crossing is the forwarder's hold of REQs.
type crossing struct {
	mu     sync.Mutex
	hold   time.Duration // 0: REQs pass at once
	report func(Crossing)
	held   map[[2]uint64]*heldREQ // by (from, to) port GUIDs
	closed bool
}

// heldREQ is one direction's held REQs: the first and any retransmission
// that came while it waited, copies made as they arrived.
type heldREQ struct {
	crossing Crossing
	since    time.Time
	dst      netip.AddrPort
	frames   [][]byte
	timer    *time.Timer
}

// CrossREQs has the forwarder hold each CM REQ (a MAD to QP1 of class CM,
// attribute REQ) from one port to another for up to hold, until a REQ
// from that port back to the first comes: then both are delivered, so
// each peer sent its REQ before it saw the other's. A REQ that waited the
// whole hold is delivered alone. Both outcomes are counted
// (reqs_crossed, reqs_held_alone) and told to report, if not nil, from
// the forwarding goroutine or a timer's. hold 0 turns holding off; REQs
// held then are delivered when their hold ends.
func (f *Forwarder) CrossREQs(hold time.Duration, report func(Crossing)) {
	f.cross.mu.Lock()
	defer f.cross.mu.Unlock()
	f.cross.hold, f.cross.report = max(hold, 0), report
	f.crossOn.Store(hold > 0)
}

// isCMREQ reports whether fr, a frame the forwarder parsed, is a CM REQ.
func isCMREQ(fr *wire.IBFrame) bool {
	m := fr.Packet.Payload
	return fr.Packet.BTH.DestQP == 1 && fr.Packet.BTH.Opcode == wire.OpUDSendOnly && len(m) >= madHeaderLen &&
		m[1] == madClassCM && binary.BigEndian.Uint16(m[16:18]) == madAttrREQ
}

// holdREQ decides on the frame b, a CM REQ about to leave from port from
// to port to at dst: it is kept (true) when it is the first REQ of its
// direction or joins one held, or it goes on (false) after delivering the
// REQs held the other way, which it crosses.
func (f *Forwarder) holdREQ(b []byte, from, to uint64, dst netip.AddrPort, slid, dlid uint16) bool {
	c := &f.cross
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold <= 0 || c.closed {
		return false
	}
	if back := c.held[[2]uint64{to, from}]; back != nil {
		back.timer.Stop()
		delete(c.held, [2]uint64{to, from})
		f.crossReleased(back, true)
		return false
	}
	if h := c.held[[2]uint64{from, to}]; h != nil {
		h.frames = append(h.frames, slices.Clone(b))
		return true
	}
	if c.held == nil {
		c.held = map[[2]uint64]*heldREQ{}
	}
	h := &heldREQ{crossing: Crossing{From: from, To: to, SLID: slid, DLID: dlid}, since: time.Now(), dst: dst, frames: [][]byte{slices.Clone(b)}}
	key := [2]uint64{from, to}
	h.timer = time.AfterFunc(c.hold, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.held[key] != h { // crossed (or closed) meanwhile
			return
		}
		delete(c.held, key)
		f.crossReleased(h, false)
	})
	c.held[key] = h
	return true
}

// crossReleased delivers h's frames and counts and tells the outcome;
// f.cross.mu is held.
func (f *Forwarder) crossReleased(h *heldREQ, crossed bool) {
	for _, b := range h.frames {
		if _, err := f.conn.WriteToUDPAddrPort(b, h.dst); err != nil {
			f.count(dropTxError)
			continue
		}
		f.tx.Add(1)
	}
	if crossed {
		f.reqsCrossed.Add(1)
	} else {
		f.reqsAlone.Add(1)
	}
	h.crossing.Crossed, h.crossing.Waited = crossed, time.Since(h.since)
	if f.cross.report != nil {
		f.cross.report(h.crossing)
	}
}

// closeCrossing drops what is held: the forwarder is going away.
func (f *Forwarder) closeCrossing() {
	c := &f.cross
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for k, h := range c.held {
		h.timer.Stop()
		delete(c.held, k)
	}
}
