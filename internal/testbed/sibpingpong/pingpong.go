package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/softib"
)

// kind is which of the four pingpongs.
type kind int

const (
	kindRC kind = iota
	kindUC
	kindUD
	kindSRQ
)

var kindNames = [...]string{kindRC: "rc", kindUC: "uc", kindUD: "ud", kindSRQ: "srq"}

func (k kind) String() string { return kindNames[k] }

func parseKind(s string) (kind, error) {
	for k, n := range kindNames {
		if n == s {
			return kind(k), nil
		}
	}
	return 0, fmt.Errorf("pingpong %q: want rc, uc, ud or srq", s)
}

// udQKey is the Q_Key of ibv_ud_pingpong.
const udQKey ib.QKey = 0x11111111

// What the pingpongs set on their connected QPs.
const (
	minRNRTmr  = 12 // RTR, rc and srq
	ackTimeout = 14 // RTS, rc and srq: 4.096 µs × 2^14 ≈ 67 ms
	retryCount = 7
	rnrRetry   = 7 // infinite
)

// Work request IDs as the pingpongs use them: 1 receive, 2 send. Ours
// carry the receive slot above the low two bits.
const (
	recvWRID = 1
	sendWRID = 2
)

// config is one run.
type config struct {
	kind    kind
	local   netip.Addr // softib's underlay address
	server  string     // the server to connect to; empty: be the server
	tcpPort int
	udpPort uint16
	size    int
	iters   int
	mtu     ib.MTU
	rxDepth int
	numQP   int
	timeout time.Duration
	// cqHandler drains the CQ on softib's receive goroutine, before the
	// ACKs of the batch go out; otherwise this goroutine is woken after them.
	cqHandler bool
}

func (c *config) check() error {
	switch {
	case c.size < 1:
		return fmt.Errorf("size %d", c.size)
	case c.iters < 1:
		return fmt.Errorf("iterations %d", c.iters)
	case c.rxDepth < 2:
		return fmt.Errorf("rx-depth %d: want at least 2", c.rxDepth)
	case c.numQP < 1 || c.numQP > srqRecords:
		return fmt.Errorf("%d QPs: want 1 to %d", c.numQP, srqRecords)
	case c.kind == kindSRQ && c.numQP > c.rxDepth:
		return fmt.Errorf("rx-depth %d is too small for %d QPs", c.rxDepth, c.numQP)
	}
	return nil
}

// fill is what the rdma-core programs' buffer holds before the first
// receive lands in it: they send from the buffer they receive into, so
// after that they echo what they got.
func (c *config) fill() byte {
	if c.kind == kindSRQ {
		return 0
	}
	return 0x7b
}

// pattern is what we send: position-dependent, so that a packet of a
// multi-packet message landing at the wrong offset shows.
func pattern(i int) byte { return byte(i*7) ^ byte(i>>8) ^ byte(i>>16)*13 + 1 }

// session is the softib side of one run.
type session struct {
	cfg  config
	out  io.Writer
	dev  *softib.Device
	slab *ib.Slab
	mr   ib.MR
	cq   ib.CQ
	srq  ib.SRQ
	qps  []ib.QP
	ah   ib.AH
	mine []dest
	peer []dest

	slotLen int   // one receive slot (UD: GRH in front)
	free    []int // receive slots not posted
	sendSGE ib.SGE
	routs   int
}

func run(cfg config, out io.Writer) error {
	s := &session{cfg: cfg, out: out}
	err := s.open()
	if err == nil {
		err = s.exchange()
	}
	if err == nil {
		err = s.loop()
	}
	return errors.Join(err, s.close())
}

func (s *session) open() error {
	c := &s.cfg
	dev, err := softib.Open(softib.Config{Name: "sibpingpong", Addr: c.local, Port: c.udpPort})
	if err != nil {
		return err
	}
	s.dev = dev
	if mtu := dev.Port().ActiveMTU.Bytes(); c.kind == kindUD && c.size > mtu {
		return fmt.Errorf("requested size larger than port MTU (%d)", mtu)
	}
	s.slotLen = c.size
	if c.kind == kindUD {
		s.slotLen += ib.GRHLen
	}
	// Receive slots, then the send buffer (UD sends from GRHLen on, as
	// ibv_ud_pingpong does).
	if s.slab, err = ib.NewSlab((c.rxDepth + 1) * s.slotLen); err != nil {
		return err
	}
	if s.mr, err = dev.RegisterMemory(s.slab); err != nil {
		return err
	}
	sendOff := c.rxDepth * s.slotLen
	if c.kind == kindUD {
		sendOff += ib.GRHLen
	}
	s.sendSGE = ib.SGE{MR: s.mr, Offset: sendOff, Length: c.size}
	buf, _ := s.sendSGE.Bytes()
	for i := range buf {
		buf[i] = pattern(i)
	}
	if s.cq, err = dev.CreateCQ(c.rxDepth + 2*c.numQP + 8); err != nil {
		return err
	}
	if c.kind == kindSRQ {
		if s.srq, err = dev.CreateSRQ(ib.SRQAttr{MaxWR: c.rxDepth}); err != nil {
			return err
		}
	}
	typ := map[kind]ib.QPType{kindRC: ib.RC, kindUC: ib.UC, kindUD: ib.UD, kindSRQ: ib.RC}[c.kind]
	for range c.numQP {
		qp, err := dev.CreateQP(ib.QPAttr{Type: typ, SendCQ: s.cq, RecvCQ: s.cq, SRQ: s.srq, MaxSend: 2, MaxRecv: c.rxDepth})
		if err != nil {
			return err
		}
		s.qps = append(s.qps, qp)
		m := ib.QPModify{State: ib.StateInit, PKey: ib.DefaultPKey}
		if c.kind == kindUD {
			m.QKey = udQKey
		}
		if err := qp.Modify(m); err != nil {
			return fmt.Errorf("modify QP to INIT: %w", err)
		}
	}
	for i := range c.rxDepth {
		s.free = append(s.free, i)
	}
	if err := s.postRecv(c.rxDepth); err != nil {
		return err
	}
	gid := dev.Port().GID
	for _, qp := range s.qps {
		d := dest{QPN: qp.Num(), PSN: rand.Uint32() & 0xffffff, GID: gid}
		s.mine = append(s.mine, d)
		fmt.Fprintf(s.out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %v\n", d.LID, uint32(d.QPN), d.PSN, d.GID)
	}
	return nil
}

// postRecv posts n receives, each into its own free slot.
func (s *session) postRecv(n int) error {
	if n > len(s.free) {
		return fmt.Errorf("post %d receives with %d free slots", n, len(s.free))
	}
	wrs := make([]ib.RecvWR, n)
	for i := range wrs {
		slot := s.free[len(s.free)-1]
		s.free = s.free[:len(s.free)-1]
		wrs[i] = ib.RecvWR{ID: uint64(slot)<<2 | recvWRID, SGE: ib.SGE{MR: s.mr, Offset: slot * s.slotLen, Length: s.slotLen}}
	}
	var k int
	var err error
	if s.srq != nil {
		k, err = s.srq.PostRecv(wrs)
	} else {
		k, err = s.qps[0].PostRecv(wrs)
	}
	s.routs += k
	if err != nil || k != n {
		return fmt.Errorf("couldn't post receive (%d of %d): %v", k, n, err)
	}
	return nil
}

// exchange swaps addresses with the rdma-core peer and connects the QPs.
func (s *session) exchange() error {
	c := &s.cfg
	deadline := time.Now().Add(c.timeout)
	var conn net.Conn
	var err error
	if c.server == "" {
		conn, err = accept(c.tcpPort, deadline, s.out)
	} else {
		conn, err = dial(net.JoinHostPort(c.server, strconv.Itoa(c.tcpPort)), deadline)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	if c.server == "" {
		s.peer, err = serverExchange(conn, c.kind, s.mine, s.connect)
	} else if s.peer, err = clientExchange(conn, c.kind, s.mine); err == nil {
		err = s.connect(s.peer)
	}
	if err != nil {
		return err
	}
	for _, d := range s.peer {
		fmt.Fprintf(s.out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %v\n", d.LID, uint32(d.QPN), d.PSN, d.GID)
	}
	return nil
}

func accept(port int, deadline time.Time, out io.Writer) (net.Conn, error) {
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("couldn't listen to port %d: %w", port, err)
	}
	defer l.Close()
	// The test bed starts the rdma-core client when it reads this line.
	fmt.Fprintf(out, "  listening on TCP port %d\n", port)
	_ = l.(*net.TCPListener).SetDeadline(deadline)
	conn, err := l.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	return conn, nil
}

// dial connects, retrying while the server is not listening yet.
func dial(addr string, deadline time.Time) (net.Conn, error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("couldn't connect to %s: %w", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// connect moves our QPs to RTR and RTS towards the peer's, with the
// attributes the pingpongs use.
func (s *session) connect(peer []dest) error {
	c := &s.cfg
	for i, qp := range s.qps {
		p := peer[i]
		if c.kind == kindUD {
			if err := qp.Modify(ib.QPModify{State: ib.StateRTR}); err != nil {
				return fmt.Errorf("modify QP to RTR: %w", err)
			}
			if err := qp.Modify(ib.QPModify{State: ib.StateRTS, SendPSN: s.mine[i].PSN}); err != nil {
				return fmt.Errorf("modify QP to RTS: %w", err)
			}
			ah, err := s.dev.CreateAH(ib.AHAttr{DestGID: p.GID})
			if err != nil {
				return fmt.Errorf("create AH: %w", err)
			}
			s.ah = ah
			continue
		}
		rtr := ib.QPModify{State: ib.StateRTR, DestGID: p.GID, DestQPN: p.QPN, PathMTU: c.mtu, RecvPSN: p.PSN}
		rts := ib.QPModify{State: ib.StateRTS, SendPSN: s.mine[i].PSN}
		if c.kind != kindUC {
			rtr.MinRNRTmr = minRNRTmr
			rts.Timeout, rts.RetryCount, rts.RNRRetry = ackTimeout, retryCount, rnrRetry
		}
		if err := qp.Modify(rtr); err != nil {
			return fmt.Errorf("modify QP[%d] to RTR: %w", i, err)
		}
		if err := qp.Modify(rts); err != nil {
			return fmt.Errorf("modify QP[%d] to RTS: %w", i, err)
		}
	}
	return nil
}

func (s *session) postSend(i int) error {
	wr := ib.SendWR{ID: sendWRID, SGE: s.sendSGE}
	if s.cfg.kind == kindUD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ah, s.peer[i].QPN, udQKey
	}
	if _, err := s.qps[i].PostSend([]ib.SendWR{wr}); err != nil {
		return fmt.Errorf("couldn't post send: %w", err)
	}
	return nil
}

// loop is the pingpongs' main loop: a QP sends its next message once its
// previous send completed and a message arrived, until both counts reach
// the iterations (across all QPs for srq, as ibv_srq_pingpong counts).
// The CQ is drained on softib's receive goroutine (ib.CQHandler) as the
// daemon does, so a reply leaves without a thread wake-up; completions
// added elsewhere (ACKs, flushes) wake this goroutine instead.
func (s *session) loop() error {
	c := &s.cfg
	st := &loopState{s: s, pending: make([]int, len(s.qps)), index: make(map[ib.QPN]int, len(s.qps)),
		wcs: make([]ib.Completion, c.rxDepth+c.numQP), done: make(chan struct{}), refill: 1}
	if c.kind == kindSRQ {
		st.refill = c.numQP // post again when this few receives are left
	}
	for i, qp := range s.qps {
		st.index[qp.Num()] = i
	}
	timeout := time.NewTimer(c.timeout)
	defer timeout.Stop()
	start := time.Now()
	st.mu.Lock()
	for i := range s.qps {
		st.pending[i] = recvWRID
		if c.server != "" {
			if err := s.postSend(i); err != nil {
				st.mu.Unlock()
				return err
			}
			st.pending[i] |= sendWRID
		}
	}
	st.mu.Unlock()
	if c.cqHandler {
		ib.CapsOf(s.dev).SetCQHandler(s.cq, st.drain) // a no-op once the loop is over
	}
	for {
		st.drain()
		select {
		case <-st.done:
		case <-s.cq.Ready():
			continue
		case <-timeout.C:
			st.mu.Lock()
			defer st.mu.Unlock()
			return fmt.Errorf("timed out after %v: %d of %d received, %d of %d sent", c.timeout, st.rcnt, c.iters, st.scnt, c.iters)
		}
		break
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return st.err
	}
	el := time.Since(start)
	bytes := int64(c.size) * int64(c.iters) * 2
	fmt.Fprintf(s.out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, el.Seconds(), float64(bytes)*8/float64(el.Microseconds()+1))
	fmt.Fprintf(s.out, "%d iters in %.2f seconds = %.2f usec/iter\n", c.iters, el.Seconds(), float64(el.Microseconds())/float64(c.iters))
	return nil
}

// loopState is the loop's progress, shared by the goroutines that drain.
type loopState struct {
	s          *session
	mu         sync.Mutex
	pending    []int // per QP: what it waits for before it sends again
	index      map[ib.QPN]int
	wcs        []ib.Completion
	refill     int
	rcnt, scnt int
	err        error
	done       chan struct{} // closed when finished or failed
}

// drain handles every completion there is.
func (st *loopState) drain() {
	st.mu.Lock()
	defer st.mu.Unlock()
	c := &st.s.cfg
	for st.err == nil && (st.rcnt < c.iters || st.scnt < c.iters) {
		n := st.s.cq.Poll(st.wcs)
		if n == 0 {
			return
		}
		for i := range st.wcs[:n] {
			if err := st.handle(&st.wcs[i]); err != nil {
				st.err = err
				break
			}
		}
	}
	select {
	case <-st.done:
	default:
		close(st.done)
	}
}

// handle is the pingpongs' completion step.
func (st *loopState) handle(wc *ib.Completion) error {
	s, c := st.s, &st.s.cfg
	if wc.Status != ib.WCSuccess {
		return fmt.Errorf("failed status %v for wr_id %d", wc.Status, wc.ID&3)
	}
	qi, ok := st.index[wc.QPN]
	if !ok {
		return fmt.Errorf("couldn't find QPN %06x", uint32(wc.QPN))
	}
	var done int
	switch {
	case wc.ID == sendWRID:
		st.scnt++
		done = sendWRID
	case wc.ID&3 == recvWRID:
		slot := int(wc.ID >> 2)
		if err := s.check(slot, qi, wc); err != nil {
			return fmt.Errorf("message %d: %w", st.rcnt+1, err)
		}
		s.free = append(s.free, slot)
		s.routs--
		if s.routs <= st.refill {
			if err := s.postRecv(c.rxDepth - s.routs); err != nil {
				return err
			}
		}
		st.rcnt++
		done = recvWRID
	default:
		return fmt.Errorf("completion for unknown wr_id %d", wc.ID)
	}
	st.pending[qi] &^= done
	if st.scnt < c.iters && st.pending[qi] == 0 {
		if err := s.postSend(qi); err != nil {
			return err
		}
		st.pending[qi] = recvWRID | sendWRID
	}
	return nil
}

// check verifies a received message: its length, for UD its source, and
// its content, octet by octet either what we sent (the peer echoes it) or
// the peer's initial fill (what it sends before it received anything).
func (s *session) check(slot, qi int, wc *ib.Completion) error {
	c := &s.cfg
	want := uint32(s.slotLen)
	if wc.ByteLen != want {
		return fmt.Errorf("%d octets, want %d", wc.ByteLen, want)
	}
	b, _ := ib.SGE{MR: s.mr, Offset: slot * s.slotLen, Length: s.slotLen}.Bytes()
	if c.kind == kindUD {
		if wc.SrcQPN != s.peer[qi].QPN || wc.SrcGID != s.peer[qi].GID {
			return fmt.Errorf("from QPN %06x GID %v, want %06x %v", uint32(wc.SrcQPN), wc.SrcGID, uint32(s.peer[qi].QPN), s.peer[qi].GID)
		}
		b = b[ib.GRHLen:]
	}
	fill := c.fill()
	for i, v := range b {
		if v != pattern(i) && v != fill {
			return fmt.Errorf("octet %d is %#02x, want %#02x (ours) or %#02x (the peer's fill)", i, v, pattern(i), fill)
		}
	}
	return nil
}

// printCounters prints softib's device counters and the sum of its QPs'.
func (s *session) printCounters() {
	for _, c := range s.dev.Counters() {
		fmt.Fprintf(s.out, "counter %s %d\n", c.Name, c.Value)
	}
	sum := map[string]uint64{}
	var names []string
	for _, qp := range s.qps {
		for _, c := range qp.Counters() {
			if _, ok := sum[c.Name]; !ok {
				names = append(names, c.Name)
			}
			sum[c.Name] += c.Value
		}
	}
	for _, n := range names {
		fmt.Fprintf(s.out, "counter qp.%s %d\n", n, sum[n])
	}
}

// close releases everything. The device goes first: its receive
// goroutine finishes the batch it is in, so the ACK for the peer's last
// message leaves (the loop may end, on that goroutine, before the ACK is
// sent), and the counters printed then are final.
func (s *session) close() error {
	var errs []error
	if s.dev != nil {
		errs = append(errs, s.dev.Close())
		s.printCounters()
	}
	for _, qp := range s.qps {
		errs = append(errs, qp.Close())
	}
	if s.ah != nil {
		errs = append(errs, s.ah.Close())
	}
	if s.srq != nil {
		errs = append(errs, s.srq.Close())
	}
	if s.cq != nil {
		errs = append(errs, s.cq.Close())
	}
	if s.mr != nil {
		errs = append(errs, s.mr.Close())
	}
	if s.slab != nil {
		errs = append(errs, s.slab.Close())
	}
	return errors.Join(errs...)
}
