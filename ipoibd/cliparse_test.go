package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestParseIfAddr: an interface address is ADDRESS/LENGTH of a unicast
// host; every other input is refused saying what is wrong with it.
func TestParseIfAddr(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // the prefix, or what the error says
	}{
		{"192.168.77.1/24", "192.168.77.1/24"},
		{"fd00:77::1/64", "fd00:77::1/64"},
		{"10.33.7.1/32", "10.33.7.1/32"},
		{"10.33.7.0/31", "10.33.7.0/31"}, // point-to-point: both addresses are hosts'
		{"fe80::5/64", "fe80::5/64"},
		{"10.33.7.1", `"10.33.7.1": no prefix length; want ADDRESS/LENGTH`},
		{"fd00::1", `"fd00::1": no prefix length`},
		{"ten/8", `"ten/8": "ten" is not an IP address`},
		{"10.33.7/24", `"10.33.7" is not an IP address`},
		{"", `"": no prefix length`},
		{"10.33.7.1/0", `"10.33.7.1/0": prefix /0 would put every address on this link`},
		{"fd00::1/0", "prefix /0"},
		{"10.33.7.1/33", `"10.33.7.1/33": prefix length "33": want 1 to 32`},
		{"fd00::1/129", `prefix length "129": want 1 to 128`},
		{"10.33.7.1/x", `prefix length "x"`},
		{"10.33.7.1/", `prefix length ""`},
		{"224.0.0.5/24", `"224.0.0.5/24": a multicast address cannot be`},
		{"ff02::1/64", "a multicast address"},
		{"0.0.0.0/8", "the unspecified address"},
		{"::/64", "the unspecified address"},
		{"127.0.0.2/8", "a loopback address belongs on lo"},
		{"::1/128", "loopback"},
		{"::ffff:10.1.1.1/120", "IPv4-mapped"},
		{"fe80::1%eth0/64", "takes no zone (%eth0)"},
		{"192.168.77.0/24", "the network address of 192.168.77.0/24, not a host's; e.g. 192.168.77.1"},
		{"192.168.77.255/24", "the broadcast address of 192.168.77.0/24"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			p, err := parseIfAddr(tc.in)
			switch {
			case err == nil && p.String() != tc.want:
				t.Errorf("= %v, want %s", p, tc.want)
			case err != nil && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestAddrFlagsSayWhatIsWrong: --addr, --child's addresses and child add's
// name their flag and the fault.
func TestAddrFlagsSayWhatIsWrong(t *testing.T) {
	u := []string{"--underlay", "10.0.0.1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append([]string{"--addr", "10.33.7.1/0"}, u...), `--addr "10.33.7.1/0": prefix /0`},
		{append([]string{"--addr", "239.1.1.1/8"}, u...), `--addr "239.1.1.1/8": a multicast address`},
		{append([]string{"--addr", "10.33.7.1"}, u...), `--addr "10.33.7.1": no prefix length`},
		{append([]string{"--child", "8001=10.1.1.1/0"}, u...), `--child "8001=10.1.1.1/0": address "10.1.1.1/0": prefix /0`},
		{append([]string{"--child", "8001=ff02::1/64"}, u...), "a multicast address"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseSettings(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := childAddrs([]string{"10.1.1.1/24", "224.1.1.1/4"}); err == nil || !strings.Contains(err.Error(), `address "224.1.1.1/4": a multicast`) {
		t.Errorf("child add --addr 224.1.1.1/4: %v", err)
	}
}

// TestPKeysAreHex: --pkey, --softib-pkeys and --child read P_Keys in hex
// with or without 0x, as every InfiniBand tool writes them.
func TestPKeysAreHex(t *testing.T) {
	u := []string{"--underlay", "10.0.0.1"}
	s, err := parseSettings(append([]string{"--pkey", "8033", "--softib-pkeys", "8033, 0x8001,ffff", "--child", "8001=10.1.1.1/24"}, u...))
	if err != nil {
		t.Fatal(err)
	}
	if s.iface.PKey != 0x8033 || len(s.softib.PKeys) != 3 || s.softib.PKeys[0] != 0x8033 || s.softib.PKeys[2] != 0xffff {
		t.Errorf("--pkey 8033 --softib-pkeys 8033,0x8001,ffff: pkey %v, table %v; want 0x8033 and 0x8033 0x8001 0xffff", s.iface.PKey, s.softib.PKeys)
	}
}

// TestCommandLine: query flags may come before the command, every
// command has its own help, and each kind of failure has its own exit
// status.
func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int // the command word's index; -1: run
	}{
		{[]string{"show"}, 0},
		{[]string{"--json", "show"}, 1},
		{[]string{"-j", "--ifname", "ib1", "stats"}, 3},
		{[]string{"--ifname=ib1", "neigh", "flush"}, 1},
		{[]string{"-h", "child", "add"}, 1},
		{[]string{"--underlay", "10.0.0.1", "--addr", "10.1.1.1/24"}, -1},
		{[]string{"--ifname", "ib0", "--underlay", "10.0.0.1"}, -1},
		{[]string{"--ifname", "show"}, -1}, // an interface called show, for run
		{[]string{"-h", "run"}, 1},
		{[]string{"--json", "frob"}, -1}, // not a command: run refuses the flags
		{[]string{"frob"}, 0},            // the unknown command is named
		{nil, -1},
	} {
		if got := commandAt(tc.args); got != tc.want {
			t.Errorf("commandAt(%q) = %d, want %d", tc.args, got, tc.want)
		}
	}

	for _, tc := range []struct {
		args []string
		code int
		out  []string // in stdout (help) or the error
		not  string   // not in stdout
	}{
		{[]string{"child", "--help"}, 0, []string{"ipoibd child add [PARENT] PKEY", "ipoibd child del", "--name", "--mtu"}, "ipoibd show"},
		{[]string{"child", "add", "-h"}, 0, []string{"ipoibd child add [PARENT] PKEY", "--addr"}, "child del"},
		{[]string{"stats", "--help"}, 0, []string{"ipoibd stats [IFNAME]", "--all", "--json"}, "run flags"},
		{[]string{"neigh", "--help"}, 0, []string{"ipoibd neigh [IFNAME]", "ipoibd neigh flush"}, "ipoibd conn"},
		{[]string{"--help", "mode"}, 0, []string{"ipoibd mode [IFNAME] connected|datagram"}, "ipoibd child"},
		{[]string{"frob"}, exitUsage, []string{`unknown command "frob"`}, ""},
		{[]string{"child"}, exitUsage, []string{"child: want add or del (see ipoibd child --help)"}, ""},
		{[]string{"show", "--bogus"}, exitUsage, []string{"show: unknown flag: --bogus (see ipoibd show --help)"}, ""},
		{[]string{"--mtu", "-3", "--underlay", "10.0.0.1"}, exitUsage, []string{"--mtu -3"}, ""},
		{[]string{"version", "x"}, exitUsage, []string{"version takes no arguments"}, ""},
		{[]string{"version", "--help"}, 0, []string{"ipoibd version "}, "ipoibd show"},
		{[]string{"man", "-h"}, 0, []string{"ipoibd man "}, "ipoibd show"},
		{[]string{"help", "--help"}, 0, []string{"ipoibd help "}, "ipoibd show"},
		{[]string{"--json", "show", "ipoibd-nope"}, exitNoDaemon, []string{"no ipoibd serves ipoibd-nope"}, ""},
		{[]string{"child", "add", "--ifname", "ipoibd-nope", "8001"}, exitNoDaemon, []string{"no ipoibd serves ipoibd-nope"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			err := dispatch(tc.args, &out)
			text := out.String()
			if err != nil {
				text = err.Error()
			}
			if code := exitCodeOf(err); code != tc.code {
				t.Errorf("exit status %d (%v), want %d", code, err, tc.code)
			}
			for _, w := range tc.out {
				if !strings.Contains(text, w) {
					t.Errorf("lacks %q:\n%s", w, text)
				}
			}
			if tc.not != "" && strings.Contains(text, tc.not) {
				t.Errorf("has %q (the whole usage?):\n%s", tc.not, text)
			}
		})
	}
}

func exitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	return exitCode(err)
}

// TestExitStatuses: the codes are distinct, and an error without one is
// a daemon that could not start.
func TestExitStatuses(t *testing.T) {
	seen := map[int]bool{}
	for _, e := range exitStatuses {
		if seen[e.code] || e.what == "" {
			t.Errorf("exit status %d twice or unexplained", e.code)
		}
		seen[e.code] = true
	}
	for _, c := range []int{0, exitStart, exitUsage, exitNoDaemon, exitRefused, exitLost} {
		if !seen[c] {
			t.Errorf("exit status %d unexplained", c)
		}
	}
	if exitCode(errors.New("port gone")) != exitStart || exitCode(withExit(exitRefused, errors.New("no"))) != exitRefused {
		t.Error("exitCode does not read the status an error carries")
	}
}
