package ibfwd

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The paths packets took. A subnet manager's tables decide the way of
// every (SLID, DLID) pair; what ibtracert shows for two LIDs is the way
// they say. With RecordPaths the forwarder notes the way each pair's
// packets really went through it, for a test to compare with ibtracert.

// HopRoutes is a Routes that knows the switches a unicast packet crosses
// (Subnet does; Static and Switch do not).
type HopRoutes interface {
	Routes
	// Hops returns the switches a packet from the CA port from to the
	// unicast lid crosses, in order, without allocating: the slice is
	// the Routes', not to be changed. ok is false where there is no
	// route.
	Hops(from uint64, lid uint16) (_ []Hop, ok bool)
}

// PathRecord is the way the unicast packets from SLID to DLID went: from
// the CA port From through the switches Hops (none known where the
// Routes is no HopRoutes) to the CA port To.
type PathRecord struct {
	SLID, DLID uint16
	From, To   uint64
	Hops       []Hop
}

// String writes the record as ParsePathRecord reads it:
// "slid 1 dlid 3 from 0x… to 0x… hops 0x…:1>7 0x…:7>2" (each hop the
// switch's node GUID, the port the packet came in on and the one it left
// on).
func (p PathRecord) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slid %d dlid %d from %#016x to %#016x hops", p.SLID, p.DLID, p.From, p.To)
	for _, h := range p.Hops {
		fmt.Fprintf(&b, " %#016x:%d>%d", h.Switch, h.In, h.Out)
	}
	return b.String()
}

var pathRE = regexp.MustCompile(`^slid (\d+) dlid (\d+) from (0x[0-9a-f]+) to (0x[0-9a-f]+) hops((?: 0x[0-9a-f]+:\d+>\d+)*)$`)

// ParsePathRecord reads what PathRecord.String writes.
func ParsePathRecord(s string) (PathRecord, error) {
	m := pathRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return PathRecord{}, fmt.Errorf("ibfwd: path record %q: want \"slid N dlid N from GUID to GUID hops GUID:IN>OUT ...\"", s)
	}
	slid, err1 := strconv.ParseUint(m[1], 10, 16)
	dlid, err2 := strconv.ParseUint(m[2], 10, 16)
	from, err3 := strconv.ParseUint(m[3], 0, 64)
	to, err4 := strconv.ParseUint(m[4], 0, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return PathRecord{}, fmt.Errorf("ibfwd: path record %q: %w", s, err)
	}
	p := PathRecord{SLID: uint16(slid), DLID: uint16(dlid), From: from, To: to}
	for _, h := range strings.Fields(m[5]) {
		g, ports, _ := strings.Cut(h, ":")
		in, out, _ := strings.Cut(ports, ">")
		sw, err1 := strconv.ParseUint(g, 0, 64)
		i, err2 := strconv.Atoi(in)
		o, err3 := strconv.Atoi(out)
		if err1 != nil || err2 != nil || err3 != nil || i > 255 || o > 255 {
			return PathRecord{}, fmt.Errorf("ibfwd: path record %q: hop %q", s, h)
		}
		p.Hops = append(p.Hops, Hop{Switch: sw, In: i, Out: o})
	}
	return p, nil
}

var tracertHop = regexp.MustCompile(`(?m)^\[(\d+)\] -> (switch|ca) port \{(0x[0-9a-f]+)\}\[(\d+)\]`)

// ParseTracert reads ibtracert's hops: lines "[out] -> switch port
// {GUID}[in] ..." (out is the port the node before sends on), and last
// "[out] -> ca port {GUID}[1] ...": the switches crossed and the CA port
// reached, comparable with a PathRecord's Hops and To.
func ParseTracert(out string) (hops []Hop, to uint64, err error) {
	m := tracertHop.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return nil, 0, fmt.Errorf("ibfwd: no hops in ibtracert's %q", out)
	}
	for i, r := range m {
		g, _ := strconv.ParseUint(r[3], 0, 64)
		if r[2] == "ca" {
			return hops, g, nil
		}
		in, _ := strconv.Atoi(r[4])
		if i+1 >= len(m) {
			break
		}
		outp, _ := strconv.Atoi(m[i+1][1])
		hops = append(hops, Hop{Switch: g, In: in, Out: outp})
	}
	return nil, 0, fmt.Errorf("ibfwd: ibtracert's %q reaches no CA", out)
}

// paths is the forwarder's record of the ways pairs took.
type paths struct {
	mu     sync.Mutex // guards writes to byPair, and reads from other goroutines
	report func(PathRecord)
	byPair map[[2]uint16]PathRecord
}

// RecordPaths has the forwarder note, for every (SLID, DLID) pair of the
// unicast packets it delivers, the way they went (Paths), and tell
// report, if not nil, from the forwarding goroutine, of each new pair
// and of each pair whose way changed (new tables). Noting costs a lookup
// per packet and nothing more once a pair is known.
func (f *Forwarder) RecordPaths(report func(PathRecord)) {
	f.paths.mu.Lock()
	defer f.paths.mu.Unlock()
	f.paths.report = report
	if f.paths.byPair == nil {
		f.paths.byPair = map[[2]uint16]PathRecord{}
	}
	f.pathsOn.Store(true)
}

// Paths returns the ways noted since RecordPaths, by SLID then DLID.
func (f *Forwarder) Paths() []PathRecord {
	f.paths.mu.Lock()
	defer f.paths.mu.Unlock()
	out := make([]PathRecord, 0, len(f.paths.byPair))
	for _, p := range f.paths.byPair {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b PathRecord) int {
		return cmp.Or(cmp.Compare(a.SLID, b.SLID), cmp.Compare(a.DLID, b.DLID))
	})
	return out
}

// notePath records a unicast packet's way, from the forwarding goroutine
// (the only writer, so its reads need no lock).
func (f *Forwarder) notePath(r Routes, slid, dlid uint16, from, to uint64) {
	var hops []Hop
	if hr, ok := r.(HopRoutes); ok {
		hops, _ = hr.Hops(from, dlid)
	}
	key := [2]uint16{slid, dlid}
	old, seen := f.paths.byPair[key]
	if seen && old.From == from && old.To == to && slices.Equal(old.Hops, hops) {
		return
	}
	p := PathRecord{SLID: slid, DLID: dlid, From: from, To: to, Hops: slices.Clone(hops)}
	f.paths.mu.Lock()
	f.paths.byPair[key] = p
	report := f.paths.report
	f.paths.mu.Unlock()
	if report != nil {
		report(p)
	}
}
