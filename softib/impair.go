package softib

import (
	"net/netip"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// Impairment makes a device's receive path misbehave like a bad underlay:
// it reorders and duplicates datagrams, and injects copies whose PSN is far
// outside the window. It exists for tests of transport recovery: this
// kernel has no netem, and nftables can drop but not reorder or duplicate.
type Impairment struct {
	ReorderPercent   int // a datagram is held back and delivered after the next one
	DuplicatePercent int // a datagram is delivered twice
	FarPSNPercent    int // a copy with its PSN moved half the PSN space away is delivered too
	Seed             uint64
}

// Impaired counts what an impairment did.
type Impaired struct {
	Reordered, Duplicated, FarPSN atomic.Uint64
}

// impairer runs an Impairment on the receive goroutine.
type impairer struct {
	cfg     Impairment
	rng     uint64
	held    []byte
	heldSrc netip.AddrPort
	heldDst netip.Addr
	heldSeg int
	holding bool
	far     []byte
	stats   *Impaired
}

// Impair starts impairing received datagrams; call it before traffic
// starts. The returned counters show what was done.
func (d *Device) Impair(cfg Impairment) *Impaired {
	im := &impairer{cfg: cfg, rng: cfg.Seed | 1, held: make([]byte, 0, 1<<16), far: make([]byte, 0, 1<<16), stats: &Impaired{}}
	d.impair.Store(im)
	return im.stats
}

func (im *impairer) roll(percent int) bool {
	// xorshift64: cheap, deterministic for a seed.
	im.rng ^= im.rng << 13
	im.rng ^= im.rng >> 7
	im.rng ^= im.rng << 17
	return int(im.rng%100) < percent
}

// pass delivers b (with the impairments) to the device's real receive.
func (im *impairer) pass(d *Device, b []byte, src netip.AddrPort, dst netip.Addr, seg int) {
	if im.holding {
		im.holding = false
		d.receive(b, src, dst, seg)
		d.receive(im.held, im.heldSrc, im.heldDst, im.heldSeg) // overtaken by b
		return
	}
	if im.roll(im.cfg.ReorderPercent) {
		im.held = append(im.held[:0], b...)
		im.heldSrc, im.heldDst, im.heldSeg, im.holding = src, dst, seg, true
		im.stats.Reordered.Add(1)
		return
	}
	d.receive(b, src, dst, seg)
	if im.roll(im.cfg.DuplicatePercent) {
		im.stats.Duplicated.Add(1)
		d.receive(b, src, dst, seg)
	}
	if len(b) >= wire.BTHLen+wire.ICRCLen && im.roll(im.cfg.FarPSNPercent) {
		im.far = append(im.far[:0], b...)
		psn := ib.Get24(im.far[9:12]) // BTH octets 9-11
		ib.Put24(im.far[9:12], (psn+1<<23)&uint32(wire.PSNMask))
		wire.PutICRC(im.far[len(im.far)-wire.ICRCLen:], wire.DatagramICRC(im.far, src, dst, d.fab.port))
		im.stats.FarPSN.Add(1)
		d.receive(im.far, src, dst, 0)
	}
}

// flush delivers a datagram still held back at the end of a batch.
func (im *impairer) flush(d *Device) {
	if im.holding {
		im.holding = false
		d.receive(im.held, im.heldSrc, im.heldDst, im.heldSeg)
	}
}
