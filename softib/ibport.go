package softib

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// Link layers a softib port can have (Config.LinkLayer, and what
// PortAttr.LinkLayer reports).
const (
	LinkEthernet   = "Ethernet"   // RoCEv2 framing, peers by GID-derived underlay address
	LinkInfiniBand = "InfiniBand" // native IB framing through a fabric forwarder, peers by LID
)

// IBConfig is the port's place on an InfiniBand subnet (Config.LinkLayer
// "InfiniBand"). On a real port the subnet manager assigns LID, LMC, SM
// LID, GID prefix and P_Key table; softib has none yet, so its owner gives
// them.
type IBConfig struct {
	LID       uint16 // the port's base LID, unicast
	LMC       uint8  // LID mask count, 0-7: the port answers to LID .. LID+2^LMC-1
	SMLID     uint16 // the subnet manager's LID
	GIDPrefix uint64 // the GID's upper half (default fe80::/64)
	// GUID is the port GUID, the GID's lower half (default: the lower
	// half of the GID the underlay address gives on RoCE).
	GUID uint64
	// Forwarder is the fabric forwarder's underlay address: every packet
	// leaves for it, and only packets from it are taken.
	Forwarder netip.AddrPort
}

// defaultGIDPrefix is the link-local subnet prefix fe80::/64.
const defaultGIDPrefix = 0xfe80_0000_0000_0000

// ibPort is the InfiniBand link layer state of a device; nil on RoCE.
type ibPort struct {
	cfg IBConfig // as opened; the subnet's current values are in addr
	// addr is what the subnet manager assigns now: swapped whole by
	// SetSubnet, loaded once per packet, so a packet never sees a LID of
	// one assignment with the LMC of another.
	addr   atomic.Pointer[ibAddr]
	events atomic.Uint64                    // subnet events raised (SubnetEvents)
	down   atomic.Bool                      // not ACTIVE by the SM's word (SetPortActive)
	mlids  atomic.Pointer[map[uint16][]*qp] // attached MLID -> QPs
	mgid   map[ib.GID]uint16                // attached MGID -> MLID (d.mu)
}

// ibAddr is the port's assignment by the subnet manager. Never changed
// once stored: a change stores a new one.
type ibAddr struct {
	lid   uint16
	lmc   uint8
	mask  uint16 // the LID's path bits under LMC
	smLID uint16
	pkeys []ib.PKey
}

// checkLIDs checks a LID, LMC and SM LID as a port would take them.
func checkLIDs(lid uint16, lmc uint8, smLID uint16) error {
	switch {
	case !wire.IsUnicastLID(lid):
		return fmt.Errorf("softib: LID %#x is not a unicast LID", lid)
	case lmc > 7:
		return fmt.Errorf("softib: LMC %d exceeds 7", lmc)
	case lid&(1<<lmc-1) != 0:
		return fmt.Errorf("softib: LID %#x is not aligned to its LMC %d", lid, lmc)
	case !wire.IsUnicastLID(lid + 1<<lmc - 1):
		return fmt.Errorf("softib: LIDs %#x+%d leave the unicast range", lid, 1<<lmc)
	case smLID != 0 && !wire.IsUnicastLID(smLID):
		return fmt.Errorf("softib: SM LID %#x is not a unicast LID", smLID)
	}
	return nil
}

// newIBPort checks cfg and fills its defaults; gid is the RoCE GID of the
// underlay address.
func newIBPort(cfg IBConfig, gid ib.GID) (*ibPort, error) {
	if err := checkLIDs(cfg.LID, cfg.LMC, cfg.SMLID); err != nil {
		return nil, err
	}
	if !cfg.Forwarder.IsValid() {
		return nil, errors.New("softib: an InfiniBand port needs the fabric forwarder's address")
	}
	if cfg.GIDPrefix == 0 {
		cfg.GIDPrefix = defaultGIDPrefix
	}
	if cfg.GUID == 0 {
		cfg.GUID = binary.BigEndian.Uint64(gid[8:])
	}
	p := &ibPort{cfg: cfg, mgid: map[ib.GID]uint16{}}
	p.mlids.Store(&map[uint16][]*qp{})
	return p, nil
}

// start stores the first assignment: the LIDs opened with and the
// device's P_Key table.
func (p *ibPort) start(pkeys []ib.PKey) {
	p.addr.Store(&ibAddr{lid: p.cfg.LID, lmc: p.cfg.LMC, mask: 1<<p.cfg.LMC - 1, smLID: p.cfg.SMLID, pkeys: pkeys})
}

// gid is the port GID: subnet prefix and port GUID.
func (p *ibPort) gid() (g ib.GID) {
	binary.BigEndian.PutUint64(g[:8], p.cfg.GIDPrefix)
	binary.BigEndian.PutUint64(g[8:], p.cfg.GUID)
	return g
}

// ours reports whether a unicast DLID names this port: its base LID with
// any path bits, or the permissive LID.
func (a *ibAddr) ours(dlid uint16) bool {
	return dlid == wire.PermissiveLID || dlid&^a.mask == a.lid
}

// ibRoute is how an InfiniBand-link packet is addressed: its LRH and,
// when grh is set, its GRH. The zero value is the RoCE case (unused).
type ibRoute struct {
	dlid     uint16
	pathBits uint16 // the SLID's path bits; its base is our LID when sent
	sl       uint8
	grh      bool
	tclass   uint8
	hopLmt   uint8
	flow     uint32
	dgid     ib.GID
}

// route turns a path to dgid into the headers this port sends. The SLID
// is not fixed here: a QP or AH made before the SM moved our LID sends
// from the new one, as an HCA takes its port's LID at send time.
func (d *Device) route(p ib.Path, dgid ib.GID) ibRoute {
	r := ibRoute{dlid: p.DLID, pathBits: uint16(p.SrcPathBits) & 0x7f, sl: p.SL & 15}
	if p.GRH {
		r.grh, r.tclass, r.hopLmt, r.flow, r.dgid = true, p.TrafficClass, p.HopLimit, p.FlowLabel&0xfffff, dgid
	}
	return r
}

// linkOverhead is what the link layer adds around an IB transport packet:
// LRH, GRH and VCRC on InfiniBand, nothing on RoCE (its IP and UDP headers
// are the underlay's).
func (d *Device) linkOverhead(r *ibRoute) int {
	if d.ibp == nil {
		return 0
	}
	if r.grh {
		return wire.LRHLen + ib.GRHLen + wire.VCRCLen
	}
	return wire.LRHLen + wire.VCRCLen
}

// frameIB adds one native IB frame to tx as its seg-th datagram: LRH, GRH
// if the route has one, the transport headers of p, the payload straight
// from registered memory, pad, ICRC and VCRC, each CRC computed over the
// pieces where they lie.
func (d *Device) frameIB(tx *txMsg, seg int, r *ibRoute, p *wire.Packet, payload []byte) {
	a := d.ibp.addr.Load()
	f := wire.IBFrame{LRH: wire.LRH{SL: r.sl, DLID: r.dlid, SLID: a.lid | r.pathBits&a.mask}, HasGRH: r.grh, Packet: *p}
	if r.grh {
		f.GRH = wire.GRH{TClass: r.tclass, FlowLabel: r.flow, HopLmt: r.hopLmt, SGID: d.port.GID, DGID: r.dgid}
	}
	n, _ := wire.PutIBHeaders(tx.hdr[seg][:], &f, len(payload)) // fields were range-checked when posted
	hdr := tx.hdr[seg][:n]
	pad := wire.PadCount(len(payload))
	trl := tx.trl[seg][:int(pad)+wire.ICRCLen+wire.VCRCLen]
	clear(trl[:pad])
	var grh []byte
	off := wire.LRHLen
	if r.grh {
		grh = hdr[wire.LRHLen : wire.LRHLen+ib.GRHLen]
		off += ib.GRHLen
	}
	ic, _ := wire.StartIBICRC(hdr[:wire.LRHLen], grh)
	ic.Update(hdr[off:])
	ic.Update(payload)
	ic.Update(trl[:pad])
	wire.PutICRC(trl[pad:], ic.Sum32())
	vc := wire.StartVCRC()
	vc.Update(hdr)
	vc.Update(payload)
	vc.Update(trl[:int(pad)+wire.ICRCLen])
	wire.PutVCRC(trl[int(pad)+wire.ICRCLen:], vc.Sum16())
	tx.add(hdr)
	tx.add(payload)
	tx.add(trl)
	tx.segments++
	tx.bytes += len(hdr) + len(payload) + len(trl)
}

// rxSource is what the LRH and GRH of the packet being received say about
// its sender (receive goroutine).
type rxSource struct {
	slid, dlid uint16
	sl         uint8
	grh        bool
	sgid       ib.GID
	tclass     uint8
	flow       uint32
	hopLimit   uint8
}

// receiveIB checks one native IB frame as a port does and delivers it:
// only from the forwarder (the port's one link), VCRC then ICRC, a DLID of
// ours (our LID under the LMC, the permissive LID, or an MLID a QP is
// attached to), a P_Key the port holds.
func (d *Device) receiveIB(b []byte, src netip.AddrPort) {
	d.rxCount.add(len(b))
	p := d.ibp
	if src != p.cfg.Forwarder {
		d.count(dropWrongSource)
		return
	}
	f := &d.rxFrame
	if err := wire.ParseIBFrame(b, f); err != nil {
		d.count(dropMalformed)
		return
	}
	vcrcOK, icrcOK := wire.CheckIBCRCs(b, f.HasGRH)
	switch {
	case !vcrcOK:
		d.count(dropBadVCRC)
		return
	case !icrcOK:
		d.count(dropBadICRC)
		return
	}
	dlid := f.LRH.DLID
	multicast := wire.IsMulticastLID(dlid)
	switch {
	case dlid == 0:
		d.count(dropDLIDZero)
		return
	case !multicast && !p.addr.Load().ours(dlid):
		d.count(dropWrongDLID)
		return
	}
	pkt := &f.Packet
	if !d.portAccepts(pkt.BTH.PKey) {
		d.count(dropPKey)
		return
	}
	d.rxFrom = rxSource{slid: f.LRH.SLID, dlid: dlid, sl: f.LRH.SL, grh: f.HasGRH, sgid: f.GRH.SGID,
		tclass: f.GRH.TClass, flow: f.GRH.FlowLabel, hopLimit: f.GRH.HopLmt}
	if multicast || pkt.BTH.DestQP == ib.MulticastQPN {
		members := (*p.mlids.Load())[dlid]
		if !multicast || len(members) == 0 || pkt.BTH.DestQP != ib.MulticastQPN || pkt.BTH.Opcode != wire.OpUDSendOnly {
			d.count(dropNotMember)
			return
		}
		for _, q := range members {
			q.recvUD(pkt, src.Addr())
		}
		return
	}
	d.deliver(pkt, src.Addr(), d.fab.local)
}

// attachMLID makes q a member of the group with this MLID. There is no
// underlay group to join: the forwarder's multicast table decides who
// gets the group's packets, as a switch's MFT does.
func (d *Device) attachMLID(q *qp, mgid ib.GID, mlid uint16) error {
	if !wire.IsMulticastLID(mlid) {
		return fmt.Errorf("softib: %#x is not a multicast LID", mlid)
	}
	p := d.ibp
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := p.mgid[mgid]; ok && old != mlid {
		return fmt.Errorf("softib: %v is attached with MLID %#x, not %#x", mgid, old, mlid)
	}
	old := *p.mlids.Load()
	if slices.Contains(old[mlid], q) {
		return nil // attached already: as on an HCA, once is enough
	}
	m := make(map[uint16][]*qp, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[mlid] = append(append([]*qp(nil), old[mlid]...), q)
	p.mgid[mgid] = mlid
	p.mlids.Store(&m)
	return nil
}

// detachMLID undoes attachMLID.
func (d *Device) detachMLID(q *qp, mgid ib.GID) error {
	p := d.ibp
	d.mu.Lock()
	defer d.mu.Unlock()
	mlid, ok := p.mgid[mgid]
	if !ok {
		return fmt.Errorf("softib: QP %v is not attached to %v", q.num, mgid)
	}
	old := *p.mlids.Load()
	var kept []*qp
	found := false
	for _, m := range old[mlid] {
		if m == q && !found {
			found = true
			continue
		}
		kept = append(kept, m)
	}
	if !found {
		return fmt.Errorf("softib: QP %v is not attached to %v", q.num, mgid)
	}
	m := make(map[uint16][]*qp, len(old))
	for k, v := range old {
		m[k] = v
	}
	if len(kept) == 0 {
		delete(m, mlid)
		delete(p.mgid, mgid)
	} else {
		m[mlid] = kept
	}
	p.mlids.Store(&m)
	return nil
}
