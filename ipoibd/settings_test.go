package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ipoibd/ipoibd/bond"
	"github.com/ipoibd/ipoibd/control"
	"github.com/ipoibd/ipoibd/ib"
	"github.com/ipoibd/ipoibd/ipoib"
	"github.com/ipoibd/ipoibd/ipoib/ipoibcm"
	"github.com/ipoibd/ipoibd/softib"
	"github.com/ipoibd/ipoibd/softib/wire"
)

// softibDefaults are the settings of `ipoibd --underlay 10.0.0.1`.
func softibDefaults() settings {
	return settings{
		logLevel: slog.LevelInfo,
		iface: ipoib.Config{Name: "ib0", Mode: ipoib.Connected, RC: true, Policy: ipoibcm.PolicyLinux,
			PKey: 0xffff, MaxConns: 4096},
		provider:     providerSoftib,
		softib:       softib.Config{Name: "softib0", Addr: netip.MustParseAddr("10.0.0.1"), Port: wire.UDPPort, PKeys: []ib.PKey{0xffff}},
		underlayWait: time.Minute,
		connService:  "auto",
		peers:        "any",
		bonding:      bond.Policy{Spread: true},
	}
}

// TestParseSettings: what each good combination of flags reads as, with
// nothing opened.
func TestParseSettings(t *testing.T) {
	u := []string{"--underlay", "10.0.0.1"}
	for _, tc := range []struct {
		name string
		args []string
		want func(*settings) // applied to softibDefaults
	}{
		{"softib defaults", u, func(*settings) {}},
		{"help", []string{"--help", "--mode", "fast"}, func(s *settings) { *s = settings{help: true} }},
		{"-h", []string{"-h"}, func(s *settings) { *s = settings{help: true} }},
		{"version, nothing else checked", []string{"--version", "--mode", "fast"}, func(s *settings) { *s = settings{version: true} }},
		{"help and version", []string{"--version", "--help"}, func(s *settings) { *s = settings{help: true, version: true} }},
		{"every interface flag", append([]string{"--ifname", "ib3", "--mode", "connected", "--cm-modes", "uc, rc", "--cm-policy", "rfc",
			"--mtu", "2044", "--addr", "192.168.77.1/24", "--addr", "fd00::1/64", "--idle-timeout", "30s", "--max-conns", "1",
			"--log-level", "debug", "--netns", "h1", "--tun-offload=false", "--tun-queues", "8", "--metrics-listen", "[::1]:9468"}, u...),
			func(s *settings) {
				s.logLevel, s.metricsListen = slog.LevelDebug, "[::1]:9468"
				s.iface = ipoib.Config{Name: "ib3", Mode: ipoib.Connected, RC: true, UC: true, Policy: ipoibcm.PolicyRFC, PKey: 0xffff,
					MTU: 2044, Addrs: []netip.Prefix{netip.MustParsePrefix("192.168.77.1/24"), netip.MustParsePrefix("fd00::1/64")},
					IdleTimeout: 30 * time.Second, MaxConns: 1, NoOffload: true, Queues: 8}
				s.netns = "h1"
			}},
		{"uc only", append([]string{"--cm-modes", "uc"}, u...), func(s *settings) { s.iface.RC, s.iface.UC = false, true }},
		{"netns as a path", append([]string{"--netns", "/run/netns/h1"}, u...), func(s *settings) { s.netns = "/run/netns/h1" }},
		{"pkey is the softib table", append([]string{"--pkey", "0x8001"}, u...), func(s *settings) {
			s.iface.PKey, s.softib.PKeys = 0x8001, []ib.PKey{0x8001}
		}},
		{"softib table and port", append([]string{"--softib-pkeys", "0xffff, 0x8001", "--softib-port", "4792"}, u...), func(s *settings) {
			s.softib.PKeys, s.softib.Port = []ib.PKey{0xffff, 0x8001}, 4792
		}},
		{"softib on an InfiniBand subnet", append([]string{"--softib-link", "ib", "--softib-fabric", "10.0.0.254:4790"}, u...), func(s *settings) {
			s.softib.LinkLayer, s.softib.PKeys, s.softibIB = softib.LinkInfiniBand, nil, true // the SM's table, read when the port opens
			s.softib.IB.Forwarder = netip.MustParseAddrPort("10.0.0.254:4790")
		}},
		{"softib on ethernet, said", append([]string{"--softib-link", "ethernet"}, u...), func(*settings) {}},
		{"IPv6 underlay", []string{"--underlay", "fd00::7"}, func(s *settings) { s.softib.Addr = netip.MustParseAddr("fd00::7") }},
		{"underlay wait", append([]string{"--underlay-wait", "5s"}, u...), func(s *settings) { s.underlayWait = 5 * time.Second }},
		{"no underlay wait", append([]string{"--underlay-wait", "0"}, u...), func(s *settings) { s.underlayWait = 0 }},
		{"children", append([]string{"--child", "0x8002", "--child", "0x8003=192.168.78.1/24,fd01::1/64"}, u...), func(s *settings) {
			s.children = []childFlag{{"0x8002", control.ChildRequest{PKey: "0x8002"}},
				{"0x8003=192.168.78.1/24,fd01::1/64", control.ChildRequest{PKey: "0x8003", Addrs: []string{"192.168.78.1/24", "fd01::1/64"}}}}
		}},
		{"softib, own connection service", append([]string{"--cm", "own"}, u...), func(s *settings) { s.connService = "own" }},
		{"verbs", []string{"--provider", "verbs", "--device", "mlx5_0", "--port", "2", "--cm", "kernel", "--peers", "ipoibd-only"}, func(s *settings) {
			s.provider, s.softib, s.underlayWait, s.verbs = providerVerbs, softib.Config{}, 0, verbsPort{"mlx5_0", 2}
			s.connService, s.peers = "kernel", "ipoibd-only"
		}},
		{"verbs, port 255", []string{"--provider", "verbs", "--device", "rxe0", "--port", "255"}, func(s *settings) {
			s.provider, s.softib, s.underlayWait, s.verbs = providerVerbs, softib.Config{}, 0, verbsPort{"rxe0", 255}
		}},
		{"verbs, busy poll", []string{"--provider", "verbs", "--device", "rxe0", "--busy-poll", "50us"}, func(s *settings) {
			s.provider, s.softib, s.underlayWait, s.verbs = providerVerbs, softib.Config{}, 0, verbsPort{"rxe0", 1}
			s.busyPoll = 50 * time.Microsecond
		}},
		{"verbs, two ports of one adapter", []string{"--provider", "verbs", "--device", "mlx5_0", "--device", "mlx5_0:2", "--primary-reselect", "failure"}, func(s *settings) {
			s.provider, s.softib, s.underlayWait, s.verbs = providerVerbs, softib.Config{}, 0, verbsPort{"mlx5_0", 1}
			s.verbsMore, s.bonding.Reselect = []verbsPort{{"mlx5_0", 2}}, bond.ReselectFailure
		}},
		{"verbs, two adapters on --port", []string{"--provider", "verbs", "--device", "mlx5_0", "--device", "mlx5_1", "--port", "2"}, func(s *settings) {
			s.provider, s.softib, s.underlayWait, s.verbs = providerVerbs, softib.Config{}, 0, verbsPort{"mlx5_0", 2}
			s.verbsMore = []verbsPort{{"mlx5_1", 2}}
		}},
		{"softib, two ports, active-backup", append([]string{"--underlay", "10.1.0.1", "--bond-mode", "active-backup"}, u...), func(s *settings) {
			s.softibMore = []softib.Config{s.softib}
			s.softibMore[0].Addr, s.softibMore[0].Name, s.bonding.Spread = netip.MustParseAddr("10.0.0.1"), "softib1", false
			s.softib.Addr = netip.MustParseAddr("10.1.0.1")
		}},
		{"softib, two ports", append([]string{"--underlay", "10.1.0.1", "--primary-reselect", "better"}, u...), func(s *settings) {
			s.softibMore = []softib.Config{s.softib}
			s.softibMore[0].Addr, s.softibMore[0].Name, s.bonding.Reselect = netip.MustParseAddr("10.0.0.1"), "softib1", bond.ReselectBetter
			s.softib.Addr = netip.MustParseAddr("10.1.0.1")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSettings(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			want := softibDefaults()
			tc.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestParseSettingsRefusals: every flag mistake the parse step can see is
// refused with a message naming the flag (and, with several mistakes, the
// same one first as ever).
func TestParseSettingsRefusals(t *testing.T) {
	u := []string{"--underlay", "10.0.0.1"}
	verbs := []string{"--provider", "verbs", "--device", "mlx5_0"}
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error
	}{
		{"unexpected argument", []string{"extra"}, `unexpected argument "extra"`},
		{"unknown flag", []string{"--fast"}, "unknown flag: --fast"},
		{"bad mtu number", []string{"--mtu", "big"}, `invalid argument "big" for "--mtu`},
		{"bad log level", append([]string{"--log-level", "loud"}, u...), `--log-level "loud"`},
		{"metrics listen without port", append([]string{"--metrics-listen", "127.0.0.1"}, u...), `--metrics-listen "127.0.0.1"`},
		{"metrics listen on a name", append([]string{"--metrics-listen", "localhost:9468"}, u...), "is not an IP address"},
		{"metrics listen port 0", append([]string{"--metrics-listen", ":0"}, u...), `port "0": want 1-65535`},
		{"ifname too long", append([]string{"--ifname", "averyverylongname0"}, u...), "--ifname: \"averyverylongname0\" is not an interface name"},
		{"ifname with a slash", append([]string{"--ifname", "ib/0"}, u...), "--ifname"},
		{"empty ifname", append([]string{"--ifname", ""}, u...), "--ifname"},
		{"negative queues", append([]string{"--tun-queues", "-1"}, u...), "--tun-queues -1: want 1 to 8"},
		{"too many queues", append([]string{"--tun-queues", fmt.Sprint(ipoib.MaxQueues + 1)}, u...), "--tun-queues 9"},
		{"bad mode", append([]string{"--mode", "fast"}, u...), `--mode: mode "fast"`},
		{"bad policy", append([]string{"--cm-policy", "bsd"}, u...), "--cm-policy"},
		{"bad cm modes", append([]string{"--cm-modes", "rd"}, u...), `--cm-modes "rd"`},
		{"empty cm mode", append([]string{"--cm-modes", "rc,"}, u...), `--cm-modes "rc,"`},
		{"pkey of no partition", append([]string{"--pkey", "0x8000"}, u...), "--pkey: P_Key"},
		{"pkey not a number", append([]string{"--pkey", "fffg"}, u...), "--pkey: P_Key"},
		{"pkey too big", append([]string{"--pkey", "0x10000"}, u...), "--pkey"},
		{"addr without prefix", append([]string{"--addr", "10.1.1.1"}, u...), `--addr "10.1.1.1"`},
		{"addr not an address", append([]string{"--addr", "ten/8"}, u...), `--addr "ten/8"`},
		{"addr twice", append([]string{"--addr", "10.1.1.1/24", "--addr", "fd00::1/64", "--addr", "10.1.1.1/24"}, u...), "--addr 10.1.1.1/24 is given twice"},
		{"datagram with cm modes", append([]string{"--mode", "datagram", "--cm-modes", "uc"}, u...), `--mode datagram makes no connections, so --cm-modes "uc"`},
		{"datagram with a policy", append([]string{"--mode", "datagram", "--cm-policy", "rfc"}, u...), `--cm-policy "rfc" say nothing`},
		{"max conns 0", append([]string{"--max-conns", "0"}, u...), "--max-conns 0: must be at least 1"},
		{"negative mtu", append([]string{"--mtu", "-1"}, u...), "--mtu -1: must be positive"},
		{"bad cm", append([]string{"--cm", "theirs"}, u...), `--cm "theirs"`},
		{"bad peers", append([]string{"--peers", "all"}, u...), `--peers "all"`},
		{"kernel CM on softib", append([]string{"--cm", "kernel"}, u...), "--cm kernel is for --provider verbs"},
		{"unknown provider", []string{"--provider", "mlx"}, `--provider "mlx": want softib or verbs`},
		{"--cm before --provider", []string{"--provider", "mlx", "--cm", "theirs"}, `--cm "theirs"`},
		{"no underlay", nil, "--underlay is required with --provider softib"},
		{"bad underlay", []string{"--underlay", "nonsense"}, `--underlay "nonsense": not an IP address`},
		{"underlay with a prefix", []string{"--underlay", "10.0.0.1/24"}, `--underlay "10.0.0.1/24"`},
		{"bad softib pkeys", append([]string{"--softib-pkeys", "0xffff,0x0000"}, u...), "--softib-pkeys: P_Key"},
		{"bad softib link", append([]string{"--softib-link", "roce"}, u...), `--softib-link "roce": want ethernet or ib`},
		{"ib without a fabric", append([]string{"--softib-link", "ib"}, u...), "--softib-link ib needs --softib-fabric"},
		{"ib with a bad fabric", append([]string{"--softib-link", "ib", "--softib-fabric", "10.0.0.254"}, u...), `--softib-fabric "10.0.0.254"`},
		{"fabric on ethernet", append([]string{"--softib-fabric", "10.0.0.254:4790"}, u...), "--softib-fabric is for --softib-link ib"},
		{"softib pkeys on ib", append([]string{"--softib-link", "ib", "--softib-fabric", "10.0.0.254:4790", "--softib-pkeys", "0xffff"}, u...),
			"on ib the subnet manager sets the P_Key table"},
		{"negative underlay wait", append([]string{"--underlay-wait", "-1s"}, u...), "--underlay-wait -1s: must not be negative"},
		{"softib port out of range", append([]string{"--softib-port", "65536"}, u...), "--softib-port"},
		{"verbs without a device", []string{"--provider", "verbs"}, "--device is required with --provider verbs"},
		{"verbs with an underlay", append(verbs, u...), "--underlay is for --provider softib"},
		{"verbs port 0", append(verbs, "--port", "0"), "--port 0: want 1-255"},
		{"verbs port 256", append(verbs, "--port", "256"), "--port 256: want 1-255"},
		{"verbs device port 0", append(verbs, "--device", "mlx5_0:0"), `--device "mlx5_0:0": want DEVICE or DEVICE:PORT`},
		{"verbs device without a name", append(verbs, "--device", ":2"), `--device ":2"`},
		{"verbs port twice", append(verbs, "--device", "mlx5_0:1"), "--device mlx5_0 port 1 given twice"},
		{"negative busy poll", append(verbs, "--busy-poll", "-1us"), "--busy-poll -1µs: want 0 (off) to 10ms"},
		{"busy poll too long", append(verbs, "--busy-poll", "1s"), "--busy-poll 1s: want 0 (off) to 10ms"},
		{"busy poll on softib", append([]string{"--busy-poll", "50us"}, u...), "--busy-poll is for --provider verbs"},
		{"underlay twice", append([]string{"--underlay", "10.0.0.1"}, u...), "--underlay 10.0.0.1 given twice"},
		{"two ports on the InfiniBand subnet", append([]string{"--softib-link", "ib", "--softib-fabric", "10.0.0.254:4790", "--underlay", "10.1.0.1"}, u...), "--softib-link ib) cannot be: ibsim's libumad2sim.so gives a process only its node's first port"},
		{"reselect on one port", append([]string{"--primary-reselect", "failure"}, u...), "--primary-reselect and --bond-mode are for an interface over two or more ports"},
		{"bond mode on one port", append([]string{"--bond-mode", "active-backup"}, u...), "--primary-reselect and --bond-mode are for an interface over two or more ports"},
		{"bad bond mode", append([]string{"--underlay", "10.1.0.1", "--bond-mode", "balance-rr"}, u...), `--bond-mode "balance-rr": want spread or active-backup`},
		{"bad reselect", append([]string{"--underlay", "10.1.0.1", "--primary-reselect", "never"}, u...), `--primary-reselect "never": want always, better or failure`},
		{"child of no partition", append([]string{"--child", "0x8000"}, u...), `--child "0x8000": P_Key`},
		{"child with a bad address", append([]string{"--child", "0x8001=192.168.78.1"}, u...), `--child "0x8001=192.168.78.1": address "192.168.78.1"`},
		{"child with no P_Key", append([]string{"--child", "=192.168.78.1/24"}, u...), `--child "=192.168.78.1/24"`},
		{"interface flags before the provider's", []string{"--provider", "verbs", "--mode", "fast"}, "--mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseSettings(tc.args)
			if err == nil {
				t.Fatalf("accepted as %+v; want an error with %q", s, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}
