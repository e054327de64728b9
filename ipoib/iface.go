// Package ipoib is one IPoIB interface: it wires the kernel's network
// device (an opened Netdev: a TUN from package tun in the daemon), the UD
// endpoint, neighbor resolution, the
// connection manager and per-destination MTUs together over an ib.Device,
// and runs the datapath.
//
// Goroutines: the TUN reader (transmit, which also reaps send
// completions) and one control goroutine that owns the neighbor table and
// the connection manager; receive completions are taken off by the port
// the interface runs on (Port: shared with the other interfaces there),
// which hands each to the interface owning its QP. The datapath reads
// published neighbor paths without locks and hands anything else to the
// control goroutine through bounded channels.
//
// Files, by concern:
//   - iface.go: settling the config, opening and closing; port.go: who
//     the interface is on its port (portID: P_Key, link address, UD MTU,
//     the SA's broadcast group), one value; mode.go: the run-time mode
//     switch
//   - netdev.go: the kernel side's names, Packets and Link (package
//     netdev): tun's TUN device and netlink in the daemon, netdevtest's
//     channel-backed fake in tests (fake_test.go runs the interface's
//     behaviours as an ordinary user)
//   - portpool.go: the port's shared resources (the registered slab, the
//     SRQ, the receive CQ) and the table of QP owners
//   - tx.go, rx.go: the datapath, one file per direction; post.go: posting
//     sends in batches and reaping their completions; slots.go: the
//     packet buffers, the port's and each interface's rings; packet.go:
//     reading IP headers
//   - control.go: the control goroutine's loop and timers
//   - pending.go: packets waiting for a neighbor or a connection
//   - resolve.go: ARP and ND; neighbors.go: what the neighbor state machine
//     asks for, and the paths the datapath reads; vouch.go: on InfiniBand,
//     whether a claimed link address is its sender's (the SA's path and the
//     source LID)
//   - subnet.go: the SA's joins and paths; udqp.go: following the subnet's
//     changes (the broadcast group's Q_Key and MLID, our P_Key's index)
//   - conns.go: starting connections, and the manager's up/down callbacks;
//     connfail.go: connections whose QP cannot send
//   - addrs.go: our addresses and multicast groups; link.go: the link's MTU,
//     up/down and carrier
//   - unreach.go: ICMP unreachable; counters.go, dropreport.go, lograte.go,
//     info.go: counters, drop reports, rate-limited logs, what `show` prints
package ipoib

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/encap"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
	"github.com/ipoibd/ipoibd/neigh"
	"github.com/ipoibd/ipoibd/netdev"
)

// Mode is the interface's IPoIB mode.
type Mode uint8

// Modes.
const (
	Connected Mode = iota
	Datagram
)

func (m Mode) String() string {
	if m == Datagram {
		return "datagram"
	}
	return "connected"
}

// ParseMode reads "connected" or "datagram".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "connected":
		return Connected, nil
	case "datagram":
		return Datagram, nil
	}
	return 0, fmt.Errorf("mode %q: want connected or datagram", s)
}

// TUN queue counts (Config.Queues). Each queue has numTx/queues transmit
// slots, and a 64 KiB super-packet cut for UD takes 17 at once.
const (
	DefaultMaxQueues = 4
	MaxQueues        = 8
)

// ConnectedMTU is the interface MTU in connected mode, as Linux uses.
const ConnectedMTU = 65520

// Config describes one interface.
type Config struct {
	Name string
	// Port is the port the interface runs on, shared with the other
	// interfaces there (OpenPort); nil: the interface opens one of its
	// own over Device, and closes it.
	Port *Port
	// Device is the adapter port (Port's, when Port is given).
	Device ib.Device
	Addrs  []netip.Prefix
	// PKey is the partition (default: the port's first P_Key); it must be
	// in the port's P_Key table.
	PKey   ib.PKey
	Mode   Mode
	RC, UC bool // connected modes offered in our link address (default RC)
	// SendOnly, in connected mode, offers no connected mode (our link
	// address carries neither RC nor UC: peers send to us over UD) and
	// still connects to peers that offer it: the kernel CM's AF_IB active
	// side towards kernel ipoib peers (rdmacm.NewRFCSender), which can
	// open RFC 4755 connections but not accept them.
	SendOnly bool
	Policy   ipoibcm.Policy
	// MTU of the interface (default: 65520 connected, the UD MTU datagram).
	MTU int
	// IdleTimeout tears down unused connections (0: never).
	IdleTimeout time.Duration
	// SharedGIDs: the partition's ports may carry several interfaces
	// (pods' P_Key children), so a new UD QPN at a known GID is another
	// interface, not a restarted peer (see ipoibcm.ManagerConfig).
	SharedGIDs bool
	// Replaces is the link address the interface had before its daemon
	// restarted and took it back (its netdev outlived the daemon): its
	// gratuitous ARPs name it as their target hardware address, so that
	// peers that hold it move to the new one at once, also where ports
	// carry several interfaces (SharedGIDs), as for any restarted peer.
	Replaces ib.LinkAddr
	// LinkLocal, when valid, is the IPv6 link-local address the interface
	// answers for instead of its port GUID's: an interface over several
	// ports (package bond) keeps its first port's on every port, as a
	// bonded link keeps one.
	LinkLocal netip.Prefix
	// Standby starts the interface on standby (SetStandby): one port of
	// an interface over several, joined and listening, not answering.
	Standby bool
	// Bonded: the interface is one port of several (package bond). Its
	// port is checked every tick, and it keeps a share of its transmit
	// slots for packets the other ports hand it (Carry).
	Bonded bool
	// MaxConns bounds connections past setup (default 4096); beyond it
	// REQs are rejected with "no resources". Those in setup count against
	// the CM engine's half-open limits instead (256, 16 per peer), so REQs
	// never completed cannot use it up.
	MaxConns int
	// ConnService makes the connection service for the interface: ipoibd's
	// CM engine on the port's QP1 (cm.EngineOnSharedQP1; cm.EngineOnQP1,
	// the default) or the kernel's CM through librdmacm (--cm kernel).
	// The interface drives either the same way.
	ConnService cm.ServiceMaker
	// NoOffload keeps TSO, USO, checksum offload and receive coalescing
	// off (for comparisons): every packet then crosses the TUN whole.
	NoOffload bool
	// Queues is the number of TUN queues, each read by its own goroutine
	// with its own transmit slots (default: one per CPU, at most
	// DefaultMaxQueues; at most MaxQueues).
	Queues int
	// Subnet is the port's subnet administrator on InfiniBand (subnet.go):
	// the broadcast join's Q_Key, MTU and MLID, the other groups' joins and
	// the unicast paths come from it. Nil on RoCE and softib, and with the
	// kernel's CM, whose rdma_cm does this.
	Subnet Subnet
	// Renamed, if set, is called on the control goroutine when the kernel
	// renamed the interface (ip link set NAME name NEW).
	Renamed func(old, new string)
	// Netdev is the interface in the kernel, opened as NetdevConfig says
	// (the daemon: tun.OpenNetdev, in the interface's namespace). New
	// takes it over: Close closes it, and so does New on error.
	Netdev Netdev
	Log    *slog.Logger
}

// Interface is a running IPoIB interface.
type Interface struct {
	cfg  Config
	dev  ib.Device
	caps ib.Caps // dev's optional capabilities, looked up once in New
	// port is who the interface is on the fabric (port.go): the
	// interface reads it from here only.
	port portID
	// qkey is the UD QP's Q_Key (an ib.QKey), which every UD send names:
	// port.bcast's (the default without a Subnet), published for the
	// datapath, since the SA may change it (subnet.go).
	qkey atomic.Uint32
	// bcastMu guards port.bcast, which the control goroutine changes when
	// the SA does (followBroadcast) and the group worker reads.
	bcastMu sync.Mutex
	mtu     int // interface MTU (the control goroutine follows the link's)

	// name is the interface's name now: cfg.Name, then what the kernel
	// renamed it to (the control goroutine follows it).
	name atomic.Pointer[string]

	netdev Netdev
	flows  *flowWriter // nil: one queue, or a bond's port (its own queue)
	// pool is the port's shared resources (portpool.go): the SRQ and the
	// receive CQ the interface's QPs use, and its rings' memory. ownPool:
	// the interface opened it (Config.Port nil) and closes it.
	pool    *Port
	ownPool bool
	slots   *slots
	sendCQ  ib.CQ
	udQP    ib.QP
	// bcast is the broadcast group's address handle, made again when the
	// SA moves the group (followBroadcast); the datapath loads it.
	bcast atomic.Pointer[ib.AH]

	neigh  *neigh.Table
	mgr    *ipoibcm.Manager // nil in datagram mode
	routes Routes           // per-destination MTUs (host routes where a path's is below the link's)

	// Datapath → control.
	pending   chan pendingPacket
	wantConn  chan *neigh.Entry
	rxReply   chan neighPacket // ARP replies, NAs: answers our traffic waits for
	rxSolicit chan neighPacket // ARP requests, NSs and the rest: learning
	sendFail  chan sendFailure
	requests  chan func()

	mcastMu  sync.Mutex
	mcastAHs map[netip.Addr]mcastDest
	// wantGroup asks the control goroutine for a send-only join (Subnet).
	wantGroup chan netip.Addr

	ctr  counters
	log  *slog.Logger
	logs *logLimiter // rate-limits log's lines
	done chan struct{}
	// ctlDone is closed when the control goroutine has returned.
	ctlDone chan struct{}
	// lost is closed when the interface can carry nothing any more (its
	// link was deleted, its TUN cannot be read), with lostErr saying why:
	// the daemon must not outlive it.
	lost     chan struct{}
	lostOnce sync.Once
	lostErr  error
	wg       sync.WaitGroup
	ctl      control // owned by the control goroutine
	closed   sync.Once

	rxBuf    rxBuffers   // under pool.rxMu
	udHeld   bool        // under pool.rxMu: the UD QP is made ready again (reinitUD), its slots wait
	stopping atomic.Bool // Close has begun: the port's drain no longer touches the TUN
	// standby: the interface is the spare port of an interface over
	// several (package bond): it receives, but answers no ARP or ND for
	// our addresses and announces none, so that peers keep the active
	// port's link address.
	standby atomic.Bool
	// sibling is the link address of the other port of an interface over
	// two, named in our ARP and ND so that peers follow a failover at
	// once; nil on a single port.
	sibling atomic.Pointer[ib.LinkAddr]
	// handoff is the active port's interface while this one is a rail
	// (SetRail); carrier takes what the other ports hand this one.
	handoff atomic.Pointer[Interface]
	// unreachable: every connection on the port failed lately (reach.go).
	unreachable atomic.Bool
	carrier     *carrier
	datagram    atomic.Bool // datagram mode (SetMode): no connection is asked for
	started     atomic.Bool // Start ran: Close must ask the control goroutine to shut down
}

type mcastDest struct {
	ah   ib.AH
	mgid ib.GID
}

// pendingPacket is a packet the datapath could not send on its own.
type pendingPacket struct {
	slot uint32
	n    int // IPoIB message length (header included)
	dst  netip.Addr
}

// neighPacket is an ARP or ND packet copied off the receive path.
type neighPacket struct {
	etherType uint16
	n         int
	src       ib.LinkAddr // UD source: QPN and GID (zero without a GRH on InfiniBand)
	srcLID    uint16      // InfiniBand: the sender's LID, which the fabric vouches for (0 on RoCE)
	grh       bool        // InfiniBand: a GRH came, so src.GID is its source GID
	parked    bool        // handled again after waiting for a path (vouch.go): counted once
	data      [128]byte
}

// New opens the interface on cfg.Netdev: queue pairs, buffers, the
// broadcast group. Nothing runs until Start. On error everything already
// opened is closed again, cfg.Netdev too.
func New(cfg Config) (_ *Interface, err error) {
	if cfg.Netdev == nil {
		return nil, errors.New("ipoib: no netdev")
	}
	cfg, port, mtu, err := settle(cfg)
	if err != nil {
		_ = cfg.Netdev.Close()
		return nil, err
	}
	i := newInterface(cfg, port, mtu)
	i.netdev = cfg.Netdev
	i.flows = newFlowWriter(cfg.Netdev)
	defer func() {
		if err != nil {
			i.leaveBroadcast()
			i.release()
		}
	}()
	if i.mtu < netdev.IPv6MinMTU && hasIPv6(cfg.Addrs) {
		// As the kernel: IPv4 runs, IPv6 waits until the MTU allows it.
		i.log.Warn("IPv6 left off on this link until its MTU is at least 1280: its IPv6 addresses are added then (ip link set IFNAME mtu 1280 or more)",
			"mtu", i.mtu, "waiting", strings.Join(ipv6Strings(cfg.Addrs), ","))
	}
	if cfg.Subnet != nil {
		opened := i.mtu
		if err = i.joinBroadcast(); err != nil {
			return nil, err
		}
		// The netdev was opened before the SA answered: it takes the
		// broadcast group's smaller UD MTU now.
		if i.mtu != opened {
			if err = i.netdev.SetMTU(i.mtu); err != nil {
				return nil, err
			}
		}
	}
	if err = i.openPool(); err != nil {
		return nil, err
	}
	if err = i.openQueues(); err != nil {
		return nil, err
	}
	i.rxBuf.groOn, _ = i.netdev.Offloads()
	i.routes = i.netdev.Routes()
	if cfg.Mode == Connected {
		if i.mgr, err = i.openCM(); err != nil {
			return nil, err
		}
	}
	return i, nil
}

// NetdevConfig is how the interface's netdev must be opened (Config.Netdev):
// cfg's defaults filled in and checked against the port, as New settles
// them, so that a bad cfg fails before anything is made.
func (cfg Config) NetdevConfig() (netdev.Config, error) {
	cfg, port, mtu, err := settle(cfg)
	if err != nil {
		return netdev.Config{}, err
	}
	return netdev.Config{Name: cfg.Name, MTU: mtu, Addrs: cfg.Addrs, LinkLocal: port.linkLocal, Offload: !cfg.NoOffload, Queues: cfg.Queues}, nil
}

// settle fills in cfg's defaults and checks it against the port: cfg as
// the interface runs it, who the interface is on the port, and its MTU,
// with nothing opened yet.
func settle(cfg Config) (Config, portID, int, error) {
	if cfg.Port != nil {
		if cfg.Device != nil && cfg.Device != cfg.Port.dev {
			return cfg, portID{}, 0, errors.New("ipoib: the config's device is not its port's")
		}
		cfg.Device = cfg.Port.dev
	}
	if cfg.Device == nil {
		return cfg, portID{}, 0, errors.New("ipoib: no device")
	}
	cfg = withDefaults(cfg)
	if cfg.Queues < 1 || cfg.Queues > MaxQueues {
		return cfg, portID{}, 0, fmt.Errorf("ipoib: %d TUN queues: want 1 to %d", cfg.Queues, MaxQueues)
	}
	port, err := identify(cfg)
	if err != nil {
		return cfg, portID{}, 0, err
	}
	mtu, err := linkMTU(cfg, port)
	return cfg, port, mtu, err
}

// withDefaults fills in what cfg leaves unsaid but the port: RC, a log,
// one TUN queue per CPU up to DefaultMaxQueues.
func withDefaults(cfg Config) Config {
	if !cfg.RC && !cfg.UC {
		cfg.RC = true
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Queues == 0 {
		cfg.Queues = min(runtime.NumCPU(), DefaultMaxQueues)
	}
	return cfg
}

// linkMTU is the interface's MTU: cfg's, by default 65520 in connected
// mode and the UD MTU in datagram mode, within the mode's limit.
func linkMTU(cfg Config, port portID) (int, error) {
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = port.udMTU
		if cfg.Mode == Connected {
			mtu = ConnectedMTU
		}
	}
	if mtu > ConnectedMTU {
		return 0, fmt.Errorf("ipoib: MTU %d is above the %v-mode limit %d", mtu, cfg.Mode, ConnectedMTU)
	}
	if cfg.Mode == Datagram && mtu > port.udMTU {
		return 0, fmt.Errorf("ipoib: MTU %d is above the datagram-mode limit %d (the port's IB MTU %d less the 4-octet IPoIB header; connected mode takes up to %d)",
			mtu, port.udMTU, port.ActiveMTU.Bytes(), ConnectedMTU)
	}
	if p, ok := firstIPv6(cfg.Addrs); ok && cfg.Mode == Datagram && port.udMTU < netdev.IPv6MinMTU {
		// An interface opened in datagram mode stays in it: its IPv6
		// address would never come (where the MTU may rise, it waits).
		return 0, fmt.Errorf("ipoib: %w: %v asked for, and datagram mode's MTU is at most %d here (the port's IB MTU %d less the 4-octet IPoIB header); connected mode has IPv6",
			ErrIPv6NeverFits, p, port.udMTU, port.ActiveMTU.Bytes())
	}
	return mtu, nil
}

// ErrIPv6NeverFits: an IPv6 address was asked for on an interface whose
// MTU can never reach IPv6's 1280 (datagram mode on a port whose UD MTU is
// below it), so it is not started.
var ErrIPv6NeverFits = errors.New("IPv6 needs a link MTU of at least 1280")

// firstIPv6 is the first IPv6 prefix of ps.
func firstIPv6(ps []netip.Prefix) (netip.Prefix, bool) {
	for _, p := range ps {
		if p.Addr().Is6() {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// newInterface is the interface settle described, with its queues to the
// control goroutine made and nothing opened.
func newInterface(cfg Config, port portID, mtu int) *Interface {
	i := &Interface{
		cfg: cfg, dev: cfg.Device, caps: ib.CapsOf(cfg.Device), port: port, mtu: mtu,
		pending:   make(chan pendingPacket, 1024),
		wantConn:  make(chan *neigh.Entry, 256),
		rxReply:   make(chan neighPacket, 256),
		rxSolicit: make(chan neighPacket, 256),
		sendFail:  make(chan sendFailure, 64),
		requests:  make(chan func()),
		mcastAHs:  map[netip.Addr]mcastDest{},
		wantGroup: make(chan netip.Addr, 64),
		neigh:     neigh.NewTable(8, 65536),
		logs:      newLogLimiter(cfg.Log.Handler(), logBurst, logWindow),
		done:      make(chan struct{}),
		ctlDone:   make(chan struct{}),
		lost:      make(chan struct{}),
	}
	i.name.Store(&cfg.Name)
	i.log = slog.New(ifHandler{h: i.logs.handler(), name: i.Name})
	i.qkey.Store(uint32(ib.DefaultIPoIBQKey))
	i.datagram.Store(cfg.Mode == Datagram)
	i.standby.Store(cfg.Standby)
	return i
}

// openCM makes the connection manager on the configured connection
// service.
func (i *Interface) openCM() (*ipoibcm.Manager, error) {
	cfg, port := i.cfg, i.port
	newService := cfg.ConnService
	if newService == nil {
		newService = cm.EngineOnQP1(i.dev)
	}
	return ipoibcm.NewManager(ipoibcm.ManagerConfig{
		Service: func(events func(cm.Event)) (cm.Service, error) {
			return newService(cm.ServiceParams{Port: port.PortAttr, PKey: i.port.pkey, UDQPN: i.port.local.QPN, MaxConns: cfg.MaxConns, Events: events, Log: i.log})
		},
		PKey:        i.port.pkey,
		Local:       i.port.local,
		Policy:      cfg.Policy,
		UC:          cfg.UC && !cfg.RC,
		PathMTU:     port.ActiveMTU,
		QPs:         qpFactory{i},
		QPCounters:  i.caps.QPCounters,
		IdleTimeout: cfg.IdleTimeout,
		SharedGIDs:  cfg.SharedGIDs,
		PathTo:      i.pathTo(),
		Up:          i.connUp,
		Down:        i.connDown,
		Refused:     i.connRefused,
	})
}

// InNetns runs f on a thread in the interface's network namespace, for
// what is bound to a namespace when made (sockets, /proc/thread-self/net).
// Without --netns that is the daemon's own and f runs as is.
func (i *Interface) InNetns(f func() error) error { return i.netdev.InNetns(f) }

// interfaceID is the IPv6 interface identifier of an IPoIB interface (RFC
// 4391 §8, as the kernel's driver forms it): the port GUID, which is the
// low half of the port GID, with the universal/local bit inverted. It is
// the same across restarts, unlike the random one the kernel would give a
// TUN device.
func interfaceID(gid ib.GID) [8]byte {
	var id [8]byte
	copy(id[:], gid[8:])
	id[0] ^= 0x02
	return id
}

// ipv6Strings are ps's IPv6 prefixes as text.
func ipv6Strings(ps []netip.Prefix) []string {
	var out []string
	for _, p := range ps {
		if p.Addr().Is6() {
			out = append(out, p.String())
		}
	}
	return out
}

func hasIPv6(ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Addr().Is6() {
			return true
		}
	}
	return false
}

// openPool takes the interface's place on its port: the port (opened
// here when the config names none) and its rings there.
func (i *Interface) openPool() error {
	i.pool = i.cfg.Port
	if i.pool == nil {
		p, err := OpenPort(i.dev)
		if err != nil {
			return err
		}
		i.pool, i.ownPool = p, true
	}
	r, err := i.pool.openRing()
	if err != nil {
		return err
	}
	pools := i.cfg.Queues
	if i.cfg.Bonded {
		pools++ // the carrier's (rail.go)
	}
	i.slots = newSlots(r, pools)
	return nil
}

// openQueues makes the send CQ, the UD QP (in RTS with its receives
// posted, completing on the port's receive CQ) and joins the broadcast
// group.
func (i *Interface) openQueues() error {
	var err error
	lay := i.slots.lay
	// Sends complete once each, at most the budget's and the control
	// goroutine's in flight: a child's CQ holds twice that; the first
	// interface's keeps its 4096.
	depth := 4096
	if i.slots.own != nil {
		depth = 2 * (connSendDepth + int(lay.neigh))
	}
	if i.sendCQ, err = i.dev.CreateCQ(depth); err != nil {
		return err
	}
	if i.udQP, err = i.dev.CreateQP(ib.QPAttr{Type: ib.UD, SendCQ: i.sendCQ, RecvCQ: i.pool.recvCQ, MaxSend: connSendDepth + int(lay.neigh), MaxRecv: int(lay.udRx)}); err != nil {
		return err
	}
	// Set before the port may deliver to the QP: the receive path reads it.
	i.port.local.QPN = i.udQP.Num()
	i.pool.owners.set(i.udQP.Num(), i)
	// The control goroutine's ARP and ND sends share the UD send queue.
	i.slots.bound(i.udQP.MaxSend() - int(lay.neigh))
	if err := i.readyUD(i.qKey()); err != nil {
		return err
	}
	mgid := encap.BroadcastMGID(i.port.pkey, encap.LinkLocal)
	if err := i.dev.AttachMulticast(i.udQP, mgid, i.port.bcast.MLID); err != nil {
		return fmt.Errorf("ipoib: joining the broadcast group %v: %w", mgid, err)
	}
	bcast := ib.AHAttr{DestGID: mgid}
	if i.cfg.Subnet != nil {
		bcast.Path = groupPath(i.port.bcast)
	}
	ah, err := i.dev.CreateAH(bcast)
	if err != nil {
		return err
	}
	i.bcast.Store(&ah)
	return nil
}

// qpFactory makes connected QPs on the port's SRQ and receive CQ and the
// interface's send CQ, entered in the port's table as the interface's.
type qpFactory struct{ i *Interface }

func (f qpFactory) CreateQP(t ib.QPType) (ib.QP, error) {
	i := f.i
	qp, err := i.dev.CreateQP(ib.QPAttr{Type: t, SendCQ: i.sendCQ, RecvCQ: i.pool.recvCQ, SRQ: i.pool.srq, MaxSend: connSendDepth})
	if err != nil {
		return nil, err
	}
	// A device may grant fewer work requests than asked.
	i.slots.bound(qp.MaxSend())
	i.pool.owners.set(qp.Num(), i)
	return &portQP{QP: qp, port: i.pool, i: i}, nil
}

// Start runs the datapath and the control goroutine.
func (i *Interface) Start() {
	i.started.Store(true)
	i.ctl.init(i)
	i.wg.Add(1 + i.netdev.Queues())
	for q := range i.netdev.Queues() {
		r := &txReader{queue: q, slots: &i.slots.tx[q]}
		go func() { defer i.wg.Done(); i.txLoop(r) }()
	}
	if i.cfg.Bonded {
		q := i.netdev.Queues()
		i.carrier = &carrier{r: txReader{queue: q, slots: &i.slots.tx[q]}}
	}
	go func() { defer i.wg.Done(); defer close(i.ctlDone); i.controlLoop() }()
}

// Close disconnects every connection (DREQs go out), stops the datapath and
// closes the netdev (a TUN goes with its addresses and routes).
func (i *Interface) Close() {
	i.closed.Do(func() {
		if i.started.Load() {
			i.do(func() { i.ctl.shutdown() }) // leaves every group
		} else {
			i.leaveBroadcast()
		}
		i.stop()
		close(i.done)
		if i.started.Load() {
			<-i.ctlDone // it uses the netdev (netlink) until it returns
		}
		_ = i.netdev.Close() // unblocks the TUN reader
		i.wg.Wait()
		i.ctl.subnet.close()
		i.release()
	})
}

// stop ends the port's deliveries to the interface: a drain in progress
// finishes first, later ones no longer touch the TUN.
func (i *Interface) stop() {
	if i.pool == nil {
		return
	}
	i.pool.rxMu.Lock()
	i.stopping.Store(true)
	i.pool.rxMu.Unlock()
}

// release closes what New opened, in reverse order. What the closed QPs
// completed is drained before their rings go, so that nothing completes
// in a ring given back.
func (i *Interface) release() {
	i.stop()
	if i.netdev != nil {
		_ = i.netdev.Close()
	}
	if i.mgr != nil {
		_ = i.mgr.Service().Close()
	}
	if i.udQP != nil {
		_ = i.udQP.Close()
		i.pool.drain()
		i.pool.owners.clear(i.udQP.Num(), i)
	}
	if i.sendCQ != nil {
		_ = i.sendCQ.Close()
	}
	if i.slots != nil {
		i.pool.closeRing(i.slots.ring)
	}
	if i.ownPool {
		_ = i.pool.Close()
	}
}

// do runs f on the control goroutine and waits for it; after Close it
// does nothing.
func (i *Interface) do(f func()) {
	ran := make(chan struct{})
	select {
	case i.requests <- func() { f(); close(ran) }:
		<-ran
	case <-i.done:
	}
}

// errLinkDeleted is why an interface whose link was deleted is lost.
var errLinkDeleted = errors.New("the interface was deleted (ip link del)")

// markLost reports the interface lost (Lost), once; never while it closes,
// when the TUN's reads fail and its link goes as they should.
func (i *Interface) markLost(err error) {
	select {
	case <-i.done:
		return
	default:
	}
	i.lostOnce.Do(func() {
		i.lostErr = fmt.Errorf("%s: %w", i.Name(), err)
		close(i.lost)
	})
}

// Lost is closed when the interface can carry nothing any more: its link
// was deleted or its TUN cannot be read. LostErr then says why, in one
// line naming the interface.
func (i *Interface) Lost() <-chan struct{} { return i.lost }

// Closing is closed when Close begins.
func (i *Interface) Closing() <-chan struct{} { return i.done }

// LostErr is why the interface was lost (nil while Lost is open).
func (i *Interface) LostErr() error {
	select {
	case <-i.lost:
		return i.lostErr
	default:
		return nil
	}
}

// LinkAddr returns the interface's link address.
func (i *Interface) LinkAddr() ib.LinkAddr { return i.port.local }

// Name returns the interface name, as the kernel has it now (the control
// goroutine follows renames).
func (i *Interface) Name() string { return *i.name.Load() }

// ifHandler puts the interface's name now first in every line's attributes
// (if=NAME): a rename shows in the lines that follow.
type ifHandler struct {
	h    slog.Handler
	name func() string
}

func (h ifHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h ifHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(slog.String("if", h.name()))
	r.Attrs(func(a slog.Attr) bool { out.AddAttrs(a); return true })
	return h.h.Handle(ctx, out)
}

func (h ifHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return ifHandler{h: h.h.WithAttrs(as), name: h.name}
}

func (h ifHandler) WithGroup(g string) slog.Handler {
	return ifHandler{h: h.h.WithGroup(g), name: h.name}
}

// PKey returns the interface's partition key.
func (i *Interface) PKey() ib.PKey { return i.port.pkey }
