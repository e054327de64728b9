package main

// The run flags and the pure step from them to settings: nothing here
// opens, logs or probes, so every refusal of a flag can be tested as an
// ordinary user, and none leaves anything half-made behind.

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ipoibd/ipoibd/bond"
	"github.com/ipoibd/ipoibd/control"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
	"github.com/ipoibd/ipoibd/softib"
	"github.com/ipoibd/ipoibd/softib/wire"
	"github.com/spf13/pflag"
)

// options are the daemon's flags.
type options struct {
	ifname      string
	provider    string
	underlay    []string
	reselect    string        // --primary-reselect
	bondMode    string        // --bond-mode
	underWait   time.Duration // --underlay-wait
	softibPort  uint16
	softibPKeys string
	softibLink  string // --softib-link
	softibFab   string // --softib-fabric
	pkey        string
	mode        string
	cmModes     string
	policy      string
	mtu         int
	addrs       []string
	children    []string
	idleTimeout time.Duration
	busyPoll    time.Duration
	maxConns    int
	logLevel    string
	netns       string
	device      []string
	port        int
	cm          string
	peers       string
	metrics     string // --metrics-listen
	perPeer     int    // --metrics-per-peer
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
	fs.StringArrayVar(&o.underlay, "underlay", nil, "softib: IP address of the underlay this host's adapter lives on (required for softib). Given twice or more, the interface runs over one port on each (softib0, softib1, ...): the first is the primary and active, the others warm standbys it fails over to within a second when its port goes down (--softib-link ethernet only: under ibsim a process has one port)")
	fs.StringVar(&o.bondMode, "bond-mode", bond.ModeSpread, "with two or more ports: spread (each flow on one port that is up; to peers with two ports too, over both rails; every other peer sees only the active port) or active-backup (the active port carries everything, as the kernel bonding's mode)")
	fs.StringVar(&o.reselect, "primary-reselect", "always", "with two or more ports: when the primary port takes over again once it is back, as the kernel bonding's primary_reselect: always (at once), better (when better than the active one's: with equal ports, when that fails) or failure (only when the active port fails)")
	fs.DurationVar(&o.underWait, "underlay-wait", 60*time.Second, "softib: wait this long at start for the --underlay address to appear on an interface (a unit started before its network), then give up; 0: fail at once")
	fs.Uint16Var(&o.softibPort, "softib-port", wire.UDPPort, "softib: UDP port of the fabric")
	fs.StringVar(&o.softibPKeys, "softib-pkeys", "", "softib: the port's P_Key table, `PKEY[,PKEY...]` in hex (what a subnet manager sets on InfiniBand); P_Key children need theirs here (default: --pkey alone)")
	fs.StringVar(&o.softibLink, "softib-link", "ethernet", "softib: link layer, ethernet (RoCEv2 framing, peers at their underlay addresses) or ib (native InfiniBand framing through the fabric forwarder softib-ibfwd, on a subnet OpenSM runs under ibsim: LID, LMC, SM LID, GID and P_Key table are read through libibumad, run under ibsim's libumad2sim.so, and the SA's joins and paths are used as on an InfiniBand adapter; needs a binary built with -tags rdma)")
	fs.StringVar(&o.softibFab, "softib-fabric", "", "softib --softib-link ib: the fabric forwarder's underlay `ADDR:PORT` (required with ib)")
	fs.StringVar(&o.pkey, "pkey", "0xffff", "partition key of the interface, in hex as every InfiniBand tool writes it (0x optional: 8001 is 0x8001)")
	fs.StringVar(&o.mode, "mode", "connected", "IPoIB mode: connected or datagram")
	fs.StringVar(&o.cmModes, "cm-modes", "rc", "connected modes offered: rc, uc or rc,uc")
	fs.StringVar(&o.policy, "cm-policy", "linux", "sending policy: linux (send on our own connections only, as the kernel's ipoib expects) or rfc (send also on connections an ipoibd peer opened, never on a kernel peer's; RFC 4755 crossing rule)")
	fs.IntVar(&o.mtu, "mtu", 0, "interface MTU (default: 65520 connected, the UD MTU in datagram mode)")
	fs.StringArrayVar(&o.addrs, "addr", nil, "`ADDRESS/LENGTH` to put on the interface (repeatable), e.g. 192.168.77.1/24 or fd00:77::1/64: a unicast host address and its subnet's prefix length")
	fs.StringArrayVar(&o.children, "child", nil, "a P_Key child made at start, as ipoibd child add makes one at run time (repeatable): `PKEY[=ADDRESS/LENGTH,...]`, the P_Key in hex, e.g. 8001=192.168.78.1/24")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 0, "tear down connections idle this long (0: never)")
	fs.IntVar(&o.maxConns, "max-conns", 4096, "most connections past setup at once; further REQs are rejected (no resources). Those in setup have their own bounds (256, 16 per peer)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.netns, "netns", "", "network namespace to put the interface in (a name as ip netns lists it, or a path; default: the daemon's, and no namespace is entered). Entering one needs CAP_SYS_ADMIN")
	fs.StringArrayVar(&o.device, "device", nil, "verbs: RDMA device, e.g. mlx5_0 (see ibv_devices), or `DEVICE[:PORT]` with its port. Given twice or more, the interface runs over each port (mlx5_0:1 and mlx5_0:2, or two adapters), the first the primary, as --underlay does on softib")
	fs.IntVar(&o.port, "port", 1, "verbs: port of the RDMA device (of each --device that names none)")
	fs.DurationVar(&o.busyPoll, "busy-poll", 0, "verbs: after a receive completion, go on polling the completion queue this long (e.g. 50us) before sleeping until the next completion event: fewer wake-ups under load and less latency for a burst's next packet, for the CPU time spent polling (a core while traffic flows); 0: off")
	fs.StringVar(&o.cm, "cm", "auto", "verbs: connection service: own (ipoibd's CM on QP1 through ib_umad; needs the kernel's ib_cm unloaded), kernel (the kernel CM through librdmacm), or auto (own unless ib_cm is loaded)")
	fs.StringVar(&o.peers, "peers", "any", "verbs --cm kernel: any, ipoibd-only to advertise connected mode anyway, or rfc-send. The kernel CM cannot listen on RFC 4755's service IDs, so a kernel ipoib peer's connection request would be refused: with peers that may be kernel ipoib, --cm kernel runs datagram mode. rfc-send (InfiniBand only) opens RC connections to RFC 4755 peers through rdma_cm's AF_IB and offers datagram, so peers send to us over UD; judged on paper, not yet on hardware")
	fs.StringVar(&o.metrics, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics, `ADDR` an IP address and port, e.g. 127.0.0.1:9468 or [::1]:9468 (:9468: every address), in the daemon's own network namespace (not --netns's); empty: off. Read at scrape time, nothing on the datapath: ipoibd_<counter>_total for every counter of ipoibd stats; gauges ipoibd_info, ipoibd_mtu_bytes, ipoibd_ud_mtu_bytes, ipoibd_ib_mtu_bytes, ipoibd_neighbors (by state, via), ipoibd_connections (by type, direction, state); with --metrics-per-peer, ipoibd_peer_tx_bytes_total and ipoibd_peer_rx_bytes_total; each with an interface label (children too); and the Go runtime's and the process's")
	fs.IntVar(&o.perPeer, "metrics-per-peer", 0, fmt.Sprintf("with --metrics-listen: counters of their own, ipoibd_peer_tx_bytes_total and ipoibd_peer_rx_bytes_total (labels: the peer's IP address, its QPN@GUID, the direction), for the `N` connections of each interface that carried the most octets; 0: none, so that the series stay few on a large fabric (at most %d)", maxPerPeer))
	fs.BoolVar(&o.offload, "tun-offload", true, "let the TUN hand over and take TCP/UDP super-packets of up to 64 KiB (TSO, USO, checksum offload, receive coalescing); ipoibd cuts them into standard IPoIB packets with valid checksums, so peers see no difference. --tun-offload=false moves every packet whole (for comparisons)")
	fs.IntVar(&o.queues, "tun-queues", 0, fmt.Sprintf("TUN queues, each read by its own thread with its own buffers; the kernel keeps each flow on one queue (default: one per CPU, at most %d; at most %d)", ipoib.DefaultMaxQueues, ipoib.MaxQueues))
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.BoolVarP(&o.help, "help", "h", false, "print the whole usage and exit")
	return fs
}

// The providers --provider names.
const (
	providerSoftib = "softib"
	providerVerbs  = "verbs"
)

// settings are the run flags checked and read: what the acting steps
// (logging, the connection service, the provider, the interfaces) need.
type settings struct {
	help, version bool // print and exit; nothing else was checked
	logLevel      slog.Level
	metricsListen string // "" for none
	perPeer       int    // connections per interface with metrics of their own
	// iface is the first interface's configuration without what only an
	// opened port gives (Device, Subnet, ConnService) and Log.
	iface ipoib.Config
	// netns is where the interfaces live (--netns): a name as `ip netns`
	// knows it, or a path; "" for the daemon's own.
	netns    string
	provider string        // providerSoftib or providerVerbs
	softib   softib.Config // with --provider softib
	// softibMore are the interface's further ports (--underlay given more
	// than once), and how they share the work.
	softibMore []softib.Config
	bonding    bond.Policy
	// underlayWait bounds the wait for softib's underlay address.
	underlayWait time.Duration
	verbs        verbsPort // with --provider verbs
	busyPoll     time.Duration
	verbsMore    []verbsPort // the interface's further ports (--device given more than once)
	// connService and peers are --cm and --peers; which connection
	// service runs also depends on the host (chooseConnService).
	connService string
	peers       string
	children    []childFlag

	// softibIB: --softib-link ib; the port's place on the subnet is read
	// when it opens (openSoftibIB), not from flags.
	softibIB bool
}

// maxBusyPoll bounds --busy-poll: longer spins buy nothing a sleep would
// not, and hold a core.
const maxBusyPoll = 10 * time.Millisecond

// verbsPort is the rdma-core port --device and --port name.
type verbsPort struct {
	device string
	port   int
}

// childFlag is one --child: the flag's text, for errors, and the request.
type childFlag struct {
	arg string
	req control.ChildRequest
}

// parseSettings reads the run command's arguments. Each error names the
// flag at fault; the checks run in the order they always have, so with
// several mistakes the first reported stays the same.
func parseSettings(args []string) (settings, error) {
	var o options
	fs := runFlags(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return settings{help: true}, nil
		}
		return settings{}, err
	}
	if fs.NArg() > 0 {
		return settings{}, fmt.Errorf("unexpected argument %q (see ipoibd --help)", fs.Arg(0))
	}
	if o.help || o.version {
		return settings{help: o.help, version: o.version}, nil
	}
	s, err := o.settings()
	if err != nil {
		return settings{}, err
	}
	return s, nil
}

// settings checks the flags of every interface and connection, then the
// connection service's and the provider's.
func (o *options) settings() (settings, error) {
	s := settings{metricsListen: o.metrics, perPeer: o.perPeer, provider: o.provider, connService: o.cm, peers: o.peers}
	if err := s.logLevel.UnmarshalText([]byte(o.logLevel)); err != nil {
		return s, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	if err := checkMetricsListen(o.metrics); err != nil {
		return s, err
	}
	if err := checkMetricsPerPeer(o.perPeer, o.metrics); err != nil {
		return s, err
	}
	var err error
	if s.iface, err = o.ifaceConfig(); err != nil {
		return s, err
	}
	s.netns = o.netns
	if s.bonding.Reselect, err = bond.ParseReselect(o.reselect); err != nil {
		return s, fmt.Errorf("--primary-reselect %w", err)
	}
	if s.bonding.Spread, err = bond.ParseMode(o.bondMode); err != nil {
		return s, fmt.Errorf("--bond-mode %w", err)
	}
	if err := checkConnService(o.provider, o.cm, o.peers); err != nil {
		return s, err
	}
	switch o.provider {
	case providerSoftib:
		s.softib, err = o.softibConfig(s.iface.PKey)
		if err == nil {
			s.softibMore, err = o.morePorts(s.softib)
		}
		s.underlayWait = o.underWait
		if err == nil && o.underWait < 0 {
			err = fmt.Errorf("--underlay-wait %v: must not be negative", o.underWait)
		}
		s.softibIB = s.softib.LinkLayer == softib.LinkInfiniBand
	case providerVerbs:
		s.verbs, s.verbsMore, err = o.verbsPorts()
		s.busyPoll = o.busyPoll
		if err == nil && (o.busyPoll < 0 || o.busyPoll > maxBusyPoll) {
			err = fmt.Errorf("--busy-poll %v: want 0 (off) to %v", o.busyPoll, maxBusyPoll)
		}
	default:
		err = fmt.Errorf("--provider %q: want softib or verbs", o.provider)
	}
	if err == nil && o.busyPoll != 0 && o.provider != providerVerbs {
		err = errors.New("--busy-poll is for --provider verbs")
	}
	if err != nil {
		return s, err
	}
	if len(s.softibMore) == 0 && len(s.verbsMore) == 0 && (o.reselect != "always" || o.bondMode != bond.ModeSpread) {
		return s, errors.New("--primary-reselect and --bond-mode are for an interface over two or more ports (--underlay or --device given more than once)")
	}
	s.children, err = parseChildren(o.children)
	return s, err
}

// ifaceConfig reads the flags that describe the interface and its
// connections, whatever the provider.
func (o *options) ifaceConfig() (ipoib.Config, error) {
	cfg := ipoib.Config{NoOffload: !o.offload, IdleTimeout: o.idleTimeout}
	if err := checkIfname(o.ifname); err != nil {
		return cfg, fmt.Errorf("--ifname: %w", err)
	}
	cfg.Name = o.ifname
	if o.queues < 0 || o.queues > ipoib.MaxQueues {
		return cfg, fmt.Errorf("--tun-queues %d: want 1 to %d (0: one per CPU)", o.queues, ipoib.MaxQueues)
	}
	cfg.Queues = o.queues
	var err error
	if cfg.Mode, err = ipoib.ParseMode(o.mode); err != nil {
		return cfg, fmt.Errorf("--mode: %w", err)
	}
	if cfg.Policy, err = ipoibcm.ParsePolicy(o.policy); err != nil {
		return cfg, fmt.Errorf("--cm-policy: %w", err)
	}
	if cfg.RC, cfg.UC, err = parseCMModes(o.cmModes); err != nil {
		return cfg, err
	}
	if cfg.Mode == ipoib.Datagram && (o.cmModes != "rc" || o.policy != "linux") {
		// A daemon started in datagram mode has no connection service.
		return cfg, fmt.Errorf("--mode datagram makes no connections, so --cm-modes %q and --cm-policy %q say nothing: leave them out, or run --mode connected", o.cmModes, o.policy)
	}
	if cfg.PKey, err = ib.ParsePKey(o.pkey); err != nil {
		return cfg, fmt.Errorf("--pkey: %w", err)
	}
	for _, a := range o.addrs {
		p, err := parseIfAddr(a)
		if err != nil {
			return cfg, fmt.Errorf("--addr %w", err)
		}
		if slices.Contains(cfg.Addrs, p) {
			return cfg, fmt.Errorf("--addr %v is given twice", p)
		}
		cfg.Addrs = append(cfg.Addrs, p)
	}
	if o.maxConns < 1 {
		return cfg, fmt.Errorf("--max-conns %d: must be at least 1", o.maxConns)
	}
	cfg.MaxConns = o.maxConns
	// The upper bound depends on the mode and the port's MTU: ipoib.New
	// checks it once the port is open.
	if o.mtu < 0 {
		return cfg, fmt.Errorf("--mtu %d: must be positive", o.mtu)
	}
	cfg.MTU = o.mtu
	return cfg, nil
}

// parseCMModes reads --cm-modes.
func parseCMModes(s string) (rc, uc bool, err error) {
	for _, m := range strings.Split(s, ",") {
		switch strings.TrimSpace(m) {
		case "rc":
			rc = true
		case "uc":
			uc = true
		default:
			return false, false, fmt.Errorf("--cm-modes %q: want rc, uc or rc,uc", s)
		}
	}
	return rc, uc, nil
}

// errOnePortOnIB refuses a second port on the simulated subnet: ibsim's
// libumad2sim.so attaches a process to its node's first port alone, so a
// second port's SA client would send by the first port and reach no SA
// once that port's link is cut (internal/ibsim's
// TestDualPortHCAOnePortPerProcess).
var errOnePortOnIB = errors.New("--underlay given more than once: two ports on the simulated InfiniBand subnet (--softib-link ib) cannot be: ibsim's libumad2sim.so gives a process only its node's first port for MADs, so a second port could reach the SA only through the first, and not at all once it fails; on ethernet they work")

// morePorts are the softib ports of the second --underlay on, each as
// first but for its address and name; and --primary-reselect for them.
func (o *options) morePorts(first softib.Config) ([]softib.Config, error) {
	if len(o.underlay) == 1 {
		return nil, nil
	}
	if first.LinkLayer == softib.LinkInfiniBand {
		return nil, errOnePortOnIB
	}
	var out []softib.Config
	seen := map[netip.Addr]bool{first.Addr: true}
	for k, u := range o.underlay[1:] {
		a, err := netip.ParseAddr(u)
		if err != nil {
			return nil, fmt.Errorf("--underlay %q: not an IP address", u)
		}
		if seen[a] {
			return nil, fmt.Errorf("--underlay %s given twice: each port needs an address of its own", a)
		}
		seen[a] = true
		c := first
		c.Addr, c.Name = a, fmt.Sprintf("softib%d", k+1)
		out = append(out, c)
	}
	return out, nil
}

// softibConfig reads softib's flags; pkey is the interface's, the port's
// whole P_Key table unless --softib-pkeys gives one.
func (o *options) softibConfig(pkey ib.PKey) (softib.Config, error) {
	cfg := softib.Config{Name: "softib0", Port: o.softibPort, PKeys: []ib.PKey{pkey}}
	if len(o.underlay) == 0 {
		return cfg, errors.New("--underlay is required with --provider softib: the IP address this host's software adapter uses")
	}
	var err error
	if cfg.Addr, err = netip.ParseAddr(o.underlay[0]); err != nil {
		return cfg, fmt.Errorf("--underlay %q: not an IP address", o.underlay[0])
	}
	switch o.softibLink {
	case "ethernet", "":
		if o.softibFab != "" {
			return cfg, errors.New("--softib-fabric is for --softib-link ib: on ethernet, peers are reached at their underlay addresses")
		}
	case "ib":
		cfg.LinkLayer = softib.LinkInfiniBand
		if o.softibFab == "" {
			return cfg, errors.New("--softib-link ib needs --softib-fabric ADDR:PORT, the fabric forwarder's underlay address (softib-ibfwd -listen)")
		}
		if cfg.IB.Forwarder, err = netip.ParseAddrPort(o.softibFab); err != nil {
			return cfg, fmt.Errorf("--softib-fabric %q: want ADDR:PORT, e.g. 10.77.0.254:4790", o.softibFab)
		}
		// The subnet manager sets the P_Key table of an InfiniBand port.
		if o.softibPKeys != "" {
			return cfg, errors.New("--softib-pkeys is for --softib-link ethernet: on ib the subnet manager sets the P_Key table (OpenSM's partitions.conf)")
		}
		cfg.PKeys = nil
		return cfg, nil
	default:
		return cfg, fmt.Errorf("--softib-link %q: want ethernet or ib", o.softibLink)
	}
	if o.softibPKeys == "" {
		return cfg, nil
	}
	cfg.PKeys = nil
	for _, f := range strings.Split(o.softibPKeys, ",") {
		p, err := ib.ParsePKey(strings.TrimSpace(f))
		if err != nil {
			return cfg, fmt.Errorf("--softib-pkeys: %w", err)
		}
		cfg.PKeys = append(cfg.PKeys, p)
	}
	return cfg, nil
}

// verbsPorts reads verbs' flags: the first port, and the interface's
// further ones (--device given more than once).
func (o *options) verbsPorts() (verbsPort, []verbsPort, error) {
	if len(o.underlay) > 0 {
		return verbsPort{}, nil, errors.New("--underlay is for --provider softib; verbs uses the adapter's own port (--device, --port)")
	}
	if len(o.device) == 0 {
		return verbsPort{}, nil, errors.New("--device is required with --provider verbs: the RDMA device, e.g. mlx5_0 (ibv_devices lists them)")
	}
	if o.port < 1 || o.port > 255 {
		return verbsPort{}, nil, fmt.Errorf("--port %d: want 1-255", o.port)
	}
	var ports []verbsPort
	for _, d := range o.device {
		p := verbsPort{device: d, port: o.port}
		if name, num, ok := strings.Cut(d, ":"); ok {
			n, err := strconv.Atoi(num)
			if err != nil || n < 1 || n > 255 || name == "" {
				return verbsPort{}, nil, fmt.Errorf("--device %q: want DEVICE or DEVICE:PORT, the port 1-255", d)
			}
			p = verbsPort{device: name, port: n}
		}
		if slices.Contains(ports, p) {
			return verbsPort{}, nil, fmt.Errorf("--device %s port %d given twice", p.device, p.port)
		}
		ports = append(ports, p)
	}
	if len(ports) == 1 {
		return ports[0], nil, nil
	}
	return ports[0], ports[1:], nil
}

// parseChildren reads --child PKEY[=ADDR,...]: the P_Key and addresses are
// checked here, the rest (the port's P_Key table) when the child is made.
func parseChildren(args []string) ([]childFlag, error) {
	var out []childFlag
	for _, c := range args {
		pkey, addrs, _ := strings.Cut(c, "=")
		r := control.ChildRequest{PKey: pkey}
		if addrs != "" {
			r.Addrs = strings.Split(addrs, ",")
		}
		if _, err := ib.ParsePKey(r.PKey); err != nil {
			return nil, fmt.Errorf("--child %q: %w", c, err)
		}
		if _, err := childAddrs(r.Addrs); err != nil {
			return nil, fmt.Errorf("--child %q: %w", c, err)
		}
		out = append(out, childFlag{arg: c, req: r})
	}
	return out, nil
}

// parseIfAddr reads an interface address with its prefix length, as `ip
// addr add` takes it, and says what is wrong with one that is not: the
// error starts with s quoted, for the caller to name the flag.
func parseIfAddr(s string) (netip.Prefix, error) {
	const want = "want ADDRESS/LENGTH, e.g. 192.168.77.1/24 or fd00:77::1/64"
	addr, length, ok := strings.Cut(s, "/")
	if !ok {
		return netip.Prefix{}, fmt.Errorf("%q: no prefix length; %s", s, want)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q: %q is not an IP address; %s", s, addr, want)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q: an interface address takes no zone (%%%s)", s, a.Zone())
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q: prefix length %q: want 1 to %d", s, length, a.BitLen())
	}
	switch {
	case p.Bits() == 0:
		return netip.Prefix{}, fmt.Errorf("%q: prefix /0 would put every address on this link; want the subnet's length, e.g. /24 or /64", s)
	case a.IsMulticast():
		return netip.Prefix{}, fmt.Errorf("%q: a multicast address cannot be an interface's address (the interface joins groups itself)", s)
	case a.IsUnspecified():
		return netip.Prefix{}, fmt.Errorf("%q: the unspecified address cannot be an interface's address", s)
	case a.IsLoopback():
		return netip.Prefix{}, fmt.Errorf("%q: a loopback address belongs on lo, not on an IPoIB interface", s)
	case a.Is4In6():
		return netip.Prefix{}, fmt.Errorf("%q: an IPv4-mapped IPv6 address; give the IPv4 address itself", s)
	case a.Is4() && a == p.Masked().Addr() && p.Bits() < 31:
		return netip.Prefix{}, fmt.Errorf("%q: the network address of %v, not a host's; e.g. %v", s, p.Masked(), p.Masked().Addr().Next())
	case a.Is4() && p.Bits() < 31 && a == lastAddr(p):
		return netip.Prefix{}, fmt.Errorf("%q: the broadcast address of %v, not a host's", s, p.Masked())
	}
	return p, nil
}

// lastAddr is the highest address of p (IPv4's broadcast address).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	for k := p.Bits(); k < 32; k++ {
		b[k/8] |= 0x80 >> (k % 8)
	}
	return netip.AddrFrom4(b)
}
