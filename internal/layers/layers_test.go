// Package layers holds the one test of the package layout (docs/design.md):
// each package of the module may import only the module's packages listed
// for it here, with and without the rdma build tag, so nothing imports
// upwards, no adapter knows the CM or IPoIB, and the interface reaches no
// transport. A new package must be given its row.
package layers

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/ipoibd/ipoibd/"

// allowed is, per package (relative to the module), the module packages
// it may import directly. Test files are not held to it.
var allowed = map[string][]string{
	// the vocabulary and the codecs with no I/O
	"ib":      nil,
	"inetsum": nil,
	"mad":     {"ib"},
	// the fair share of a bounded queue of received MADs (providers, CM)
	"madqueue": {"ib"},
	"encap":    {"ib"},
	"sa":       {"ib", "mad"},
	"cm":       {"ib", "mad", "madqueue"},
	"neigh":    {"ib", "inetsum"},
	"offload":  {"ib", "inetsum"},
	"mtu":      {"inetsum"},
	"sapath":   {"cm", "ib", "sa"},
	// the IB wire: headers, ICRC and VCRC, RoCEv2 and native IB frames
	"softib/wire": {"ib"},
	// what the counters mean, for the man page, stats and metrics
	"counterdoc": nil,
	// adapters and transports: they know devices and MADs, never the CM's
	// IPoIB policy or the interface
	"ib/ibqueue":                    {"ib", "madqueue"}, // the software providers' rings
	"softib":                        {"ib", "ib/ibqueue", "softib/wire"},
	"verbs":                         {"ib", "madqueue"},
	"umadsa":                        {"ib", "sa"},
	"rdmacm":                        {"cm", "ib", "verbs"},
	"ib/ibtest":                     {"ib", "ib/ibqueue"},
	"softib/ibfwd":                  {"ib", "softib/wire"},
	"softib/ibfwd/cmd/softib-ibfwd": {"softib/ibfwd", "softib/wire"}, // wire: -capture picks the MADs with its frame parser
	// the kernel seam (an interface's kernel side) and its fake; the TUN
	// netdev: the device, netlink, namespaces, MTU host routes
	"netdev":            {"mtu", "offload"},
	"netdev/netdevtest": {"mtu", "netdev", "offload"},
	"tun":               {"encap", "mtu", "netdev", "offload"},
	// one interface: interfaces only, no transport and no TUN
	// (kernelFree below holds it to that indirectly too)
	"ipoib/ipoibcm": {"cm", "encap", "ib"},
	"ipoib":         {"cm", "encap", "ib", "ipoib/ipoibcm", "mtu", "neigh", "netdev", "offload", "sa", "sapath"},
	"metrics":       {"counterdoc", "ib", "ipoib"},
	// one interface over several ports: an ipoib.Interface per port on
	// one netdev
	"bond": {"ib", "ipoib", "mtu", "netdev", "offload"},
	// the daemon chooses the providers and the connection service, and
	// opens each interface's netdev
	"ipoibd": {"bond", "cm", "control", "counterdoc", "ib", "ipoib", "ipoib/ipoibcm", "metrics", "rdmacm", "softib", "softib/wire", "tun", "umadsa", "verbs"},
	// the control protocol: the daemon's requests, replies, refusals and
	// socket, which its client commands and the CNI plugin speak
	"control": nil,
	// the CNI plugin talks to a daemon over its control socket only, in
	// package control's words
	"cni":                {"control", "ib"},
	"cni/cmd/ipoibd-cni": {"cni"},
	// tooling
	"dist":                         nil, // tests only: the shipped recipes under the real tools
	"bench/relay":                  nil,
	"internal/cmload":              {"cm", "ib", "ipoib/ipoibcm", "softib"},
	"internal/depscheck":           nil,
	"internal/forge":               {"cm", "encap", "ib", "inetsum", "neigh", "softib/wire"},
	"internal/ibsim":               nil,
	"internal/nsflood":             {"ib", "internal/forge", "softib"},
	"internal/reqflood":            {"ib", "internal/forge"},
	"internal/testbed/saclient":    {"ib", "sa", "umadsa"},
	"internal/testbed/sibcm":       {"cm", "ib", "softib"},
	"internal/testbed/sibpingpong": {"ib", "softib"},
	"internal/testbed/verbsrelay":  {"ib", "offload", "tun", "verbs"},
	"internal/testnet":             nil,
	"internal/testns":              {"internal/testnet"}, // tests only: a namespace with a TUN, for mtu and tun
	"internal/testnet/cmd/testnet": {"internal/testnet"},
	"internal/testutil":            {"ib"},
	"internal/layers":              nil,
	// test tooling that no row lists, so only test files (not held to this
	// table) import it; cm's harness must not import cm, whose tests are
	// inside package cm
	"cm/cmtest": {"ib", "mad"},
	// the provider contract as a test suite, which each provider's tests
	// run
	"ib/ibconform": {"ib"},
}

// kernelFree are the packages of an interface that take their kernel side
// as a netdev.Netdev and must reach no TUN or netlink, directly or not
// (go list -deps): the interface runs as an ordinary user on a fake.
var kernelFree = []string{"bond", "ipoib", "ipoib/ipoibcm", "netdev", "netdev/netdevtest"}

// kernelOnly are the packages that only the TUN netdev and the daemon may
// depend on.
var kernelOnly = []string{module + "tun", "github.com/vishvananda/netlink"}

func TestKernelSeam(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the dependencies with")
	}
	for _, tags := range []string{"", "rdma"} {
		for _, pkg := range kernelFree {
			out, err := exec.Command(goTool, "list", "-deps", "-tags="+tags, module+pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps -tags=%q %s: %v", tags, pkg, err)
			}
			deps := strings.Fields(string(out))
			for _, bad := range kernelOnly {
				if slices.Contains(deps, bad) {
					t.Errorf("tags %q: %s depends on %s", tags, pkg, bad)
				}
			}
		}
	}
}

func TestPackageImports(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the imports with")
	}
	for _, tags := range []string{"", "rdma"} {
		out, err := exec.Command(goTool, "list", "-tags="+tags, "-f",
			"{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", module+"...").Output()
		if err != nil {
			t.Fatalf("go list -tags=%q: %v", tags, err)
		}
		for _, v := range violations(string(out), allowed) {
			t.Errorf("tags %q: %s", tags, v)
		}
	}
}

// violations reads go list's lines (a package, then its imports) and names
// every module import outside the package's row, and every package with no
// row.
func violations(list string, rows map[string][]string) []string {
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		pkg := strings.TrimPrefix(f[0], module)
		row, ok := rows[pkg]
		if !ok {
			bad = append(bad, pkg+" has no row in the layout table")
			continue
		}
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			imp = strings.TrimPrefix(imp, module)
			if !slices.Contains(row, imp) {
				bad = append(bad, pkg+" imports "+imp)
			}
		}
	}
	return bad
}

// The checker itself: each kind of breach is reported.
func TestViolationsFound(t *testing.T) {
	rows := map[string][]string{"verbs": {"ib"}, "ib": nil}
	tests := []struct {
		name, list string
		want       []string
	}{
		{"allowed", module + "verbs fmt " + module + "ib", nil},
		{"upwards", module + "verbs " + module + "cm", []string{"verbs imports cm"}},
		{"no row", module + "newpkg " + module + "ib", []string{"newpkg has no row in the layout table"}},
		{"outside the module", "golang.org/x/sys/unix " + module + "cm", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violations(tt.list, rows)
			if strings.Join(got, ";") != strings.Join(tt.want, ";") {
				t.Errorf("violations = %q, want %q", got, tt.want)
			}
		})
	}
}
