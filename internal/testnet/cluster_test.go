package testnet

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The daemon tests run this test binary as the daemon: with
// FAKE_IPOIBD=serve it answers `show` on an abstract socket (one per
// network namespace, like ipoibd's control socket) until SIGTERM; with
// FAKE_IPOIBD=die it fails at once.
func TestMain(m *testing.M) {
	switch os.Getenv("FAKE_IPOIBD") {
	case "":
		os.Exit(m.Run())
	case "die":
		fmt.Println("fake ipoibd: broken flag")
		os.Exit(1)
	}
	const sock = "@testnet-fake-ipoibd"
	if len(os.Args) > 1 && os.Args[1] == "show" {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			os.Exit(1)
		}
		conn.Close()
		os.Exit(0)
	}
	fmt.Println("fake ipoibd:", strings.Join(os.Args[1:], " "))
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	<-term
	fmt.Println("fake ipoibd: terminated")
	os.Exit(0)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
}

// upFake makes a cluster whose daemon is this test binary. Its numbers
// (31-35) are below the blocks of the ipoibd end-to-end tests (40-239),
// since Down kills stray daemons by their underlay address.
func upFake(t *testing.T, name string, hosts, number int) *Cluster {
	t.Helper()
	needRoot(t)
	if err := Down(name); err != nil {
		t.Fatal(err)
	}
	c, err := Up(name, hosts, number)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Down(name); err != nil {
			t.Error(err)
		}
	})
	if c.Daemon, err = os.Executable(); err != nil {
		t.Fatal(err)
	}
	return c
}

func log(t *testing.T, c *Cluster, k int) string {
	t.Helper()
	b, err := os.ReadFile(c.LogPath(k))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestClusterDaemons: Start returns once the daemon answers, with the
// host's addresses unless given others; Stop waits for the exit; Down
// ends what is left and removes every namespace.
func TestClusterDaemons(t *testing.T) {
	c := upFake(t, "tntd", 2, 31)
	t.Setenv("FAKE_IPOIBD", "serve")
	if err := c.Start(1, "--mode", "connected"); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(2, "--addr", "192.168.9.9/24"); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[int]string{
		1: "fake ipoibd: --underlay 10.31.0.1 --addr 192.168.31.1/24 --addr fd00:31::1/64 --mode connected\n",
		2: "fake ipoibd: --underlay 10.31.0.2 --addr 192.168.9.9/24\n",
	} {
		if got := log(t, c, k); got != want {
			t.Errorf("h%d's log %q, want %q", k, got, want)
		}
	}

	if err := c.Stop(1, unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := log(t, c, 1); !strings.HasSuffix(got, "fake ipoibd: terminated\n") {
		t.Errorf("h1's log after Stop: %q, want its last words", got)
	}
	if _, err := c.Pid(1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Pid after Stop: %v, want none", err)
	}
	if err := c.Stop(1, unix.SIGTERM); err != nil {
		t.Errorf("Stop of a stopped host: %v", err)
	}

	// Down from a process that did not start h2's daemon (as after a
	// crash): it finds the daemon by its pid file.
	pid, err := c.Pid(2)
	if err != nil {
		t.Fatal(err)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if err := Down(c.Name); err != nil {
		t.Fatal(err)
	}
	if exited, err := awaitPidfd(pidfd, 0); err != nil || !exited {
		t.Errorf("h2's daemon runs on after Down (%v)", err)
	}
	for _, ns := range []string{c.Switch(), c.Host(1), c.Host(2)} {
		if _, err := os.Stat("/run/netns/" + ns); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s after Down: %v", ns, err)
		}
	}
	if _, err := Open(c.Name); err == nil {
		t.Error("Open finds the cluster after Down")
	}
}

// TestClusterEnded: a daemon that dies on its own is reported with how it
// ended; one stopped by Stop, or running, is not.
func TestClusterEnded(t *testing.T) {
	c := upFake(t, "tnte", 1, 35)
	t.Setenv("FAKE_IPOIBD", "serve")
	if err := c.Start(1); err != nil {
		t.Fatal(err)
	}
	if e := c.Ended(1); e != "" {
		t.Errorf("Ended of a running daemon: %q", e)
	}
	pid, err := c.Pid(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Ended(1) == "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the reaper's record has no event to wait on
	}
	if e := c.Ended(1); !strings.HasPrefix(e, "signal: killed at ") {
		t.Errorf("Ended after SIGKILL: %q, want signal: killed at …", e)
	}
	if err := c.Start(1); err != nil {
		t.Fatal(err)
	}
	if e := c.Ended(1); e != "" {
		t.Errorf("Ended after a new Start: %q (the old daemon's)", e)
	}
	if err := c.Stop(1, unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if e := c.Ended(1); e != "" {
		t.Errorf("Ended after Stop: %q, want nothing", e)
	}
}

// TestClusterStartFails: a daemon that exits at once fails Start with its
// log, a missing binary with a hint.
func TestClusterStartFails(t *testing.T) {
	c := upFake(t, "tntf", 1, 32)
	t.Setenv("FAKE_IPOIBD", "die")
	err := c.Start(1)
	if err == nil || !strings.Contains(err.Error(), "exited before it answered") || !strings.Contains(err.Error(), "broken flag") {
		t.Errorf("Start of a failing daemon: %v", err)
	}
	c.Daemon = "/nonexistent/ipoibd"
	if err := c.Start(1); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("Start without a binary: %v", err)
	}
}

// TestClusterUp: the hosts reach each other over the bridge at MTU 9000,
// and Open sees the cluster Up made; a second Up of the name fails.
func TestClusterUp(t *testing.T) {
	c := upFake(t, "tntu", 3, 33)
	out, err := c.Command(3, "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "8972", c.Underlay(1).String()).CombinedOutput()
	if err != nil {
		t.Fatalf("ping at MTU 9000 from h3 to h1: %v\n%s", err, out)
	}
	o, err := Open(c.Name)
	if err != nil || o.Net != 33 || o.Host(2) != "tntu-h2" || o.Port(2) != "tntu-v2" || o.Switch() != "tntu-br" {
		t.Errorf("Open: %+v, %v", o, err)
	}
	if _, err := Up(c.Name, 1, 33); err == nil {
		t.Error("a second Up of the same name succeeds")
	}
}

// TestClusterLoss: Loss 100 drops every fabric datagram host 2 receives,
// Loss 0 none.
func TestClusterLoss(t *testing.T) {
	c := upFake(t, "tntl", 2, 34)
	var rx, tx *net.UDPConn
	InNamed(t, c.Host(2), func() {
		var err error
		if rx, err = net.ListenUDP("udp4", &net.UDPAddr{Port: FabricPort}); err != nil {
			t.Fatal(err)
		}
	})
	defer rx.Close()
	InNamed(t, c.Host(1), func() {
		var err error
		if tx, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: c.Underlay(2).AsSlice(), Port: FabricPort}); err != nil {
			t.Fatal(err)
		}
	})
	defer tx.Close()
	arrives := func(wait time.Duration) bool {
		if _, err := tx.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		_ = rx.SetReadDeadline(time.Now().Add(wait))
		_, err := rx.Read(make([]byte, 16))
		return err == nil
	}
	if !arrives(5 * time.Second) {
		t.Fatal("a datagram without loss does not arrive")
	}
	if err := c.Loss(2, 100); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if arrives(20 * time.Millisecond) {
			t.Fatal("a datagram arrives through 100 % loss")
		}
	}
	if err := c.Loss(2, 0); err != nil {
		t.Fatal(err)
	}
	if !arrives(5 * time.Second) {
		t.Fatal("a datagram does not arrive after loss 0")
	}
	if err := c.Loss(2, 101); err == nil {
		t.Error("loss 101 % is taken")
	}
}

// TestClusterNames: the names and addresses the scripts and tests rely on.
func TestClusterNames(t *testing.T) {
	c := &Cluster{Name: "demo", Net: 77}
	for _, tc := range []struct{ got, want string }{
		{c.Host(3), "demo-h3"},
		{c.Switch(), "demo-br"},
		{c.Port(3), "demo-v3"},
		{c.Underlay(3).String(), "10.77.0.3"},
		{c.IPv4(12).String(), "192.168.77.12"},
		{c.IPv6(12).String(), "fd00:77::12"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
	for _, tc := range []struct {
		name  string
		hosts int
		ok    bool
	}{
		{"demo", 3, true},
		{"metricsuse", 2, true},
		{"a-b", 2, false},  // '-' would make NAME-h1 ambiguous
		{"Demo", 2, false}, // upper case
		{"../x", 2, false}, // a path
		{"", 1, false},     // empty
		{"abcdefghijkl", 9, true},
		{"abcdefghijkl", 10, false}, // abcdefghijkl-v10 is 16 characters
	} {
		if err := checkName(tc.name, tc.hosts); (err == nil) != tc.ok {
			t.Errorf("checkName(%q, %d): %v, want ok %v", tc.name, tc.hosts, err, tc.ok)
		}
	}
}

func TestParseSignal(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want syscall.Signal
	}{
		{"TERM", syscall.SIGTERM}, {"SIGKILL", syscall.SIGKILL}, {"int", syscall.SIGINT}, {"9", syscall.SIGKILL},
		{"", 0}, {"NOPE", 0}, {"0", 0}, {"-1", 0}, {"99", 0},
	} {
		got, err := ParseSignal(tc.in)
		if got != tc.want || (err == nil) != (tc.want != 0) {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
