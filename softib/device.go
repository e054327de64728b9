package softib

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ib/ibqueue"
	"github.com/ipoibd/ipoibd/softib/wire"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Config says where a softib device lives.
type Config struct {
	// Name is the device name reported to the daemon (default "softib0").
	Name string
	// Addr is the underlay address; the port GID is derived from it.
	Addr netip.Addr
	// Port is the UDP port of the fabric (default 4791, RoCEv2's).
	Port uint16
	// PKeys is the port's P_Key table (default [0xffff]); the first is
	// the port's default. A real port's table is the subnet manager's to
	// set; softib has none, so its owner sets it here.
	PKeys []ib.PKey
	// MaxMTU caps the active path MTU (default: the largest that fits the
	// underlay interface's MTU).
	MaxMTU ib.MTU
	// LinkLayer is LinkEthernet (the default: RoCEv2 framing, peers at
	// the underlay addresses their GIDs give) or LinkInfiniBand (native
	// IB framing carried in UDP to the fabric forwarder in IB, peers
	// addressed by LID).
	LinkLayer string
	// IB places the port on its InfiniBand subnet (LinkInfiniBand only).
	IB IBConfig
	// RxBatch is how many datagrams (or GRO trains of up to 64 KiB) one
	// receive call takes (default 16, the most). Each costs a 68 KiB
	// buffer; a device that only exchanges MADs, such as each of a load
	// generator's thousands of simulated peers, needs 1.
	RxBatch int
}

// Device is a software InfiniBand adapter with one port. It implements
// ib.Device.
type Device struct {
	cfg  Config
	port ib.PortAttr
	fab  *fabric
	nl   *netlink.Handle // in the underlay's namespace: the port's state
	ibp  *ibPort         // InfiniBand link layer; nil on RoCE

	mu     sync.Mutex
	qps    qpTable                              // read lock-free per packet
	groups atomic.Pointer[map[netip.Addr][]*qp] // underlay group -> attached QPs
	mgids  map[netip.Addr]ib.GID
	qpns   qpnAllocator
	gsi    *qp
	mads   ibqueue.MADs // QP1's receive side

	// Owned by the receive goroutine.
	rxCount rxCount // not yet in ctr
	rxPkt   wire.Packet
	rxID    uint16       // IPv4 ID of the last packet received (wire.DatagramPath.Check)
	rxPath  icrcPath     // checks the ICRCs from the last packet's sender
	rxFrame wire.IBFrame // InfiniBand link: the frame being received
	rxFrom  rxSource     // InfiniBand link: its sender, from LRH and GRH
	acks    []*qp        // responders owing an ACK at the end of this batch
	touched []*cq        // CQs to signal at the end of this batch
	// recvLow: a receive queue is half empty or less (takeRecv); the
	// consumers that run here run before the batch ends (endTrain).
	recvLow atomic.Bool
	ackTx   txMsg

	ctr    deviceCounters
	impair atomic.Pointer[impairer] // tests only: a misbehaving underlay
	closed atomic.Bool
	rxDone chan struct{}
}

// A Device is an ib.Device with every optional capability (ib.Caps).
var (
	_ ib.Device         = (*Device)(nil)
	_ ib.CQHandlerMaker = (*Device)(nil)
	_ ib.SubnetEventer  = (*Device)(nil)
	_ ib.PortStater     = (*Device)(nil)
	_ ib.QPCounterNamer = (*Device)(nil)
)

// CQHandlers reports that every CQ the device makes implements
// ib.CQHandler: the receive goroutine runs its consumer.
func (d *Device) CQHandlers() bool { return true }

// Overheads of one IB packet on the underlay beyond its payload: the largest
// header set (BTH + DETH) and the ICRC.
const ibOverhead = 12 + 8 + 4

// Open brings up a device on the underlay address.
func Open(cfg Config) (*Device, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ibp, gid, overhead, err := openLinkLayer(&cfg)
	if err != nil {
		return nil, err
	}
	fab, err := openFabric(cfg.Addr, cfg.Port)
	if err != nil {
		return nil, err
	}
	if ibp != nil {
		fab.fwd = ibp.cfg.Forwarder
	}
	mtu, err := activeMTU(fab, overhead, cfg.MaxMTU)
	if err != nil {
		fab.close()
		return nil, err
	}
	// Made now, in the underlay's network namespace; PortActive may be
	// called from a thread in another.
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		fab.close()
		return nil, fmt.Errorf("softib: netlink: %w", err)
	}
	d := &Device{
		cfg: cfg,
		fab: fab,
		nl:  nl,
		ibp: ibp,
		port: ib.PortAttr{
			GID:       gid,
			PKeys:     cfg.PKeys,
			ActiveMTU: mtu,
			LinkLayer: cfg.LinkLayer,
			GUID:      binary.BigEndian.Uint64(gid[8:]),
		},
		mgids:  map[netip.Addr]ib.GID{},
		rxDone: make(chan struct{}),
	}
	if ibp != nil {
		d.port.LID, d.port.LMC, d.port.SMLID = ibp.cfg.LID, ibp.cfg.LMC, ibp.cfg.SMLID
		ibp.start(cfg.PKeys)
	}
	d.groups.Store(&map[netip.Addr][]*qp{})
	d.openGSI()
	go func() {
		defer close(d.rxDone)
		fab.run(d, cfg.RxBatch)
	}()
	return d, nil
}

// withDefaults checks cfg and fills in what it leaves out: the name, the
// receive batch, RoCEv2's port and the default P_Key. The P_Keys are
// copied, so the caller's slice is not the device's.
func (cfg Config) withDefaults() (Config, error) {
	if !cfg.Addr.IsValid() {
		return cfg, errors.New("softib: no underlay address")
	}
	if cfg.Name == "" {
		cfg.Name = "softib0"
	}
	if cfg.RxBatch <= 0 || cfg.RxBatch > maxRxBatch {
		cfg.RxBatch = maxRxBatch
	}
	if cfg.Port == 0 {
		cfg.Port = wire.UDPPort
	}
	if len(cfg.PKeys) == 0 {
		cfg.PKeys = []ib.PKey{ib.DefaultPKey}
	}
	for _, p := range cfg.PKeys {
		if !p.Valid() {
			return cfg, fmt.Errorf("softib: P_Key %v names no partition", p)
		}
	}
	cfg.PKeys = slices.Clone(cfg.PKeys)
	return cfg, nil
}

// openLinkLayer sets cfg.LinkLayer and, on an InfiniBand link, makes the
// port (cfg.IB as the port completed it). It returns the port's GID and
// the octets each packet carries beyond its payload on the underlay.
func openLinkLayer(cfg *Config) (ibp *ibPort, gid ib.GID, overhead int, err error) {
	gid = ib.GIDFromAddr(cfg.Addr)
	overhead = ibOverhead
	switch cfg.LinkLayer {
	case "", LinkEthernet:
		cfg.LinkLayer = LinkEthernet
	case LinkInfiniBand:
		if ibp, err = newIBPort(cfg.IB, gid); err != nil {
			return nil, ib.GID{}, 0, err
		}
		cfg.IB = ibp.cfg
		gid = ibp.gid()
		overhead += wire.LRHLen + ib.GRHLen + wire.VCRCLen
	default:
		return nil, ib.GID{}, 0, fmt.Errorf("softib: link layer %q: want %q or %q", cfg.LinkLayer, LinkEthernet, LinkInfiniBand)
	}
	return ibp, gid, overhead, nil
}

// activeMTU is the largest IB MTU whose packets, overhead octets beyond
// their payload, fit the underlay's MTU, capped at maxMTU when that is
// valid.
func activeMTU(fab *fabric, overhead int, maxMTU ib.MTU) (ib.MTU, error) {
	mtu := ib.MTU(0)
	for m := ib.MTU4096; m >= ib.MTU256; m-- {
		if m.Bytes()+overhead+fab.ipUDPOverhead() <= fab.mtu {
			mtu = m
			break
		}
	}
	if mtu == 0 {
		return 0, fmt.Errorf("softib: underlay MTU %d is too small for a 256-octet IB MTU", fab.mtu)
	}
	if maxMTU.Valid() && maxMTU < mtu {
		mtu = maxMTU
	}
	return mtu, nil
}

// openGSI makes QP1, in RTS with the GSI Q_Key. Its datagrams go to the
// MAD service, never to a CQ; its CQs only exist so that it is a QP like
// any other.
func (d *Device) openGSI() {
	d.gsi = d.newQP(ib.QP1, ib.QPAttr{Type: ib.UD, SendCQ: newCQ(d, 1), RecvCQ: newCQ(d, 1), MaxSend: 1, MaxRecv: 1})
	d.gsi.qkey = ib.GSIQKey
	d.gsi.state = ib.StateRTS
	d.addQP(d.gsi)
}

// Name returns the device name.
func (d *Device) Name() string { return d.cfg.Name }

// Port returns the port attributes; on InfiniBand with the subnet
// manager's current assignment (SetSubnet).
func (d *Device) Port() ib.PortAttr {
	p := d.port
	if d.ibp != nil {
		a := d.ibp.addr.Load()
		p.LID, p.LMC, p.SMLID, p.PKeys = a.lid, a.lmc, a.smLID, a.pkeys
	}
	return p
}

// Close stops the receive goroutine and flushes every QP.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.fab.wake()
	<-d.rxDone
	d.nl.Close()
	for _, q := range d.qps.all() {
		q.destroy()
	}
	d.fab.close()
	return nil
}

func (d *Device) addQP(q *qp) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addQPLocked(q)
}

func (d *Device) addQPLocked(q *qp) { d.qps.put(q) }

func (d *Device) removeQP(q *qp) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.qps.remove(q) {
		d.qpns.release(q.num)
	}
}

// RegisterMemory registers a slab. softib reads and writes slabs directly,
// so registration only records the region.
func (d *Device) RegisterMemory(s *ib.Slab) (ib.MR, error) {
	if s == nil || len(s.Bytes()) == 0 {
		return nil, errors.New("softib: register an empty slab")
	}
	return ibqueue.NewMR(s), nil
}

// CreateCQ makes a completion queue.
func (d *Device) CreateCQ(size int) (ib.CQ, error) { return newCQ(d, size), nil }

// CreateSRQ makes a shared receive queue.
func (d *Device) CreateSRQ(attr ib.SRQAttr) (ib.SRQ, error) {
	if attr.MaxWR < 1 {
		return nil, fmt.Errorf("softib: SRQ depth %d", attr.MaxWR)
	}
	return &srq{ibqueue.NewRecvQueue(attr.MaxWR, attr.Limit, true)}, nil
}

// CreateQP makes a queue pair in the Reset state.
func (d *Device) CreateQP(attr ib.QPAttr) (ib.QP, error) {
	if attr.Type != ib.RC && attr.Type != ib.UC && attr.Type != ib.UD {
		return nil, fmt.Errorf("softib: QP type %v", attr.Type)
	}
	if attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, errors.New("softib: a QP needs a send and a receive CQ")
	}
	if _, ok := attr.SendCQ.(*cq); !ok {
		return nil, errors.New("softib: send CQ belongs to another provider")
	}
	if _, ok := attr.RecvCQ.(*cq); !ok {
		return nil, errors.New("softib: receive CQ belongs to another provider")
	}
	if attr.SRQ != nil {
		if _, ok := attr.SRQ.(*srq); !ok {
			return nil, errors.New("softib: SRQ belongs to another provider")
		}
	}
	if attr.MaxSend < 1 {
		attr.MaxSend = 1
	}
	if d.closed.Load() {
		return nil, ib.ErrClosed
	}
	// Drawn and entered under one lock, so that two callers cannot draw
	// the same number.
	d.mu.Lock()
	q := d.newQP(d.qpns.alloc(d.qps.has), attr)
	d.addQPLocked(q)
	d.mu.Unlock()
	return q, nil
}

// CreateAH makes an address handle.
func (d *Device) CreateAH(attr ib.AHAttr) (ib.AH, error) {
	if d.ibp != nil {
		// Addressed by the path's DLID, which may be anything: a DLID
		// nobody has is the fabric's to drop, as on hardware.
		return &ah{attr: attr, to: d.ibp.cfg.Forwarder.Addr(), route: d.route(attr.Path, attr.DestGID), multicast: wire.IsMulticastLID(attr.Path.DLID)}, nil
	}
	a := attr.DestGID.Addr()
	if !a.IsValid() {
		return nil, fmt.Errorf("softib: address handle for %v", attr.DestGID)
	}
	if attr.DestGID.IsMulticast() {
		a = d.underlayGroup(attr.DestGID)
	} else if a.Is4() != d.fab.v4 {
		return nil, fmt.Errorf("softib: GID %v is not reachable over a %s underlay", attr.DestGID, family(d.fab.v4))
	}
	return &ah{attr: attr, to: a, multicast: attr.DestGID.IsMulticast()}, nil
}

func family(v4 bool) string {
	if v4 {
		return "IPv4"
	}
	return "IPv6"
}

type ah struct {
	attr      ib.AHAttr
	to        netip.Addr // underlay destination
	route     ibRoute    // InfiniBand link: LRH and GRH
	multicast bool       // to a group: destination QPN 0xFFFFFF
}

func (a *ah) Attr() ib.AHAttr { return a.attr }
func (a *ah) Close() error    { return nil }

// underlayGroup maps a multicast GID to the underlay group that carries it.
// On an IPv6 underlay the MGID is itself an IPv6 multicast address (as on
// RoCEv2). An IPv4 underlay cannot carry it: see ib.IPv4Group.
func (d *Device) underlayGroup(mgid ib.GID) netip.Addr {
	if !d.fab.v4 {
		return netip.AddrFrom16(mgid)
	}
	return ib.IPv4Group(mgid).Addr()
}

// AttachMulticast makes a UD QP a member of the group. On RoCE softib has
// no LIDs and mlid is not used; on an InfiniBand link the group is its
// MLID.
func (d *Device) AttachMulticast(iq ib.QP, mgid ib.GID, mlid uint16) error {
	q, ok := iq.(*qp)
	if !ok || q.dev != d || q.typ != ib.UD {
		return errors.New("softib: multicast needs a UD QP of this device")
	}
	if !mgid.IsMulticast() {
		return fmt.Errorf("softib: %v is not a multicast GID", mgid)
	}
	if d.ibp != nil {
		return d.attachMLID(q, mgid, mlid)
	}
	g := d.underlayGroup(mgid)
	if err := d.fab.join(g); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old := *d.groups.Load()
	m := make(map[netip.Addr][]*qp, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[g] = append(append([]*qp(nil), old[g]...), q)
	d.mgids[g] = mgid
	d.groups.Store(&m)
	return nil
}

// DetachMulticast removes a UD QP from the group.
func (d *Device) DetachMulticast(iq ib.QP, mgid ib.GID) error {
	q, ok := iq.(*qp)
	if !ok || q.dev != d {
		return errors.New("softib: not a QP of this device")
	}
	if d.ibp != nil {
		return d.detachMLID(q, mgid)
	}
	g := d.underlayGroup(mgid)
	d.mu.Lock()
	old := *d.groups.Load()
	var kept []*qp
	found := false
	for _, m := range old[g] {
		if m == q && !found {
			found = true
			continue
		}
		kept = append(kept, m)
	}
	m := make(map[netip.Addr][]*qp, len(old))
	for k, v := range old {
		m[k] = v
	}
	if len(kept) == 0 {
		delete(m, g)
	} else {
		m[g] = kept
	}
	d.groups.Store(&m)
	d.mu.Unlock()
	if !found {
		return fmt.Errorf("softib: QP %v is not attached to %v", q.num, mgid)
	}
	return d.fab.leave(g)
}

// pkeys is the port's P_Key table as it is now: on the InfiniBand link
// layer the subnet manager's latest (SetSubnet), else the one opened with.
func (d *Device) pkeys() []ib.PKey {
	if d.ibp != nil {
		return d.ibp.addr.Load().pkeys
	}
	return d.cfg.PKeys
}

// portAccepts is the port's P_Key check: some entry of its table accepts
// the packet's P_Key. Each QP checks its own P_Key as well.
func (d *Device) portAccepts(p ib.PKey) bool {
	for _, mine := range d.pkeys() {
		if mine.Accepts(p) {
			return true
		}
	}
	return false
}

// tableKey is the entry of the port's table that a QP or MAD asking for
// p uses, as a verbs consumer picks a P_Key index: p itself if the table
// holds it, else p's partition with the membership the subnet manager
// gave the port (full preferred). A port that is only a limited member
// thus sends as one, whatever membership was asked for.
func (d *Device) tableKey(p ib.PKey) (ib.PKey, bool) {
	var found ib.PKey
	for _, mine := range d.pkeys() {
		switch {
		case mine == p:
			return p, true
		case mine.Partition() == p.Partition() && (found == 0 || mine.IsFull()):
			found = mine
		}
	}
	return found, found != 0
}
