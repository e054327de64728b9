package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ipoibd/ipoibd/cm"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
	"github.com/ipoibd/ipoibd/softib"
	"github.com/ipoibd/ipoibd/umadsa"
	"github.com/ipoibd/ipoibd/verbs"
	"github.com/spf13/pflag"
)

// options are the daemon's flags.
type options struct {
	ifname      string
	provider    string
	underlay    string
	softibPort  uint16
	softibPKeys string
	pkey        string
	mode        string
	cmModes     string
	policy      string
	mtu         int
	addrs       []string
	children    []string
	idleTimeout time.Duration
	maxConns    int
	logLevel    string
	netns       string
	device      string
	port        int
	cm          string
	peers       string
	metrics     string // --metrics-listen
	offload     bool   // --tun-offload
	queues      int    // --tun-queues
	version     bool
	help        bool
}

// runFlags defines the daemon's flags on o; the usage text and the man
// page are made from the same set.
func runFlags(o *options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("ipoibd run", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Usage = func() {} // --help prints the whole usage to stdout, not this to stderr
	fs.StringVar(&o.ifname, "ifname", "ib0", "name of the IPoIB interface to create")
	fs.StringVar(&o.provider, "provider", "softib", "InfiniBand provider: softib (software, over UDP) or verbs (rdma-core)")
	fs.StringVar(&o.underlay, "underlay", "", "softib: IP address of the underlay this host's adapter lives on (required for softib)")
	fs.Uint16Var(&o.softibPort, "softib-port", softib.UDPPort, "softib: UDP port of the fabric")
	fs.StringVar(&o.softibPKeys, "softib-pkeys", "", "softib: the port's P_Key table, comma-separated (what a subnet manager sets on InfiniBand); P_Key children need theirs here (default: --pkey alone)")
	fs.StringVar(&o.pkey, "pkey", "0xffff", "partition key of the interface")
	fs.StringVar(&o.mode, "mode", "connected", "IPoIB mode: connected or datagram")
	fs.StringVar(&o.cmModes, "cm-modes", "rc", "connected modes offered: rc, uc or rc,uc")
	fs.StringVar(&o.policy, "cm-policy", "linux", "sending policy: linux (send on our own connections only, as the kernel's ipoib expects) or rfc (send on connections either side opened; RFC 4755 crossing rule)")
	fs.IntVar(&o.mtu, "mtu", 0, "interface MTU (default: 65520 connected, the UD MTU in datagram mode)")
	fs.StringArrayVar(&o.addrs, "addr", nil, "address with prefix length to put on the interface (repeatable), e.g. 192.168.77.1/24")
	fs.StringArrayVar(&o.children, "child", nil, "a P_Key child made at start, as `ipoibd child add` makes one at run time (repeatable): PKEY or PKEY=ADDR[,ADDR...], e.g. 0x8001=192.168.78.1/24")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 0, "tear down connections idle this long (0: never)")
	fs.IntVar(&o.maxConns, "max-conns", 4096, "most connections past setup at once; further REQs are rejected (no resources). Those in setup have their own bounds (256, 16 per peer)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.netns, "netns", "", "network namespace to put the interface in (a name as ip netns lists it, or a path; default: the daemon's, and no namespace is entered). Entering one needs CAP_SYS_ADMIN")
	fs.StringVar(&o.device, "device", "", "verbs: RDMA device, e.g. mlx5_0 (see ibv_devices)")
	fs.IntVar(&o.port, "port", 1, "verbs: port of the RDMA device")
	fs.StringVar(&o.cm, "cm", "auto", "verbs: connection service: own (ipoibd's CM on QP1 through ib_umad; needs the kernel's ib_cm unloaded), kernel (the kernel CM through librdmacm), or auto (own unless ib_cm is loaded)")
	fs.StringVar(&o.peers, "peers", "any", "verbs --cm kernel: any, or ipoibd-only to advertise connected mode anyway. The kernel CM cannot listen on RFC 4755's service IDs, so a kernel ipoib peer's connection request would be refused: with peers that may be kernel ipoib, --cm kernel runs datagram mode")
	fs.StringVar(&o.metrics, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics, `ADDR` an IP address and port, e.g. 127.0.0.1:9468 or [::1]:9468 (:9468: every address), in the daemon's own network namespace (not --netns's); empty: off. Read at scrape time, nothing on the datapath: ipoibd_<counter>_total for every counter of ipoibd stats; gauges ipoibd_info, ipoibd_mtu_bytes, ipoibd_ud_mtu_bytes, ipoibd_ib_mtu_bytes, ipoibd_neighbors (by state, via), ipoibd_connections (by type, direction, state); each with an interface label (children too); and the Go runtime's and the process's")
	fs.BoolVar(&o.offload, "tun-offload", true, "let the TUN hand over and take TCP/UDP super-packets of up to 64 KiB (TSO, USO, checksum offload, receive coalescing); ipoibd cuts them into standard IPoIB packets with valid checksums, so peers see no difference. --tun-offload=false moves every packet whole (for comparisons)")
	fs.IntVar(&o.queues, "tun-queues", 0, fmt.Sprintf("TUN queues, each read by its own thread with its own buffers; the kernel keeps each flow on one queue (default: one per CPU, at most %d; at most %d)", ipoib.DefaultMaxQueues, ipoib.MaxQueues))
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.BoolVarP(&o.help, "help", "h", false, "print the whole usage and exit")
	return fs
}

func run(args []string, out io.Writer) error {
	var o options
	fs := runFlags(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			usage(out)
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see ipoibd --help)", fs.Arg(0))
	}
	if o.help {
		usage(out)
		return nil
	}
	if o.version {
		fmt.Fprintln(out, version())
		return nil
	}
	cfg, dev, choice, err := o.config()
	if err != nil {
		return err
	}
	hint := "the subnet manager sets it"
	if o.provider == "softib" {
		hint = "softib: list it in --softib-pkeys"
	}
	d, err := newDaemon(cfg, dev, choice, hint)
	if err != nil {
		return err
	}
	for _, c := range o.children {
		pkey, addrs, _ := strings.Cut(c, "=")
		r := childRequest{PKey: pkey}
		if addrs != "" {
			r.Addrs = strings.Split(addrs, ",")
		}
		if _, err := d.addChild(r); err != nil {
			_ = d.Close()
			return fmt.Errorf("--child %q: %w", c, err)
		}
	}
	metricsSrv, err := startMetrics(o.metrics, d.interfaces, cfg.Log)
	if err != nil {
		_ = d.Close()
		return err
	}
	iface := d.first()
	if path := os.Getenv("IPOIBD_CPUPROFILE"); path != "" {
		// A developer aid: profile the daemon until it exits.
		stop, err := startCPUProfile(path)
		if err != nil {
			return err
		}
		defer stop()
	}
	if path := os.Getenv("IPOIBD_TRACE"); path != "" {
		// A developer aid: the runtime's execution trace (scheduling
		// latency on the datapath) until the daemon exits.
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := trace.Start(f); err != nil {
			return err
		}
		defer func() { trace.Stop(); f.Close() }()
	}
	// Signals are caught before readiness is announced: a SIGHUP right
	// after READY=1 must not kill the daemon.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	info := iface.Show()
	cfg.Log.Info("up", "if", info.Name, "link_addr", info.LinkAddr, "mode", info.Mode, "mtu", info.MTU, "ud_mtu", info.UDMTU, "addrs", strings.Join(info.Addrs, ","))
	notify := newNotifier(cfg.Log)
	notify.send("READY=1\nSTATUS=" + info.Name + " up, " + info.Mode + " mode, MTU " + strconv.Itoa(info.MTU))
	stopWatchdog := notify.watchdog(func() { iface.Show() })

	for s := range sig {
		if s == syscall.SIGHUP {
			for _, i := range d.interfaces() {
				logState(cfg.Log, i)
			}
			continue
		}
		cfg.Log.Info("shutting down", "signal", s.String())
		break
	}
	stopWatchdog()
	notify.send("STOPPING=1")
	_ = metricsSrv.Close()
	return d.Close()
}

// logState answers SIGHUP: one line with the interface's state, for an
// operator who has the journal but no shell in the namespace. Nothing is
// re-read; the daemon keeps running.
func logState(log *slog.Logger, iface *ipoib.Interface) {
	info := iface.Show()
	var drops uint64
	for _, c := range iface.Stats() {
		if strings.Contains(c.Name, "drop") {
			drops += c.Value
		}
	}
	log.Info("state (SIGHUP: nothing re-read)", "if", info.Name, "mode", info.Mode, "mtu", info.MTU,
		"addrs", strings.Join(info.Addrs, ","), "neighbors", info.Neighbors, "candidates", info.Candidates,
		"connections", info.Conns, "drops", drops)
}

func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// config checks every flag, chooses the connection service and opens the
// provider's device.
func (o *options) config() (ipoib.Config, ib.Device, cmChoice, error) {
	cfg, dev, choice, err := o.config1()
	if err != nil && dev != nil {
		_ = dev.Close()
		dev = nil
	}
	return cfg, dev, choice, err
}

func (o *options) config1() (ipoib.Config, ib.Device, cmChoice, error) {
	var cfg ipoib.Config
	var choice cmChoice
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return cfg, nil, choice, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	if err := checkMetricsListen(o.metrics); err != nil {
		return cfg, nil, choice, err
	}
	cfg.Log = slog.New(logHandler(os.Stderr, level))
	cfg.NoOffload = !o.offload
	if o.queues < 0 || o.queues > ipoib.MaxQueues {
		return cfg, nil, choice, fmt.Errorf("--tun-queues %d: want 1 to %d (0: one per CPU)", o.queues, ipoib.MaxQueues)
	}
	cfg.Queues = o.queues
	var err error
	if cfg.Mode, err = ipoib.ParseMode(o.mode); err != nil {
		return cfg, nil, choice, fmt.Errorf("--mode: %w", err)
	}
	if cfg.Policy, err = ipoibcm.ParsePolicy(o.policy); err != nil {
		return cfg, nil, choice, fmt.Errorf("--cm-policy: %w", err)
	}
	for _, m := range strings.Split(o.cmModes, ",") {
		switch strings.TrimSpace(m) {
		case "rc":
			cfg.RC = true
		case "uc":
			cfg.UC = true
		default:
			return cfg, nil, choice, fmt.Errorf("--cm-modes %q: want rc, uc or rc,uc", o.cmModes)
		}
	}
	pkey, err := ib.ParsePKey(o.pkey)
	if err != nil {
		return cfg, nil, choice, fmt.Errorf("--pkey: %w", err)
	}
	for _, a := range o.addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return cfg, nil, choice, fmt.Errorf("--addr %q: want an address with prefix length, e.g. 192.168.77.1/24", a)
		}
		cfg.Addrs = append(cfg.Addrs, p)
	}
	if o.maxConns < 1 {
		return cfg, nil, choice, fmt.Errorf("--max-conns %d: must be at least 1", o.maxConns)
	}
	cfg.MaxConns = o.maxConns
	if o.mtu < 0 {
		return cfg, nil, choice, fmt.Errorf("--mtu %d: must be positive", o.mtu)
	}
	cfg.Name, cfg.MTU, cfg.IdleTimeout, cfg.Netns = o.ifname, o.mtu, o.idleTimeout, o.netns
	if choice, err = chooseCM(o.provider, o.cm, o.peers, cfg.Mode, verbs.CMModuleHolders); err != nil {
		return cfg, nil, choice, err
	}
	if cfg.Mode == ipoib.Connected && !choice.Advertise {
		cfg.Mode = ipoib.Datagram
	}
	if o.provider == "verbs" {
		cfg.Log.Info("connection service", "cm", orNone(choice.Service), "connected_mode", choice.Advertise, "why", choice.Why)
	}
	switch o.provider {
	case "softib":
		if o.underlay == "" {
			return cfg, nil, choice, errors.New("--underlay is required with --provider softib: the IP address this host's software adapter uses")
		}
		addr, err := netip.ParseAddr(o.underlay)
		if err != nil {
			return cfg, nil, choice, fmt.Errorf("--underlay %q: not an IP address", o.underlay)
		}
		pkeys := []ib.PKey{pkey}
		if o.softibPKeys != "" {
			pkeys = nil
			for _, f := range strings.Split(o.softibPKeys, ",") {
				p, err := ib.ParsePKey(strings.TrimSpace(f))
				if err != nil {
					return cfg, nil, choice, fmt.Errorf("--softib-pkeys: %w", err)
				}
				pkeys = append(pkeys, p)
			}
		}
		dev, err := softib.Open(softib.Config{Name: "softib0", Addr: addr, Port: o.softibPort, PKeys: pkeys})
		if err != nil {
			return cfg, nil, choice, err
		}
		cfg.Device, cfg.PKey = dev, pkey
		return cfg, dev, choice, nil
	case "verbs":
		if o.underlay != "" {
			return cfg, nil, choice, errors.New("--underlay is for --provider softib; verbs uses the adapter's own port (--device, --port)")
		}
		if o.device == "" {
			return cfg, nil, choice, errors.New("--device is required with --provider verbs: the RDMA device, e.g. mlx5_0 (ibv_devices lists them)")
		}
		if o.port < 1 || o.port > 255 {
			return cfg, nil, choice, fmt.Errorf("--port %d: want 1-255", o.port)
		}
		dev, err := verbs.Open(verbs.Config{Device: o.device, Port: o.port, GIDIndex: -1, NoRDMACM: choice.Service != cmKernel})
		if err != nil {
			return cfg, nil, choice, err
		}
		cfg.Device, cfg.PKey = dev, pkey
		if choice.Service == cmKernel {
			cfg.ConnService = func(p cm.ServiceParams) (cm.Service, error) {
				return verbs.NewConnService(dev, p.Events)
			}
		}
		// --cm own: the cm engine on the device's MADs (ib_umad), as on
		// softib. On InfiniBand the SA's joins and paths are ours: rdma_cm
		// (--cm kernel) resolves the routes of its own connections only,
		// and nobody joins the groups our UD QP needs.
		if dev.Port().LinkLayer == "InfiniBand" {
			sub, err := umadsa.OpenPortClient(o.device, o.port)
			if err != nil {
				_ = dev.Close()
				return cfg, nil, choice, fmt.Errorf("the subnet administrator's client on %s port %d: %w", o.device, o.port, err)
			}
			cfg.Subnet = sub
		}
		return cfg, dev, choice, nil
	}
	return cfg, nil, choice, fmt.Errorf("--provider %q: want softib or verbs", o.provider)
}

// The connection services: ipoibd's own CM engine on QP1, or the kernel's
// CM through librdmacm (verbs only).
const (
	cmOwn    = "own"
	cmKernel = "kernel"
)

// cmChoice is the connection service the daemon runs and whether its link
// address advertises connected mode, with why; `ipoibd show` prints it.
type cmChoice struct {
	Service   string `json:"cm_service"` // cmOwn, cmKernel, or "" (datagram mode)
	Advertise bool   `json:"connected_advertised"`
	Why       string `json:"cm_why"`
}

// chooseCM reads --cm and --peers. A kernel CM reached through librdmacm
// listens on a mapped service ID, never RFC 4755's (rdma_cm cannot bind
// the IETF prefix), so a kernel ipoib peer that saw RC in our link address
// would draw REJ 8 and lose unicast to us: with that service, connected
// mode is advertised only when the operator says every peer is ipoibd.
// cmLoaded reports whether ib_cm holds QP1's CM class, and its users.
func chooseCM(provider, cmFlag, peers string, mode ipoib.Mode, cmLoaded func() (bool, []string)) (cmChoice, error) {
	switch cmFlag {
	case "auto", cmOwn, cmKernel:
	default:
		return cmChoice{}, fmt.Errorf("--cm %q: want own, kernel or auto", cmFlag)
	}
	switch peers {
	case "any", "ipoibd-only":
	default:
		return cmChoice{}, fmt.Errorf("--peers %q: want any or ipoibd-only", peers)
	}
	if provider == "softib" && cmFlag == cmKernel {
		return cmChoice{}, errors.New("--cm kernel is for --provider verbs: softib has no kernel CM, ipoibd's own runs on its QP1")
	}
	if mode == ipoib.Datagram {
		return cmChoice{Why: "--mode datagram"}, nil
	}
	if provider != "verbs" {
		return cmChoice{Service: cmOwn, Advertise: true, Why: "ipoibd's CM engine on the software adapter's QP1"}, nil
	}
	loaded, holders := cmLoaded()
	held := ""
	if len(holders) > 0 {
		held = " (used by " + strings.Join(holders, ", ") + ")"
	}
	switch {
	case cmFlag == cmOwn && loaded:
		return cmChoice{}, verbs.CMLoadedError(holders)
	case cmFlag == cmOwn:
		return cmChoice{Service: cmOwn, Advertise: true, Why: "--cm own: ipoibd's CM on QP1 through ib_umad, RFC 4755 service IDs"}, nil
	case cmFlag == "auto" && !loaded:
		return cmChoice{Service: cmOwn, Advertise: true, Why: "ib_cm is not loaded: ipoibd's CM on QP1 through ib_umad, RFC 4755 service IDs"}, nil
	}
	why := "--cm kernel"
	if cmFlag == "auto" {
		why = "ib_cm is loaded" + held + ", so the kernel CM through librdmacm"
	}
	if peers == "ipoibd-only" {
		return cmChoice{Service: cmKernel, Advertise: true, Why: why + " and --peers ipoibd-only: its mapped service IDs reach ipoibd peers only"}, nil
	}
	return cmChoice{Service: cmKernel, Why: why + "; connected mode not advertised, datagram only: its mapped service IDs would refuse a kernel ipoib peer (--peers ipoibd-only if every peer is ipoibd)"}, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
