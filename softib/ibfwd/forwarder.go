package ibfwd

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// Port is one softib port attached to the fabric: its port GUID, the LID
// and LMC the subnet gave it (for display: forwarding follows Routes)
// and the underlay address its frames come from and go to.
type Port struct {
	GUID uint64
	LID  uint16
	LMC  uint8
	Addr netip.AddrPort
}

// dropCause names why the forwarder dropped a frame.
type dropCause int

const (
	dropMalformed     dropCause = iota // no LRH, or a PktLen that does not match
	dropBadVCRC                        // the link's CRC does not match
	dropUnknownSource                  // not from a registered port's address
	dropDLIDZero                       // DLID 0 names no port
	dropUnrouted                       // unicast (or permissive) LID with no forwarding entry
	dropNoMFTEntry                     // MLID with no multicast forwarding entry
	dropVL15                           // SL mapped to VL15
	dropNoPort                         // routed to a GUID no port registered
	dropTxError                        // the underlay refused a send
	numDropCauses
)

var dropNames = [numDropCauses]string{
	dropMalformed:     "drop_malformed",
	dropBadVCRC:       "drop_bad_vcrc",
	dropUnknownSource: "drop_unknown_source",
	dropDLIDZero:      "drop_dlid_zero",
	dropUnrouted:      "drop_unrouted_lid",
	dropNoMFTEntry:    "drop_no_mft_entry",
	dropVL15:          "drop_vl15",
	dropNoPort:        "drop_no_port",
	dropTxError:       "drop_tx_error",
}

// maxFrame bounds a frame: LRH, GRH, BTH, DETH, 4096 octets, pad, ICRC,
// VCRC fit with room to spare; anything longer is cut and fails its
// PktLen check.
const maxFrame = 8192

// Forwarder is the subnet's switching on one UDP socket.
type Forwarder struct {
	conn   *net.UDPConn
	routes atomic.Pointer[routesBox]
	ports  atomic.Pointer[portTable]
	mu     sync.Mutex // serialises Register

	// out is the forwarding goroutine's room for a frame's deliveries,
	// reused so that forwarding allocates nothing.
	out []Delivery

	tap atomic.Pointer[func([]byte)]

	// fr is the forwarding goroutine's parse of a frame, for CrossREQs.
	fr      wire.IBFrame
	cross   crossing
	crossOn atomic.Bool
	paths   paths
	pathsOn atomic.Bool

	rx, tx                 atomic.Uint64
	drops                  [numDropCauses]atomic.Uint64
	reqsCrossed, reqsAlone atomic.Uint64
	done                   chan struct{}
}

type routesBox struct{ r Routes }

// portTable is replaced whole on Register, so the forwarding goroutine
// reads it without a lock.
type portTable struct {
	byGUID map[uint64]Port
	byAddr map[netip.AddrPort]uint64
}

// New starts a forwarder listening on addr (port 0: any) with routes r.
func New(addr netip.AddrPort, r Routes) (*Forwarder, error) {
	if r == nil {
		return nil, errors.New("ibfwd: no routes")
	}
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("ibfwd: %w", err)
	}
	bigBuffers(c)
	f := &Forwarder{conn: c, done: make(chan struct{}), out: make([]Delivery, 0, 64)}
	f.routes.Store(&routesBox{r})
	f.ports.Store(&portTable{byGUID: map[uint64]Port{}, byAddr: map[netip.AddrPort]uint64{}})
	go f.run()
	return f, nil
}

// socketBuffer is the forwarder's socket buffer each way. A switch loses
// nothing (link credits hold the sender back); a UDP socket drops what its
// buffer cannot hold, so it gets room for several windows of 64 KiB
// messages from every port.
const socketBuffer = 32 << 20

// bigBuffers sets the socket buffers to socketBuffer, past the sysctl
// limits where it may (root), else as far as they allow.
func bigBuffers(c *net.UDPConn) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[0], socketBuffer) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[1], socketBuffer)
			}
		}
	})
}

// Addr is the forwarder's underlay address: softib's IBConfig.Forwarder.
func (f *Forwarder) Addr() netip.AddrPort {
	return f.conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// Register attaches a port (or moves it to a new address).
func (f *Forwarder) Register(p Port) error {
	if p.GUID == 0 || !p.Addr.IsValid() {
		return fmt.Errorf("ibfwd: port %#x at %v: want a GUID and an address", p.GUID, p.Addr)
	}
	p.Addr = netip.AddrPortFrom(p.Addr.Addr().Unmap(), p.Addr.Port())
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.ports.Load()
	t := &portTable{byGUID: map[uint64]Port{}, byAddr: map[netip.AddrPort]uint64{}}
	for g, q := range old.byGUID {
		if g != p.GUID && q.Addr != p.Addr {
			t.byGUID[g], t.byAddr[q.Addr] = q, g
		}
	}
	t.byGUID[p.GUID], t.byAddr[p.Addr] = p, p.GUID
	f.ports.Store(t)
	return nil
}

// Ports returns the registered ports.
func (f *Forwarder) Ports() []Port {
	var out []Port
	for _, p := range f.ports.Load().byGUID {
		out = append(out, p)
	}
	return out
}

// SetTap has tap called with every frame a registered port sent that
// parses and passes its VCRC, before it is switched (or dropped by the
// tables), from the forwarding goroutine; nil removes it. tap must not
// keep the slice.
func (f *Forwarder) SetTap(tap func(frame []byte)) {
	if tap == nil {
		f.tap.Store(nil)
		return
	}
	f.tap.Store(&tap)
}

// SetRoutes replaces the forwarding tables.
func (f *Forwarder) SetRoutes(r Routes) { f.routes.Store(&routesBox{r}) }

// Counters returns frames received and sent, the drops by cause and the
// outcomes of REQs held by CrossREQs.
func (f *Forwarder) Counters() []ib.Counter {
	out := []ib.Counter{{Name: "rx_frames", Value: f.rx.Load()}, {Name: "tx_frames", Value: f.tx.Load()}}
	for c := range numDropCauses {
		out = append(out, ib.Counter{Name: dropNames[c], Value: f.drops[c].Load()})
	}
	return append(out, ib.Counter{Name: "reqs_crossed", Value: f.reqsCrossed.Load()},
		ib.Counter{Name: "reqs_held_alone", Value: f.reqsAlone.Load()})
}

// Close stops forwarding; REQs still held are dropped.
func (f *Forwarder) Close() error {
	f.closeCrossing()
	err := f.conn.Close()
	<-f.done
	return err
}

func (f *Forwarder) count(c dropCause) { f.drops[c].Add(1) }

func (f *Forwarder) run() {
	defer close(f.done)
	buf := make([]byte, maxFrame)
	for {
		n, src, err := f.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		f.forward(buf[:n], netip.AddrPortFrom(src.Addr().Unmap(), src.Port()))
	}
}

// forward switches one frame, in place: the VL is rewritten and the VCRC
// recomputed before it leaves.
func (f *Forwarder) forward(b []byte, src netip.AddrPort) {
	f.rx.Add(1)
	ports := f.ports.Load()
	from, ok := ports.byAddr[src]
	if !ok {
		f.count(dropUnknownSource)
		return
	}
	lrh, err := wire.DecodeLRH(b)
	if err != nil || len(b) < wire.LRHLen+wire.VCRCLen || int(lrh.PktLen)*4 != len(b)-wire.VCRCLen {
		f.count(dropMalformed)
		return
	}
	n := len(b) - wire.VCRCLen
	if wire.VCRC(b[:n]) != wire.GetVCRC(b[n:]) {
		f.count(dropBadVCRC)
		return
	}
	if tap := f.tap.Load(); tap != nil {
		(*tap)(b)
	}
	r := f.routes.Load().r
	dlid := lrh.DLID
	multicast := wire.IsMulticastLID(dlid)
	if dlid == 0 {
		f.count(dropDLIDZero)
		return
	}
	out, ok := r.Route(f.out[:0], from, dlid, lrh.SL)
	f.out = out[:0] // keeps whatever room Route grew
	if !ok {
		if multicast {
			f.count(dropNoMFTEntry)
		} else {
			f.count(dropUnrouted)
		}
		return
	}
	for _, d := range out {
		g, vl := d.To, d.VL
		if multicast && g == from {
			continue // a switch sends a multicast packet out of every member port but the one it came in on
		}
		p, ok := ports.byGUID[g]
		if !ok {
			f.count(dropNoPort)
			continue
		}
		if vl >= 15 { // VL15 is management's (QP0): a data SL mapped there is dropped
			f.count(dropVL15)
			continue
		}
		if b[0]>>4 != vl {
			b[0] = vl<<4 | b[0]&0x0f
			wire.PutVCRC(b[n:], wire.VCRC(b[:n]))
		}
		if !multicast {
			if f.pathsOn.Load() {
				f.notePath(r, lrh.SLID, dlid, from, g)
			}
			if f.crossOn.Load() && wire.ParseIBFrame(b, &f.fr) == nil && isCMREQ(&f.fr) && f.holdREQ(b, from, g, p.Addr, lrh.SLID, dlid) {
				continue
			}
		}
		if _, err := f.conn.WriteToUDPAddrPort(b, p.Addr); err != nil {
			f.count(dropTxError)
			continue
		}
		f.tx.Add(1)
	}
}
