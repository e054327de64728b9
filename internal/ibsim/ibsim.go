//go:build linux

// Package ibsim runs the real OpenSM on an InfiniBand fabric simulated by
// ibsim, for tests to judge our SA clients by: each test gets a fabric of
// its own, runs programs as its nodes (with ibsim's libumad2sim.so
// preloaded, so their libibumad calls reach the simulator) and reads the
// subnet back with infiniband-diags. Only tests import it.
//
// Simulator facts the tests live with: one CA port per process (SIM_HOST
// names the node), at most ten clients at once, no RMPP (saquery's tables
// stop at 200 octets: ask it for single records), MAD timeouts not
// simulated (a send comes back as timed out at once), and a client frees
// its slot only in C's exit: a Go program run as a node must leave through
// it (umadsa.Exit), not os.Exit. libumad2sim.so makes its fake sysfs as
// sys-PID in the working directory and only an orderly exit removes it, so
// every simulated process runs in the fabric's temporary directory.
package ibsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Umad2sim is the library that points a program's libibumad at the
// simulator (ibsim-utils installs it).
const Umad2sim = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"

// Topology is the fabric: one 8-port switch, sw1, with HCA hN on its
// port N (N = 1-4). OpenSM runs on h1.
const Topology = `Switch	8 "sw1"
[1]	"h1"[1]
[2]	"h2"[1]
[3]	"h3"[1]
[4]	"h4"[1]

Hca	1 "h1"
[1]	"sw1"[1]

Hca	1 "h2"
[1]	"sw1"[2]

Hca	1 "h3"
[1]	"sw1"[3]

Hca	1 "h4"
[1]	"sw1"[4]
`

// TwoSwitches is a fabric of two 8-port switches linked twice, sw1
// port 5 to sw2 port 5 and port 6 to port 6: h1 and h2 on sw1's ports 1
// and 2, h3 and h4 on sw2's ports 1 and 2. OpenSM runs on h1. ibsim
// gives the switches node GUIDs 0x200000 and 0x200001, and hN port GUID
// 0x100000+2N-1, in the order they are listed.
const TwoSwitches = `Switch	8 "sw1"
[1]	"h1"[1]
[2]	"h2"[1]
[5]	"sw2"[5]
[6]	"sw2"[6]

Switch	8 "sw2"
[1]	"h3"[1]
[2]	"h4"[1]
[5]	"sw1"[5]
[6]	"sw1"[6]

Hca	1 "h1"
[1]	"sw1"[1]

Hca	1 "h2"
[1]	"sw1"[2]

Hca	1 "h3"
[1]	"sw2"[1]

Hca	1 "h4"
[1]	"sw2"[2]
`

// How long the fabric may take to come up, and a program run on it.
const (
	upTimeout  = 30 * time.Second // a loaded 2-core machine needs more than 10
	runTimeout = 20 * time.Second
)

// Need skips the test unless ibsim, OpenSM, libumad2sim.so and the given
// things are installed: a command, or a file when it starts with "/".
func Need(t testing.TB, things ...string) {
	t.Helper()
	for _, c := range append([]string{"ibsim", "opensm", Umad2sim}, things...) {
		var err error
		if strings.HasPrefix(c, "/") {
			_, err = os.Stat(c)
		} else {
			_, err = exec.LookPath(c)
		}
		if err != nil {
			t.Skipf("%s missing (scripts/deps.sh installs it)", c)
		}
	}
}

// Fabric is one running simulator with OpenSM on it.
type Fabric struct {
	dir  string // the test's temporary directory, where every node runs
	sock string // IBSIM_SOCKNAME: the simulator's, apart from any other's
	osm  *exec.Cmd
	// netns and server: in remote mode (Options.Netns), the namespace
	// ibsim and OpenSM run in and the address nodes reach it at.
	netns  string
	server netip.Addr
	smNode string // the node OpenSM runs as
	con    *console
}

// Options shape a fabric other than Up's.
type Options struct {
	Topology string // ibsim's net file (default Topology)
	SMNode   string // the node OpenSM runs as (default "h1")
	// Netns runs ibsim in remote mode (UDP, ports RemotePort to
	// RemotePort+10) and OpenSM inside this named network namespace, at
	// its address Server. umad2sim's default, abstract unix sockets, is
	// per network namespace: a node in another namespace (an ipoibd in a
	// testnet host) reaches the simulator only this way, with
	// IBSIM_SERVER_NAME and IBSIM_SERVER_PORT (Env). Run and Output then
	// run their commands in Netns too.
	Netns  string
	Server netip.Addr
	// Console keeps ibsim's console open on a pipe, for Command (its
	// Unlink and ReLink cut and restore links). Without it ibsim runs
	// with -n: a console whose input ends would be read again forever.
	Console bool
}

// RemotePort is ibsim's control port in remote mode (its default); node
// i's data port is RemotePort+1+i.
const RemotePort = 7070

// Up starts ibsim on the Topology and OpenSM on h1 and returns once
// OpenSM says "SUBNET UP". Both are killed (SIGKILL: OpenSM's own exit
// can hang on a simulator already gone) when the test ends, however it
// ends.
func Up(t testing.TB) *Fabric {
	t.Helper()
	return UpWith(t, Options{})
}

// UpOn is Up on another topology, in ibsim's format (TwoSwitches); its
// node h1 runs OpenSM.
func UpOn(t testing.TB, topology string) *Fabric {
	t.Helper()
	return UpWith(t, Options{Topology: topology})
}

// UpWith is Up with Options.
func UpWith(t testing.TB, o Options) *Fabric {
	t.Helper()
	if o.Topology == "" {
		o.Topology = Topology
	}
	if o.SMNode == "" {
		o.SMNode = "h1"
	}
	f := &Fabric{dir: t.TempDir(), sock: fmt.Sprintf("ipoibd-ibsim-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6),
		netns: o.Netns, server: o.Server}
	if f.netns != "" && !f.server.IsValid() {
		t.Fatal("ibsim: a fabric in a namespace needs the address nodes reach it at (Options.Server)")
	}
	net := filepath.Join(f.dir, "net")
	if err := os.WriteFile(net, []byte(o.Topology), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-n", "-s", net}
	if o.Console {
		args = args[1:]
	}
	if f.netns != "" {
		args = append([]string{"-r", "-l", fmt.Sprint(RemotePort)}, args...)
	}
	sim := f.inNetns(exec.Command("ibsim", args...))
	if f.netns == "" {
		sim.Env = append(os.Environ(), "IBSIM_SOCKNAME="+f.sock)
	}
	if o.Console {
		f.con = &console{more: make(chan struct{}, 1)}
		in, err := sim.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		f.con.in = in
		sim.Stdout = f.con
	}
	f.start(t, sim)
	// ibsim says it is ready before it binds its sockets, and they are
	// abstract or UDP (no file to watch): poll for the control socket.
	for end := time.Now().Add(upTimeout); !f.listening(sim.Process.Pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("ibsim did not come up")
		}
	}
	f.smNode = o.SMNode
	f.startSM(t, f.dir, "")
	return f
}

// RestartSM kills OpenSM and starts it again on its node with conf added to
// its configuration (lines of opensm.conf) and its cache directory
// holding files (name to content: guid2lid gives LIDs to port GUIDs), as
// a subnet manager restarted with another configuration. It returns once
// the new one says "SUBNET UP".
func (f *Fabric) RestartSM(t testing.TB, conf string, files map[string]string) {
	t.Helper()
	f.StopSM()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.startSM(t, dir, conf)
}

// MoveSM stops OpenSM and starts it on another node, as RestartSM does:
// the subnet's SM moves to that node's port and LID, and the SM LID every
// port holds changes with it.
func (f *Fabric) MoveSM(t testing.TB, node, conf string, files map[string]string) {
	t.Helper()
	f.StopSM()
	f.smNode = node
	f.RestartSM(t, conf, files)
}

// startSM starts OpenSM on the SM node with its configuration and cache in dir.
func (f *Fabric) startSM(t testing.TB, dir, conf string) {
	t.Helper()
	// Our own configuration, not /etc/opensm's: no sweeps after the
	// first, and a log flushed line by line to our pipe, for "SUBNET UP"
	// to be seen when it happens.
	path := filepath.Join(dir, "opensm.conf")
	if err := os.WriteFile(path, []byte("force_log_flush TRUE\nsweep_interval 0\n"+conf), 0o644); err != nil {
		t.Fatal(err)
	}
	log := &watch{want: []byte("SUBNET UP"), seen: make(chan struct{})}
	f.osm = f.inNetns(exec.Command("opensm", "-F", path, "-f", "stdout"))
	f.osm.Env = append(f.Env(f.smNode), "OSM_TMP_DIR="+dir, "OSM_CACHE_DIR="+dir)
	f.osm.Stdout = log
	f.start(t, f.osm)
	select {
	case <-log.seen:
	case <-time.After(upTimeout):
		t.Fatalf("OpenSM did not bring the subnet up:\n%s", log)
	}
}

// listening reports whether ibsim (pid) has bound its control socket:
// the abstract one, or in remote mode the UDP port in its namespace.
func (f *Fabric) listening(pid int) bool {
	if f.netns == "" {
		b, _ := os.ReadFile("/proc/net/unix")
		return bytes.Contains(b, []byte("@"+f.sock+":ctl"))
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/udp", pid))
	return bytes.Contains(b, []byte(fmt.Sprintf(":%04X ", RemotePort)))
}

// inNetns makes cmd run in the fabric's namespace, if it has one.
func (f *Fabric) inNetns(cmd *exec.Cmd) *exec.Cmd {
	if f.netns == "" {
		return cmd
	}
	c := exec.Command("ip", append([]string{"netns", "exec", f.netns}, cmd.Args...)...)
	c.Env = cmd.Env
	return c
}

// Dir is the fabric's directory, where its nodes should run: umad2sim
// makes its fake sysfs in a node's working directory.
func (f *Fabric) Dir() string { return f.dir }

// start runs a daemon in the fabric's directory, killed at the end of the
// test, or by the kernel if the test binary dies without its cleanups (go
// test's timeout panics, a SIGKILL).
func (f *Fabric) start(t testing.TB, cmd *exec.Cmd) {
	cmd.Dir = f.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(cmd) })
}

func stop(cmd *exec.Cmd) {
	if cmd.ProcessState == nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// StopSM stops OpenSM, leaving a subnet without a subnet manager. It asks
// first (SIGTERM): only an orderly exit frees OpenSM's client slot in the
// simulator, and a slot left to a dead OpenSM keeps receiving the SA's
// MADs, so that a restarted OpenSM never answers them. One that does not
// leave in time is killed.
func (f *Fabric) StopSM() {
	if f.osm.ProcessState != nil {
		return
	}
	_ = f.osm.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		_ = f.osm.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = f.osm.Process.Kill()
		<-done
	}
}

// watch keeps a daemon's output and closes seen when want first appears.
type watch struct {
	want []byte
	seen chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (w *watch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	was := bytes.Contains(w.buf.Bytes(), w.want)
	w.buf.Write(p)
	if !was && bytes.Contains(w.buf.Bytes(), w.want) {
		close(w.seen)
	}
	return len(p), nil
}

func (w *watch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// Env is what a program on node host needs to reach the simulator.
func (f *Fabric) Env(host string) []string {
	return append(os.Environ(), f.NodeEnv(host)...)
}

// NodeEnv is what Env adds to the process's environment.
func (f *Fabric) NodeEnv(host string) []string {
	if f.netns != "" {
		return []string{"IBSIM_SERVER_NAME=" + f.server.String(), fmt.Sprintf("IBSIM_SERVER_PORT=%d", RemotePort),
			"SIM_HOST=" + host, "LD_PRELOAD=" + Umad2sim}
	}
	return []string{"IBSIM_SOCKNAME=" + f.sock, "SIM_HOST=" + host, "LD_PRELOAD=" + Umad2sim}
}

// Run runs cmd as node host, in the fabric's directory, killed if it takes
// 20 s. What cmd.Env holds is added to the node's environment.
func (f *Fabric) Run(host string, cmd *exec.Cmd) (stdout, stderr string, err error) {
	cmd.Env = append(f.Env(host), cmd.Env...)
	cmd = f.inNetns(cmd)
	cmd.Dir = f.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	// A node past its time is asked for its goroutines first (SIGQUIT: a
	// Go node prints them to stderr and exits), so that a hang says where
	// it hung; SIGKILL follows for one that does not exit.
	quit := time.AfterFunc(runTimeout, func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		time.AfterFunc(2*time.Second, func() { _ = cmd.Process.Kill() })
	})
	err = cmd.Wait()
	quit.Stop()
	return out.String(), errb.String(), err
}

// Output runs cmd as node host and returns its standard output; it fails
// the test if cmd fails.
func (f *Fabric) Output(t testing.TB, host string, cmd *exec.Cmd) string {
	t.Helper()
	what := describe(host, cmd)
	out, errs, err := f.Run(host, cmd)
	if err != nil {
		t.Fatalf("%s: %v: %s%s", what, err, out, errs)
	}
	return out
}

// JSON runs cmd as node host and decodes what it prints into v (nil:
// the output is not wanted); it fails the test if either fails.
func (f *Fabric) JSON(t testing.TB, host string, v any, cmd *exec.Cmd) {
	t.Helper()
	what := describe(host, cmd)
	out := f.Output(t, host, cmd)
	if v == nil {
		return
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%s printed %q: %v", what, out, err)
	}
}

// describe names cmd run as node host for a test's messages: the node,
// the environment cmd adds, the program's name and its arguments.
func describe(host string, cmd *exec.Cmd) string {
	w := append([]string{host + ":"}, cmd.Env...)
	w = append(w, filepath.Base(cmd.Args[0]))
	return strings.Join(append(w, cmd.Args[1:]...), " ")
}

// SwitchLID is sw1's LID, as ibswitches finds it.
func (f *Fabric) SwitchLID(t testing.TB) string {
	t.Helper()
	return f.SwitchLIDOf(t, "sw1")
}

// MulticastPorts reads ibroute -M's row for mlid on the switch with LID
// swLID: the switch ports it forwards to, "" when it has no row.
func (f *Fabric) MulticastPorts(t testing.TB, swLID string, mlid uint16) string {
	t.Helper()
	out := f.Output(t, "h4", exec.Command("ibroute", "-M", swLID))
	var header string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "Ports:") {
			header = l
		}
		if !strings.HasPrefix(l, fmt.Sprintf("0x%04x ", mlid)) {
			continue
		}
		// An x under a port number in the header is a member port.
		var ports []string
		for i, c := range header {
			if c >= '0' && c <= '9' && (i+1 >= len(header) || header[i+1] == ' ') && i < len(l) && l[i] == 'x' {
				j := strings.LastIndex(header[:i+1], " ")
				ports = append(ports, header[j+1:i+1])
			}
		}
		return strings.Join(ports, " ")
	}
	return ""
}

// Dump reads saquery's "name....value" lines.
func Dump(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if i := strings.Index(l, ".."); i > 0 {
			m[l[:i]] = strings.TrimLeft(l[i:], ".")
		}
	}
	return m
}

// childEnv marks a test binary run again as a simulated node's process.
const childEnv = "IPOIBD_IBSIM_CHILD"

// Main is a test package's TestMain for tests whose SA client must run in
// a simulated node's process: the test binary run again by Child. In that
// process it runs child with Child's argument and leaves through exit,
// which must be C's (umadsa.Exit): ibsim's libumad2sim.so frees the node's
// slot in an atexit handler that Go's os.Exit skips. Otherwise it runs
// the tests.
func Main(m *testing.M, child func(arg string) error, exit func(code int)) {
	arg, ok := os.LookupEnv(childEnv)
	if !ok {
		os.Exit(m.Run())
	}
	if err := child(arg); err != nil {
		fmt.Fprintln(os.Stderr, "ibsim child:", err)
		exit(1)
	}
	exit(0)
}

// Child is the test binary run again as a node's process with arg (see
// Main); Run, Output and JSON run it as a given node.
func Child(arg string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{childEnv + "=" + arg}
	return cmd
}

// SwitchLIDOf is the LID of the switch named name, as ibswitches finds
// it.
func (f *Fabric) SwitchLIDOf(t testing.TB, name string) string {
	t.Helper()
	out := f.Output(t, "h4", exec.Command("ibswitches"))
	m := regexp.MustCompile(`"` + regexp.QuoteMeta(name) + `".* lid (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ibswitches: no %s:\n%s", name, out)
	}
	return m[1]
}

// consolePrompt ends everything ibsim's console prints for a command.
const consolePrompt = "sim> "

// console is ibsim's console: its input, and what it printed.
type console struct {
	in   io.WriteCloser
	cmd  sync.Mutex // one command at a time
	mu   sync.Mutex
	out  bytes.Buffer
	more chan struct{} // capacity one: output came
}

func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.out.Write(p)
	c.mu.Unlock()
	select {
	case c.more <- struct{}{}:
	default:
	}
	return len(p), nil
}

// prompts counts the prompts printed so far and returns the output after
// the n-th (all of it for n 0).
func (c *console) prompts(n int) (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.out.String()
	after := s
	for i := 0; i < n; i++ {
		j := strings.Index(after, consolePrompt)
		if j < 0 {
			break
		}
		after = after[j+len(consolePrompt):]
	}
	return strings.Count(s, consolePrompt), after
}

// Console runs one line on ibsim's console (the fabric needs
// Options.Console) and returns what it printed for it: "Unlink \"h2\""
// cuts every link of node h2 (its port goes DOWN, the switch at the other
// end sends the SM a trap 128), "ReLink \"h2\"" restores them (INIT, a
// trap again, until the SM makes the port ACTIVE). It fails the test if
// no prompt follows within 10 s.
func (f *Fabric) Console(t testing.TB, line string) string {
	t.Helper()
	c := f.con
	if c == nil {
		t.Fatal("ibsim: Command on a fabric without Options.Console")
	}
	c.cmd.Lock()
	defer c.cmd.Unlock()
	deadline := time.After(10 * time.Second)
	// The first prompt comes when ibsim is ready; a command waits for it.
	n, _ := c.prompts(0)
	for n == 0 {
		select {
		case <-c.more:
		case <-deadline:
			_, all := c.prompts(0)
			t.Fatalf("ibsim printed no console prompt: %q", all)
		}
		n, _ = c.prompts(0)
	}
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		t.Fatalf("ibsim console: %s: %v", line, err)
	}
	for {
		m, after := c.prompts(n)
		if m > n {
			return strings.TrimSpace(after[:strings.Index(after, consolePrompt)])
		}
		select {
		case <-c.more:
		case <-deadline:
			t.Fatalf("ibsim console: no prompt after %q within 10 s: %q", line, after)
		}
	}
}
