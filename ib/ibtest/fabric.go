package ibtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
)

// MaxMessage is the largest RC or UC message a QP sends: a 64 KiB IPoIB
// connected-mode packet and its header fit.
const MaxMessage = 1 << 16

// Fabric is an in-memory subnet: the devices opened on it reach each other
// by GID, and those opened with a LID also by LID, as on an InfiniBand
// subnet: a UD datagram sent by an address handle that names a LID goes to
// that LID's port, with a GRH only if the handle asks for one, and its
// completion reports the sender's LID, the SL and whether a GRH came (the
// source GID only then).
type Fabric struct {
	mu      sync.Mutex
	devices map[ib.GID]*Device
	lids    map[uint16]*Device
	opened  int    // devices opened so far: default names and GUIDs
	nextQPN ib.QPN // QPNs are unique fabric-wide and never reused

	imp     Impair
	rng     *rand.Rand
	held    *packet // a datagram held back to be delivered after the next
	counted [numFabricCounters]atomic.Uint64
}

// Impair asks the fabric to lose and reorder unreliable traffic (UD, UC,
// MADs). Draws come from a generator seeded with Seed, so a test that
// sends the same sequence from one goroutine sees the same losses.
type Impair struct {
	Drop    float64 // probability that a datagram or UC message is lost
	Reorder float64 // probability that one is held back and delivered after the next
	Seed    uint64
}

type fabricCounter int

const (
	fabricDropped   fabricCounter = iota // lost by SetImpair
	fabricReordered                      // held back by SetImpair
	fabricNoDest                         // sent to a GID no device holds
	numFabricCounters
)

var fabricCounterNames = [numFabricCounters]string{
	fabricDropped:   "impair_dropped",
	fabricReordered: "impair_reordered",
	fabricNoDest:    "no_destination",
}

// NewFabric returns an empty fabric.
func NewFabric() *Fabric {
	return &Fabric{devices: map[ib.GID]*Device{}, lids: map[uint16]*Device{}, nextQPN: 0x000100}
}

// SetImpair sets the loss and reordering from now on; the zero Impair
// turns them off (a datagram held back is delivered first).
func (f *Fabric) SetImpair(im Impair) {
	f.mu.Lock()
	f.imp = im
	f.rng = rand.New(rand.NewPCG(im.Seed, im.Seed^0x9e3779b97f4a7c15))
	held := f.held
	f.held = nil
	f.mu.Unlock()
	if held != nil {
		f.deliver(held)
	}
}

// Flush delivers a datagram that SetImpair's reordering holds back.
func (f *Fabric) Flush() {
	f.mu.Lock()
	held := f.held
	f.held = nil
	f.mu.Unlock()
	if held != nil {
		f.deliver(held)
	}
}

// Counters returns the fabric's counters: impair_dropped,
// impair_reordered and no_destination.
func (f *Fabric) Counters() []ib.Counter {
	out := make([]ib.Counter, numFabricCounters)
	for k := range numFabricCounters {
		out[k] = ib.Counter{Name: fabricCounterNames[k], Value: f.counted[k].Load()}
	}
	return out
}

// Config describes a device to open; zero fields take defaults.
type Config struct {
	Name      string    // default "ibtestN", N counting the fabric's devices from 0
	GUID      uint64    // default 0x0002c90300000001 + N
	GID       ib.GID    // default fe80::GUID (the link-local prefix and the GUID)
	PKeys     []ib.PKey // default [0xffff]
	ActiveMTU ib.MTU    // default 4096
	LinkLayer string    // default "InfiniBand"
	// LID is the port's LID on a LID-routed fabric (0: none, the port is
	// reached by GID alone, as on RoCE).
	LID uint16
	// MaxQPWR caps the send queue depth a QP is granted, as a verbs
	// device's max_qp_wr does (0: as asked).
	MaxQPWR int
}

// Open brings up a device on the fabric.
func (f *Fabric) Open(cfg Config) (*Device, error) {
	if len(cfg.PKeys) == 0 {
		cfg.PKeys = []ib.PKey{ib.DefaultPKey}
	}
	for _, p := range cfg.PKeys {
		if !p.Valid() {
			return nil, fmt.Errorf("ibtest: P_Key %v names no partition", p)
		}
	}
	if cfg.ActiveMTU == 0 {
		cfg.ActiveMTU = ib.MTU4096
	}
	if !cfg.ActiveMTU.Valid() {
		return nil, fmt.Errorf("ibtest: active MTU %v", cfg.ActiveMTU)
	}
	if cfg.LinkLayer == "" {
		cfg.LinkLayer = "InfiniBand"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.opened
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("ibtest%d", n)
	}
	if cfg.GUID == 0 {
		cfg.GUID = 0x0002c90300000001 + uint64(n)
	}
	if cfg.GID == (ib.GID{}) {
		cfg.GID[0], cfg.GID[1] = 0xfe, 0x80
		binary.BigEndian.PutUint64(cfg.GID[8:], cfg.GUID)
	}
	if cfg.GID.IsMulticast() {
		return nil, fmt.Errorf("ibtest: port GID %v is multicast", cfg.GID)
	}
	if _, taken := f.devices[cfg.GID]; taken {
		return nil, fmt.Errorf("ibtest: GID %v is already on the fabric", cfg.GID)
	}
	if cfg.LID >= 0xc000 {
		return nil, fmt.Errorf("ibtest: LID %#x is not a unicast LID", cfg.LID)
	}
	if _, taken := f.lids[cfg.LID]; taken && cfg.LID != 0 {
		return nil, fmt.Errorf("ibtest: LID %#x is already on the fabric", cfg.LID)
	}
	f.opened++
	d := &Device{
		fab:  f,
		name: cfg.Name,
		port: ib.PortAttr{GID: cfg.GID, PKeys: slices.Clone(cfg.PKeys), ActiveMTU: cfg.ActiveMTU,
			LinkLayer: cfg.LinkLayer, GUID: cfg.GUID, LID: cfg.LID},
		maxWR:  cfg.MaxQPWR,
		qps:    map[ib.QPN]*qp{},
		groups: map[ib.GID][]*qp{},
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	f.devices[cfg.GID] = d
	if cfg.LID != 0 {
		f.lids[cfg.LID] = d
	}
	go d.run()
	return d, nil
}

// newQPN draws a QP number no QP of the fabric had.
func (f *Fabric) newQPN() ib.QPN {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nextQPN
	f.nextQPN = (f.nextQPN + 1) & ib.QPNMask
	if f.nextQPN < 2 {
		f.nextQPN = 2
	}
	return n
}

func (f *Fabric) device(gid ib.GID) *Device {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.devices[gid]
}

func (f *Fabric) remove(d *Device) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.devices[d.port.GID] == d {
		delete(f.devices, d.port.GID)
	}
	if f.lids[d.port.LID] == d {
		delete(f.lids, d.port.LID)
	}
}

// send carries p to its destination, through the impairment when p is
// unreliable traffic.
func (f *Fabric) send(p *packet) {
	if p.kind == kindRC || p.kind == kindAck {
		f.deliver(p)
		return
	}
	f.mu.Lock()
	var release *packet
	if f.rng != nil {
		switch r := f.rng.Float64(); {
		case r < f.imp.Drop:
			f.mu.Unlock()
			f.counted[fabricDropped].Add(1)
			return
		case r < f.imp.Drop+f.imp.Reorder && f.held == nil:
			f.held = p
			f.mu.Unlock()
			f.counted[fabricReordered].Add(1)
			return
		}
	}
	release, f.held = f.held, nil
	f.mu.Unlock()
	f.deliver(p)
	if release != nil {
		f.deliver(release)
	}
}

// deliver hands p to the device(s) it is for.
func (f *Fabric) deliver(p *packet) {
	if p.dgid.IsMulticast() {
		f.mu.Lock()
		ds := make([]*Device, 0, len(f.devices))
		for _, d := range f.devices {
			ds = append(ds, d)
		}
		f.mu.Unlock()
		for k, d := range ds {
			q := p
			if k > 0 {
				q = p.clone()
			}
			d.enqueue(q)
		}
		return
	}
	d := f.device(p.dgid)
	if p.dlid != 0 {
		f.mu.Lock()
		d = f.lids[p.dlid]
		f.mu.Unlock()
	}
	if d == nil {
		f.counted[fabricNoDest].Add(1)
		if p.kind == kindRC {
			p.nack(ib.WCRetryExceeded)
		}
		return
	}
	d.enqueue(p)
}

// packetKind is what a packet carries.
type packetKind uint8

const (
	kindUD     packetKind = iota // a UD datagram (unicast or multicast)
	kindMAD                      // a datagram for QP1
	kindRC                       // a whole RC message
	kindUC                       // a whole UC message
	kindAck                      // the outcome of an RC message, back to its sender
	kindSettle                   // Device.Settle's marker
)

// packet is one datagram, message or acknowledgement in flight.
type packet struct {
	kind   packetKind
	sgid   ib.GID
	dgid   ib.GID
	srcQPN ib.QPN
	dstQPN ib.QPN
	pkey   ib.PKey
	qkey   ib.QKey
	data   []byte
	// UD on a LID-routed fabric: the LRH's DLID (0: by dgid) and SLID,
	// its SL, and whether a GRH goes with it.
	dlid, slid uint16
	sl         uint8
	grh        bool
	// RC: the sender's QP (for the outcome), the message's sequence
	// number on it and its RNR retry count; kindAck: the outcome.
	from     *qp
	seq      uint64
	rnrRetry uint8
	rnrs     uint8
	status   ib.WCStatus
	settled  chan struct{} // kindSettle
}

func (p *packet) clone() *packet {
	c := *p
	c.data = slices.Clone(p.data)
	return &c
}

// nack tells an RC sender its message failed with status.
func (p *packet) nack(status ib.WCStatus) { p.ack(status) }

// ack tells an RC sender how its message ended.
func (p *packet) ack(status ib.WCStatus) {
	if p.from == nil {
		return
	}
	p.from.dev.enqueue(&packet{kind: kindAck, from: p.from, seq: p.seq, status: status})
}

// errorf makes an error naming the package.
func errorf(format string, args ...any) error {
	return errors.New("ibtest: " + fmt.Sprintf(format, args...))
}

// route addresses a UD datagram from d by path on a LID-routed fabric: a
// path naming a unicast LID sends it there, with a GRH only if the path
// asks; multicast and GID-only paths go by GID with a GRH. The SLID is
// d's LID with the path's source path bits. A port without a LID sends
// by GID, as on RoCE.
func (d *Device) route(p *packet, path ib.Path) {
	if d.port.LID == 0 {
		return
	}
	p.slid, p.sl = d.port.LID|uint16(path.SrcPathBits), path.SL&0xf
	p.grh = true
	if path.LIDRouted() && path.DLID < 0xc000 && !p.dgid.IsMulticast() {
		p.dlid, p.grh = path.DLID, path.GRH
	}
}
