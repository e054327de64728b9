// Command cmload is the connection load generator of the benchmarks: it
// plays many IPoIB peers in one process and connects each of them to one
// ipoibd, to measure CM connection setups per second over softib and the
// daemon's memory with many connections.
//
// Every peer has its own softib device on its own underlay address (the
// addresses must already be on an interface of this network namespace;
// scripts/bench.sh adds them as /32s to eth0) and its own ipoibcm.Manager. A
// device has only one MAD service and the daemon tells peers apart by GID,
// so one device per peer is the simple and faithful choice; it costs four
// file descriptors and two goroutines per peer (the MAD receiver and the
// one polling the manager).
//
// It prints one JSON object on stdout when every connection is up, refused
// or timed out, then holds the connections until SIGINT or SIGTERM (or
// -hold elapses), so that the caller can measure the daemon meanwhile.
//
//	cmload -peer LINKADDR -first 10.77.128.1 -n 1000 [-inflight 128] [-pid PID]
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
	"github.com/ipoibd/ipoibd/softib"
)

// result is what cmload prints.
type result struct {
	Peers        int     `json:"peers"`
	Up           int64   `json:"up"`
	Refused      int64   `json:"refused"`
	OpenSeconds  float64 `json:"open_seconds"`  // opening the devices and managers
	SetupSeconds float64 `json:"setup_seconds"` // first Connect to the last Up
	SetupsPerSec float64 `json:"setups_per_sec"`
	MedianMs     float64 `json:"median_setup_ms"` // Connect to Up, per connection
	P99Ms        float64 `json:"p99_setup_ms"`
	RefusedWhy   string  `json:"refused_reasons,omitempty"`
	DaemonHWMKiB int64   `json:"daemon_vmhwm_kib,omitempty"`
	DaemonRSSKiB int64   `json:"daemon_vmrss_kib,omitempty"`
	SelfRSSKiB   int64   `json:"cmload_vmrss_kib"`
}

// peer is one simulated IPoIB node. Its mutex guards every call into mgr.
type peer struct {
	mu    sync.Mutex
	dev   *softib.Device
	cq    ib.CQ
	srq   ib.SRQ
	ud    ib.QP
	mgr   *ipoibcm.Manager
	start time.Time
	done  bool
}

// qpFactory makes the peer's connected QPs on its SRQ and CQ.
type qpFactory struct{ p *peer }

func (f qpFactory) CreateQP(t ib.QPType) (ib.QP, error) {
	return f.p.dev.CreateQP(ib.QPAttr{Type: t, SendCQ: f.p.cq, RecvCQ: f.p.cq, SRQ: f.p.srq, MaxSend: 4})
}

type load struct {
	target   ib.LinkAddr
	peers    []*peer
	slots    chan struct{} // bounds connections being set up
	up       atomic.Int64
	refused  atomic.Int64
	lastUp   atomic.Int64 // unix nanoseconds
	mu       sync.Mutex
	setups   []time.Duration
	reasons  map[string]int
	finished chan struct{}
	left     atomic.Int64
	quit     chan struct{} // closed by close: the peers stop polling
}

func main() {
	// Thousands of peers hold about 250 KiB of live heap each (MAD
	// queues, a receive buffer); collecting at 25 % growth instead of
	// 100 % keeps 10,000 of them in about 3 GB rather than 6, so that a
	// memory run fits beside other work.
	debug.SetGCPercent(25)
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cmload:", err)
		os.Exit(1)
	}
}

// options are cmload's flags.
type options struct {
	dst      ib.LinkAddr
	first    netip.Addr
	n        int
	inflight int
	flags    ib.LinkFlags // ib.FlagRC or, with -uc, ib.FlagUC
	pid      int
	timeout  time.Duration
	hold     time.Duration
}

func parseFlags() (options, error) {
	target := flag.String("peer", "", "link address of the ipoibd to connect to (ipoibd show --json: link_addr)")
	first := flag.String("first", "", "underlay address of the first simulated peer; the others follow it")
	n := flag.Int("n", 1000, "number of simulated peers (one connection each)")
	inflight := flag.Int("inflight", 128, "connections being set up at once (the daemon's CM refuses beyond 256 half-open)")
	uc := flag.Bool("uc", false, "connect with UC instead of RC")
	pid := flag.Int("pid", 0, "pid of the daemon whose VmHWM/VmRSS to report once the connections are up")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up waiting for connections after this long")
	hold := flag.Duration("hold", 0, "after reporting, keep the connections this long (0: until SIGINT/SIGTERM)")
	flag.Parse()
	o := options{n: *n, inflight: *inflight, flags: ib.FlagRC, pid: *pid, timeout: *timeout, hold: *hold}
	if *target == "" || *first == "" || *n <= 0 || *inflight <= 0 {
		flag.Usage()
		return o, errors.New("-peer, -first and a positive -n are required")
	}
	var err error
	if o.dst, err = ib.ParseLinkAddr(*target); err != nil {
		return o, fmt.Errorf("-peer: %w", err)
	}
	if o.first, err = netip.ParseAddr(*first); err != nil {
		return o, fmt.Errorf("-first: %w", err)
	}
	if *uc {
		o.flags = ib.FlagUC
	}
	return o, nil
}

func run() error {
	o, err := parseFlags()
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)

	l := &load{target: o.dst, slots: make(chan struct{}, o.inflight), reasons: map[string]int{}, finished: make(chan struct{}), quit: make(chan struct{})}
	l.left.Store(int64(o.n))
	res := result{Peers: o.n}

	t0 := time.Now()
	if err := l.openAll(o.first, o.n, o.flags); err != nil {
		l.close()
		return err
	}
	res.OpenSeconds = time.Since(t0).Seconds()
	fmt.Fprintf(os.Stderr, "cmload: %d peers open in %.1fs; connecting\n", o.n, res.OpenSeconds)

	stop := make(chan struct{})
	go l.timers(stop)
	start := time.Now()
	go l.connectAll(stop)
	select {
	case <-l.finished:
	case <-time.After(o.timeout):
		fmt.Fprintln(os.Stderr, "cmload: timed out waiting for connections")
	case s := <-sig:
		close(stop)
		l.close()
		return fmt.Errorf("interrupted by %v", s)
	}
	l.report(&res, start, o.pid)

	if o.hold > 0 {
		select {
		case <-time.After(o.hold):
		case <-sig:
		}
	} else {
		<-sig
	}
	close(stop)
	// No DREQs: the caller tears the daemon down with the namespaces, and
	// 10,000 disconnects would only slow the exit.
	l.close()
	return nil
}

// openAll opens n peers on the underlay addresses from first on. Opening
// is slow with many addresses (softib looks its address up in the full
// address list), so it runs on every core.
func (l *load) openAll(first netip.Addr, n int, flags ib.LinkFlags) error {
	addrs := make([]netip.Addr, n)
	for i, addr := 0, first; i < n; i++ {
		addrs[i], addr = addr, nextHost(addr)
	}
	l.peers = make([]*peer, n)
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				l.peers[i], errs[i] = l.open(addrs[i], flags)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// connectAll connects every peer to the target, as setup slots come free,
// until stop is closed.
func (l *load) connectAll(stop chan struct{}) {
	for _, p := range l.peers {
		select {
		case l.slots <- struct{}{}:
		case <-stop:
			return
		}
		p.mu.Lock()
		p.start = time.Now()
		if ok, err := p.mgr.Connect(p.start, l.target); !ok || err != nil {
			l.fail(p, fmt.Sprintf("connect: ok=%v err=%v", ok, err))
		}
		p.mu.Unlock()
	}
}

// report fills in res from the setups since start (and, with pid, the
// daemon's memory) and prints it as one JSON line on stdout.
func (l *load) report(res *result, start time.Time, pid int) {
	res.Up, res.Refused = l.up.Load(), l.refused.Load()
	if last := l.lastUp.Load(); last > 0 {
		res.SetupSeconds = time.Unix(0, last).Sub(start).Seconds()
		res.SetupsPerSec = float64(res.Up) / res.SetupSeconds
	}
	l.mu.Lock()
	res.MedianMs, res.P99Ms = quantile(l.setups, 0.5), quantile(l.setups, 0.99)
	var why []string
	for r, k := range l.reasons {
		why = append(why, fmt.Sprintf("%d× %s", k, r))
	}
	l.mu.Unlock()
	res.RefusedWhy = strings.Join(why, "; ")
	if pid > 0 {
		time.Sleep(200 * time.Millisecond) // the daemon sees the last RTUs
		res.DaemonHWMKiB, res.DaemonRSSKiB = memOf(pid)
	}
	_, res.SelfRSSKiB = memOf(os.Getpid())
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	os.Stdout.Sync()
}

// open makes one peer on the underlay address a.
func (l *load) open(a netip.Addr, flags ib.LinkFlags) (*peer, error) {
	dev, err := softib.Open(softib.Config{Name: "cmload", Addr: a, RxBatch: 1})
	if err != nil {
		return nil, fmt.Errorf("peer %v: %w", a, err)
	}
	p := &peer{dev: dev}
	fail := func(err error) (*peer, error) { _ = dev.Close(); return nil, err }
	if p.cq, err = dev.CreateCQ(64); err != nil {
		return fail(err)
	}
	if p.srq, err = dev.CreateSRQ(ib.SRQAttr{MaxWR: 1}); err != nil {
		return fail(err)
	}
	// A UD QP gives the peer a genuine UD QPN for its link address; nothing
	// is ever sent or received on it.
	if p.ud, err = dev.CreateQP(ib.QPAttr{Type: ib.UD, SendCQ: p.cq, RecvCQ: p.cq, MaxSend: 1, MaxRecv: 1}); err != nil {
		return fail(err)
	}
	port := dev.Port()
	local := ib.LinkAddr{Flags: flags, QPN: p.ud.Num(), GID: port.GID}
	if p.mgr, err = ipoibcm.NewManager(ipoibcm.ManagerConfig{
		Service: func(ev func(cm.Event)) (cm.Service, error) {
			return cm.EngineOnQP1(dev)(cm.ServiceParams{Port: port, PKey: port.PKeys[0], UDQPN: local.QPN, Events: ev})
		},
		PKey:    port.PKeys[0],
		Local:   local,
		UC:      flags == ib.FlagUC,
		PathMTU: port.ActiveMTU,
		QPs:     qpFactory{p},
		Up:      func(*ipoibcm.Connection) { l.upped(p) },
		Refused: func(_ ib.LinkAddr, reason string) { l.fail(p, reason) },
	}); err != nil {
		return fail(err)
	}
	// The service queues the MADs it receives until the manager polls it,
	// as the daemon does when Wake fires.
	go func() {
		for {
			select {
			case <-p.mgr.Wake():
			case <-l.quit:
				return
			}
			p.mu.Lock()
			p.mgr.Poll(time.Now())
			p.mu.Unlock()
		}
	}()
	return p, nil
}

// upped and fail run with p.mu held (from the manager's callbacks) or, for
// fail, right after a failed Connect.
func (l *load) upped(p *peer) {
	now := time.Now()
	l.up.Add(1)
	l.lastUp.Store(now.UnixNano())
	l.mu.Lock()
	l.setups = append(l.setups, now.Sub(p.start))
	l.mu.Unlock()
	l.finish(p)
}

func (l *load) fail(p *peer, reason string) {
	l.refused.Add(1)
	l.mu.Lock()
	l.reasons[reason]++
	l.mu.Unlock()
	l.finish(p)
}

// finish frees the peer's setup slot once, whatever the outcome.
func (l *load) finish(p *peer) {
	if p.done {
		return
	}
	p.done = true
	<-l.slots
	if l.left.Add(-1) == 0 {
		close(l.finished)
	}
}

// timers runs every manager's CM timers (retransmissions, timeouts).
func (l *load) timers(stop chan struct{}) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			for _, p := range l.peers {
				p.mu.Lock()
				if next := p.mgr.Next(); !next.IsZero() && !now.Before(next) {
					p.mgr.Expire(now)
				}
				p.mu.Unlock()
			}
		}
	}
}

func (l *load) close() {
	close(l.quit)
	for _, p := range l.peers {
		if p == nil {
			continue
		}
		p.mu.Lock()
		_ = p.mgr.Service().Close()
		p.mu.Unlock()
		_ = p.dev.Close()
	}
}

// nextHost steps to the next address, skipping .0 and .255 of each /24 so
// that every address is an ordinary host address.
func nextHost(a netip.Addr) netip.Addr {
	for {
		a = a.Next()
		if !a.Is4() {
			return a
		}
		if b := a.As4(); b[3] != 0 && b[3] != 255 {
			return a
		}
	}
}

func quantile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return float64(s[i].Microseconds()) / 1000
}

// memOf reads VmHWM and VmRSS (KiB) of a process.
func memOf(pid int) (hwm, rss int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		var v int64
		if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &v); err == nil {
			hwm = v
		}
		if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &v); err == nil {
			rss = v
		}
	}
	return hwm, rss
}
