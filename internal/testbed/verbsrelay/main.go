// Command verbsrelay is the ceiling of a TUN driver over verbs, as
// bench/relay is over UDP: each TUN read (its virtio-net header, as
// offload.Hdr encodes it, and a packet of up to 64 KiB) goes as one RC
// SEND on the verbs provider, and the peer writes what it receives to its
// TUN as it came. No IPoIB: no neighbors, no CM (the two ends swap QPN and GID
// through files), no cutting of super-packets, no checksums computed. It
// uses ipoibd's own tun and verbs packages, so what it leaves out is
// exactly ipoibd's work above them. One goroutine reads the TUN and posts;
// the receive CQ's handler writes to the TUN and posts the buffer again.
//
// With -ud it is the ceiling of datagram mode instead: a UD datagram
// carries one standard IP packet of up to the TUN's MTU (4092, as IPoIB's
// datagram mode), so the relay does what datagram mode cannot leave out
// and nothing else: it completes partial checksums and cuts super-packets
// into segments (offload.Complete, offload.Split), one UD SEND each, and
// the peer merges them again (offload.Coalescer, which verifies each
// segment's checksum). The passes are ipoibd's own code, as in bench/relay
// -conform.
//
//	verbsrelay -device rxe0 -tun vr0 -me /tmp/a -peer /tmp/b [-ud]
package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/offload"
	"github.com/ipoibd/ipoibd/tun"
	"github.com/ipoibd/ipoibd/verbs"
)

// mode is what one relay's QP carries and how many slots it keeps.
type mode struct {
	typ              ib.QPType
	slotSize         int // one message, and for UD the GRH in front of it
	numRecv, numSend int
	mtu              int // the TUN's
}

var (
	// A header and a 64 KiB packet per RC message.
	rcMode = mode{typ: ib.RC, slotSize: 72 << 10, numRecv: 64, numSend: 64, mtu: 65520}
	// One IP packet of up to 4092 octets per datagram, as IPoIB's datagram
	// mode (a 4096-octet IB MTU less its 4-octet header); as many receive
	// slots as ipoibd's UD ring (a datagram that finds none is lost), and
	// enough send slots for the 45 segments of a super-packet of
	// 1460-octet segments.
	udMode = mode{typ: ib.UD, slotSize: ib.GRHLen + 4096, numRecv: 2048, numSend: 256, mtu: 4092}
)

func main() {
	device := flag.String("device", "", "RDMA device, e.g. rxe0")
	tunName := flag.String("tun", "vr0", "TUN interface to make")
	ud := flag.Bool("ud", false, "datagram mode: one standard IP packet of up to 4092 octets per UD SEND")
	me := flag.String("me", "", "file to write this end's QPN and GID to")
	peer := flag.String("peer", "", "file to read the other end's QPN and GID from (waited for)")
	flag.Parse()
	m := rcMode
	if *ud {
		m = udMode
	}
	if err := run(*device, *tunName, m, *me, *peer); err != nil {
		fmt.Fprintln(os.Stderr, "verbsrelay:", err)
		os.Exit(1)
	}
}

// relay is one end: its QP, slots and TUN.
type relay struct {
	mode
	slab     *ib.Slab
	mr       ib.MR
	scq, rcq ib.CQ
	qp       ib.QP
	t        *tun.Device
	// UD only: where datagrams go.
	ah      ib.AH
	peerQPN ib.QPN
	// The receive side's, made once: no allocation per packet lowers the
	// ceiling.
	rwc   [16]ib.Completion
	again [16]ib.RecvWR
	parts [1][]byte
	gro   offload.Coalescer
}

// The Q_Key of the UD relay's datagrams (any would do: both ends are ours).
const relayQKey = ib.DefaultIPoIBQKey

func (r *relay) sge(slot, n int) ib.SGE {
	return ib.SGE{MR: r.mr, Offset: slot * r.slotSize, Length: n}
}

func (r *relay) buf(slot int) []byte {
	return r.slab.Bytes()[slot*r.slotSize : (slot+1)*r.slotSize]
}

func run(device, tunName string, m mode, me, peer string) error {
	if device == "" || me == "" || peer == "" {
		return errors.New("-device, -me and -peer are required")
	}
	d, err := verbs.Open(verbs.Config{Device: device, Port: 1, GIDIndex: -1})
	if err != nil {
		return err
	}
	defer d.Close()
	r := &relay{mode: m}
	if r.slab, err = ib.NewSlab(m.slotSize * (m.numRecv + m.numSend)); err != nil {
		return err
	}
	if r.mr, err = d.RegisterMemory(r.slab); err != nil {
		return err
	}
	if r.scq, err = d.CreateCQ(m.numSend); err != nil {
		return err
	}
	if r.rcq, err = d.CreateCQ(m.numRecv); err != nil {
		return err
	}
	if r.qp, err = d.CreateQP(ib.QPAttr{Type: m.typ, SendCQ: r.scq, RecvCQ: r.rcq, MaxSend: m.numSend, MaxRecv: m.numRecv}); err != nil {
		return err
	}
	port := d.Port()
	if err := os.WriteFile(me, fmt.Appendf(nil, "%d %s\n", r.qp.Num(), hex.EncodeToString(port.GID[:])), 0o644); err != nil {
		return err
	}
	var peerQPN ib.QPN
	var peerGID ib.GID
	err = awaitFile(peer, 60*time.Second, func(b []byte) bool {
		f := strings.Fields(string(b))
		if len(f) != 2 {
			return false
		}
		qpn, err1 := strconv.ParseUint(f[0], 10, 32)
		g, err2 := hex.DecodeString(f[1])
		if err1 != nil || err2 != nil || len(g) != len(ib.GID{}) {
			return false
		}
		peerQPN, peerGID = ib.QPN(qpn), ib.GID(g)
		return true
	})
	if err != nil {
		return err
	}
	var steps []ib.QPModify
	switch m.typ {
	case ib.RC:
		steps = []ib.QPModify{
			{State: ib.StateInit, PKey: port.PKeys[0]},
			{State: ib.StateRTR, DestGID: peerGID, DestQPN: peerQPN, PathMTU: port.ActiveMTU, RecvPSN: 1, MinRNRTmr: 12},
			{State: ib.StateRTS, SendPSN: 1, Timeout: 14, RetryCount: 7, RNRRetry: 7},
		}
	case ib.UD:
		steps = []ib.QPModify{{State: ib.StateInit, PKey: port.PKeys[0], QKey: relayQKey}, {State: ib.StateRTR}, {State: ib.StateRTS}}
		if r.ah, err = d.CreateAH(ib.AHAttr{DestGID: peerGID}); err != nil {
			return err
		}
		defer r.ah.Close()
		r.peerQPN = peerQPN
		if ibMTU := port.ActiveMTU.Bytes(); m.mtu > ibMTU {
			return fmt.Errorf("%s's active MTU is %d octets, below the %d datagram mode needs", device, ibMTU, m.mtu)
		}
	}
	for _, s := range steps {
		if err := r.qp.Modify(s); err != nil {
			return err
		}
	}
	// Nothing is sent before the peer's QP can take it: an RC QP whose
	// sends found the peer's not yet ready to receive goes to the error
	// state once its retries run out (the kernel sends MLD reports as soon
	// as the TUN is up).
	if err := os.WriteFile(me+".rts", nil, 0o644); err != nil {
		return err
	}
	if err := awaitFile(peer+".rts", 60*time.Second, func([]byte) bool { return true }); err != nil {
		return err
	}
	if r.t, err = tun.Open(tun.Config{Name: tunName, MTU: m.mtu, Offload: true}); err != nil {
		return err
	}
	defer r.t.Close()

	recvs := make([]ib.RecvWR, m.numRecv)
	for k := range recvs {
		recvs[k] = ib.RecvWR{ID: uint64(k), SGE: r.sge(k, m.slotSize)}
	}
	if _, err := r.qp.PostRecv(recvs); err != nil {
		return err
	}
	var rxMu sync.Mutex
	handler := func() {
		rxMu.Lock()
		defer rxMu.Unlock()
		r.receive()
	}
	if !ib.CapsOf(d).SetCQHandler(r.rcq, handler) {
		return errors.New("the device runs no completion handlers")
	}
	fmt.Println("verbsrelay: ready")
	s := newSender(r)
	if m.typ == ib.UD {
		return s.loopUD()
	}
	return s.loopRC()
}

// receive runs in the receive CQ's handler: each message to the TUN, the
// batch's slots posted again. The coalescer holds parts of the slots, so it
// is flushed before they are.
func (r *relay) receive() {
	for n := r.rcq.Poll(r.rwc[:]); n > 0; n = r.rcq.Poll(r.rwc[:]) {
		for k, c := range r.rwc[:n] {
			b := r.buf(int(c.ID))[:min(int(c.ByteLen), r.slotSize)]
			switch {
			case c.Status != ib.WCSuccess:
				dropped("message that failed")
			case r.typ == ib.UD:
				r.deliverUD(b)
			default:
				r.deliverRC(b)
			}
			r.again[k] = ib.RecvWR{ID: c.ID, SGE: r.sge(int(c.ID), r.slotSize)}
		}
		r.flush()
		_, _ = r.qp.PostRecv(r.again[:n])
	}
}

// deliverRC writes an RC message, a virtio-net header and a packet, as it
// came.
func (r *relay) deliverRC(b []byte) {
	var h offload.Hdr
	if h.Decode(b) != nil {
		dropped("message without a header")
		return
	}
	r.parts[0] = b[offload.HdrLen:]
	_, _ = r.t.WriteGSO(h, r.parts[:])
}

// deliverUD merges a datagram's TCP segment with those before it where it
// may, and writes any other packet as it came.
func (r *relay) deliverUD(b []byte) {
	if len(b) <= ib.GRHLen {
		dropped("empty datagram")
		return
	}
	p := b[ib.GRHLen:]
	if !r.gro.Add(p) {
		r.flush()
		if !r.gro.Add(p) {
			_, _ = r.t.Write(p)
		}
	}
}

func (r *relay) flush() {
	switch h, ps := r.gro.Flush(); len(ps) {
	case 0:
	case 1:
		_, _ = r.t.Write(ps[0])
	default:
		_, _ = r.t.WriteGSO(h, ps)
	}
}

// sender is the TUN reading, posting side: one goroutine.
type sender struct {
	*relay
	free  []int // send slots not in flight
	swc   [16]ib.Completion
	sends []ib.SendWR
}

func newSender(r *relay) *sender {
	s := &sender{relay: r, free: make([]int, 0, r.numSend), sends: make([]ib.SendWR, 0, r.numSend)}
	for k := range r.numSend {
		s.free = append(s.free, r.numRecv+k)
	}
	return s
}

// reap takes the send completions there are; false if there were none.
func (s *sender) reap() bool {
	n := s.scq.Poll(s.swc[:])
	for _, c := range s.swc[:n] {
		s.free = append(s.free, int(c.ID))
	}
	return n > 0
}

// await returns once n send slots are free.
func (s *sender) await(n int) {
	for s.reap() {
	}
	for len(s.free) < n {
		if !s.reap() {
			<-s.scq.Ready()
		}
	}
}

// take hands out a free slot.
func (s *sender) take() int {
	slot := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	return slot
}

// loopRC sends each TUN read, its header in front, as one SEND.
func (s *sender) loopRC() error {
	var h offload.Hdr
	for {
		s.await(1)
		slot := s.take()
		b := s.buf(slot)
		n, err := s.t.Read(0, b[offload.HdrLen:], &h)
		if err != nil {
			return err
		}
		h.Encode(b)
		s.sends = append(s.sends[:0], ib.SendWR{ID: uint64(slot), SGE: s.sge(slot, offload.HdrLen+n)})
		if _, err := s.qp.PostSend(s.sends); err != nil {
			return err
		}
	}
}

// loopUD sends each TUN read as standard IP packets, one datagram each:
// a partial checksum completed, a super-packet cut into its segments.
func (s *sender) loopUD() error {
	in := make([]byte, 64<<10+offload.HdrLen)
	var h offload.Hdr
	for {
		n, err := s.t.Read(0, in, &h)
		if err != nil {
			return err
		}
		pkt := in[:n]
		s.sends = s.sends[:0]
		if h.GSOType == offload.GSONone {
			if err := offload.Complete(h, pkt); err != nil || len(pkt) > s.mtu {
				dropped("packet the TUN gave that no datagram carries")
				continue
			}
			s.await(1)
			slot := s.take()
			copy(s.buf(slot), pkt)
			s.sends = append(s.sends, s.datagram(slot, len(pkt)))
		} else {
			segs, err := offload.Split(h, pkt)
			if err != nil || segs.MaxLen() > s.mtu || segs.Len() > s.numSend {
				dropped("super-packet that does not cut into datagrams")
				continue
			}
			s.await(segs.Len())
			for k := range segs.Len() {
				slot := s.take()
				s.sends = append(s.sends, s.datagram(slot, segs.Put(k, s.buf(slot))))
			}
		}
		if _, err := s.qp.PostSend(s.sends); err != nil {
			return err
		}
	}
}

func (s *sender) datagram(slot, n int) ib.SendWR {
	return ib.SendWR{ID: uint64(slot), SGE: s.sge(slot, n), AH: s.ah, RemoteQPN: s.peerQPN, RemoteQKey: relayQKey}
}

var reported atomic.Int64

// dropped reports the first drops of a kind on stderr.
func dropped(what string) {
	if reported.Add(1) <= 10 {
		fmt.Fprintf(os.Stderr, "verbsrelay: dropped a %s\n", what)
	}
}

// awaitFile returns once the file at path exists and ok takes its
// contents.
func awaitFile(path string, limit time.Duration, ok func([]byte) bool) error {
	end := time.Now().Add(limit)
	for {
		if b, err := os.ReadFile(path); err == nil && ok(b) {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("nothing usable in %s after %v", path, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
