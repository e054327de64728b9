package main

import (
	"bufio"
	"bytes"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unitCaps returns the capabilities dist/ipoibd@.service.in gives the
// daemon, checking that its bounding and ambient sets agree.
func unitCaps(t *testing.T) []string {
	t.Helper()
	unit, err := os.ReadFile("../dist/ipoibd@.service.in")
	if err != nil {
		t.Fatal(err)
	}
	sets := map[string][]string{}
	for _, l := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && (k == "CapabilityBoundingSet" || k == "AmbientCapabilities") {
			sets[k] = strings.Fields(v)
		}
	}
	if len(sets["CapabilityBoundingSet"]) == 0 || !slices.Equal(sets["CapabilityBoundingSet"], sets["AmbientCapabilities"]) {
		t.Fatalf("the unit's capability sets %v: want one non-empty list, the same for bounding and ambient", sets)
	}
	return sets["CapabilityBoundingSet"]
}

// capBits are the capability numbers of linux/capability.h the unit may name.
var capBits = map[string]uint{"CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_NET_BIND_SERVICE": 10, "CAP_IPC_LOCK": 14, "CAP_SYS_ADMIN": 21}

// TestServiceCapabilities starts a daemon as systemd would: with exactly
// the unit's capabilities (setpriv drops every other one, also from the
// bounding set), a NOTIFY_SOCKET, a watchdog and JOURNAL_STREAM. It must
// announce readiness, ping its watchdog, serve pings both ways without
// entering a namespace (ip netns exec puts it in its host's; no --netns),
// log SIGHUP and keep running, and say STOPPING=1 on SIGTERM.
func TestServiceCapabilities(t *testing.T) {
	c := newCluster(t, "svccap", 2)
	if _, err := lookTools("setpriv"); err != nil {
		t.Skip(err)
	}
	caps := unitCaps(t)
	var list []string
	var mask uint64
	for _, cp := range caps {
		bit, ok := capBits[cp]
		if !ok {
			t.Fatalf("the unit names %s, which this test does not know", cp)
		}
		mask |= 1 << bit
		list = append(list, "+"+strings.ToLower(strings.TrimPrefix(cp, "CAP_")))
	}
	set := "-all," + strings.Join(list, ",")

	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_ = ln.SetReadDeadline(time.Now().Add(30 * time.Second))
	next := func(want string) {
		t.Helper()
		buf := make([]byte, 256)
		for {
			k, err := ln.Read(buf)
			if err != nil {
				t.Fatalf("waiting for %s on NOTIFY_SOCKET: %v", want, err)
			}
			if strings.HasPrefix(string(buf[:k]), want) {
				return
			}
			if !strings.HasPrefix(string(buf[:k]), "WATCHDOG=1") { // pings may come between
				t.Fatalf("NOTIFY_SOCKET got %q, want %s", buf[:k], want)
			}
		}
	}

	d := exec.Command("ip", "netns", "exec", c.host(1),
		"setpriv", "--inh-caps="+set, "--ambient-caps="+set, "--bounding-set="+set,
		binary, "run", "--underlay", c.underlay(1), "--addr", c.ip4(1)+"/24", "--addr", c.ip6(1)+"/64")
	d.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=200000", "JOURNAL_STREAM=8:1")
	stderr, err := d.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1000)
	var log bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	exited := false
	defer func() {
		if !exited {
			_ = d.Process.Kill()
			_ = d.Wait()
		}
		for l := range lines {
			log.WriteString(l + "\n")
		}
		if t.Failed() {
			t.Logf("capability-limited daemon's log:\n%s", log.String())
		}
	}()
	// waitLine reads the log up to a line containing s.
	waitLine := func(s string) string {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the daemon's log ended before %q", s)
				}
				log.WriteString(l + "\n")
				if strings.Contains(l, s) {
					return l
				}
			case <-timeout:
				t.Fatalf("no log line with %q in 30 s", s)
			}
		}
	}

	next("READY=1")
	up := waitLine("msg=up")
	if !strings.HasPrefix(up, "<6>level=INFO") || strings.Contains(up, "time=") {
		t.Errorf("journal line %q: want the <6> priority and no timestamp", up)
	}
	next("WATCHDOG=1")

	// The daemon holds exactly the unit's capabilities.
	pid := strconv.Itoa(d.Process.Pid) // setpriv and ip netns exec exec, so this is the daemon
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"CapEff", "CapBnd", "CapAmb"} {
		m := regexp.MustCompile(field + `:\s+([0-9a-f]+)`).FindSubmatch(status)
		got, _ := strconv.ParseUint(string(m[1]), 16, 64)
		if got != mask {
			t.Errorf("%s %#x, want the unit's %#x", field, got, mask)
		}
	}

	c.start(2)
	c.ping(1, c.ip4(2), 3)
	c.ping(2, c.ip4(1), 3)
	c.ping(1, c.ip6(2), 3)

	if err := d.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if l := waitLine("SIGHUP"); !strings.Contains(l, "connections=") {
		t.Errorf("SIGHUP logged %q, want the state", l)
	}
	c.on(1, binary, "show") // still serving

	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next("STOPPING=1")
	for range lines {
	}
	exited = true
	if err := d.Wait(); err != nil {
		t.Errorf("the daemon exited with %v after SIGTERM", err)
	}
	// Without --netns nothing may have needed CAP_SYS_ADMIN.
	if strings.Contains(log.String(), "not permitted") {
		// Netlink subscriptions with Namespace set setns even into the
		// daemon's own namespace: pass it only with --netns.
		t.Errorf("something needed a capability the unit does not give (CAP_SYS_ADMIN for a setns?):\n%s", log.String())
	}
}

// TestUnitSecurity: the unit systemd would run scores 3.0 or better in
// systemd-analyze security, and make unit puts ExecStart under PREFIX.
func TestUnitSecurity(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed (scripts/deps.sh installs the systemd package)")
	}
	dir := t.TempDir()
	unit := filepath.Join(dir, "ipoibd@.service")
	out, err := exec.Command("make", "-s", "-C", "..", "unit", "UNIT="+unit, "PREFIX=/opt/ipoibd-test").CombinedOutput()
	if err != nil {
		t.Fatalf("make unit: %v\n%s", err, out)
	}
	text, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "\nExecStart=/opt/ipoibd-test/sbin/ipoibd run ") || strings.Contains(string(text), "@SBINDIR@") {
		t.Errorf("make unit PREFIX=/opt/ipoibd-test did not put ExecStart under the prefix:\n%s", text)
	}
	for _, want := range []string{"\nType=notify\n", "\nWatchdogSec=", "\nNotifyAccess=main\n"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("the unit lacks %q", strings.TrimSpace(want))
		}
	}
	out, err = exec.Command("systemd-analyze", "security", "--offline=yes", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	if score > 3.0 {
		t.Errorf("exposure %.1f, want at most 3.0:\n%s", score, out)
	}
	t.Logf("systemd-analyze security: %.1f", score)
}

// TestJournalLog: under systemd (JOURNAL_STREAM) each line starts with its
// priority and has no timestamp; elsewhere lines keep theirs.
func TestJournalLog(t *testing.T) {
	for _, tc := range []struct {
		journal bool
		log     func(*slog.Logger)
		want    string // prefix of the line
	}{
		{true, func(l *slog.Logger) { l.Error("e", "k", 1) }, `<3>level=ERROR msg=e k=1`},
		{true, func(l *slog.Logger) { l.Warn("w") }, `<4>level=WARN msg=w`},
		{true, func(l *slog.Logger) { l.Info("i", "peer", "10.0.0.2") }, `<6>level=INFO msg=i peer=10.0.0.2`},
		{true, func(l *slog.Logger) { l.Debug("d") }, `<7>level=DEBUG msg=d`},
		{true, func(l *slog.Logger) { l.With("if", "ib0").Warn("w", "n", 2) }, `<4>level=WARN msg=w if=ib0 n=2`},
		{false, func(l *slog.Logger) { l.Warn("w") }, `time=`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if tc.journal {
				t.Setenv("JOURNAL_STREAM", "8:1234")
			} else {
				t.Setenv("JOURNAL_STREAM", "")
			}
			var buf bytes.Buffer
			tc.log(slog.New(logHandler(&buf, slog.LevelDebug)))
			line := buf.String()
			if !strings.HasPrefix(line, tc.want) || strings.Count(line, "\n") != 1 {
				t.Errorf("logged %q, want one line starting %q", line, tc.want)
			}
			if tc.journal && strings.Contains(line, "time=") {
				t.Errorf("logged %q: the journal stamps lines itself", line)
			}
		})
	}
}

// TestNotify: sd_notify messages reach NOTIFY_SOCKET, a path or an
// abstract name, as single datagrams; without it nothing is sent.
func TestNotify(t *testing.T) {
	for _, name := range []string{filepath.Join(t.TempDir(), "notify"), "@ipoibd-test-notify-" + strings.ReplaceAll(t.Name(), "/", "-")} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			t.Setenv("NOTIFY_SOCKET", name)
			t.Setenv("WATCHDOG_USEC", "20000")
			t.Setenv("WATCHDOG_PID", "")
			n := newNotifier(slog.New(slog.NewTextHandler(os.Stderr, nil)))
			n.send("READY=1")
			alive := make(chan struct{}, 1)
			stop := n.watchdog(func() { alive <- struct{}{} })
			defer stop()
			_ = ln.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 64)
			for _, want := range []string{"READY=1", "WATCHDOG=1"} {
				if want == "WATCHDOG=1" {
					<-alive // the ping follows a liveness check
				}
				k, err := ln.Read(buf)
				if err != nil || string(buf[:k]) != want {
					t.Fatalf("got %q, %v; want %q", buf[:k], err, want)
				}
			}
		})
	}
	t.Setenv("NOTIFY_SOCKET", "")
	n := newNotifier(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if n.addr != nil {
		t.Errorf("notifier without NOTIFY_SOCKET has address %v", n.addr)
	}
}

// journalStream points JOURNAL_STREAM at f, as systemd does for stderr.
func journalStream(t *testing.T, f *os.File) {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	t.Setenv("JOURNAL_STREAM", strconv.FormatUint(uint64(st.Dev), 10)+":"+strconv.FormatUint(st.Ino, 10))
}

// parseEntry decodes a native journal entry: NAME=value lines, and NAME,
// newline, 64-bit little-endian length, value, newline.
func parseEntry(t *testing.T, b []byte) map[string]string {
	t.Helper()
	f := map[string]string{}
	for len(b) > 0 {
		i := bytes.IndexAny(b, "=\n")
		if i < 0 {
			t.Fatalf("entry ends inside a field name: %q", b)
		}
		name := string(b[:i])
		if b[i] == '=' {
			j := bytes.IndexByte(b[i:], '\n')
			if j < 0 {
				t.Fatalf("field %s has no newline", name)
			}
			f[name] = string(b[i+1 : i+j])
			b = b[i+j+1:]
			continue
		}
		b = b[i+1:]
		if len(b) < 8 {
			t.Fatalf("field %s: no length", name)
		}
		var n uint64
		for k := 7; k >= 0; k-- {
			n = n<<8 | uint64(b[k])
		}
		if uint64(len(b)) < 8+n+1 || b[8+n] != '\n' {
			t.Fatalf("field %s: length %d does not fit %q", name, n, b)
		}
		f[name] = string(b[8 : 8+n])
		b = b[8+n+1:]
	}
	return f
}

// TestJournalNative: when stderr is the journal stream and journald's
// socket answers, each record is one native entry with its priority and
// every attribute as a field; a value with a newline keeps it. When the
// stream is not stderr, or journald does not take the entry, the line goes
// to stderr with its priority prefix.
func TestJournalNative(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "journal")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	defer func(s string) { journalSocket = s }(journalSocket)
	journalSocket = sock

	for _, tc := range []struct {
		name string
		log  func(*slog.Logger)
		want map[string]string
	}{
		{"info", func(l *slog.Logger) { l.Info("up", "if", "ib0", "mtu", 65520) },
			map[string]string{"PRIORITY": "6", "MESSAGE": "level=INFO msg=up if=ib0 mtu=65520", "IPOIBD_IF": "ib0", "IPOIBD_MTU": "65520"}},
		{"with", func(l *slog.Logger) { l.With("if", "ib0").Warn("port down", "peer_ip", "10.0.0.2") },
			map[string]string{"PRIORITY": "4", "IPOIBD_IF": "ib0", "IPOIBD_PEER_IP": "10.0.0.2"}},
		{"group", func(l *slog.Logger) { l.WithGroup("cm").Error("rej", slog.Group("why", "code", 28)) },
			map[string]string{"PRIORITY": "3", "IPOIBD_CM_WHY_CODE": "28"}},
		{"newline", func(l *slog.Logger) { l.Debug("d", "err", "a\nb") },
			map[string]string{"PRIORITY": "7", "IPOIBD_ERR": "a\nb"}},
		{"long-key", func(l *slog.Logger) { l.WithGroup("g.1").Info("i", strings.Repeat("k", 80), "v") },
			map[string]string{"IPOIBD_G_1_" + strings.Repeat("K", 64-len("IPOIBD_G_1_")): "v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stderr, err := os.Create(filepath.Join(dir, tc.name))
			if err != nil {
				t.Fatal(err)
			}
			defer stderr.Close()
			journalStream(t, stderr)
			tc.log(slog.New(logHandler(stderr, slog.LevelDebug)))
			_ = ln.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 4096)
			k, err := ln.Read(buf)
			if err != nil {
				t.Fatalf("no native entry: %v", err)
			}
			got := parseEntry(t, buf[:k])
			if got["SYSLOG_IDENTIFIER"] == "" || strings.Contains(got["MESSAGE"], "time=") || strings.HasPrefix(got["MESSAGE"], "<") {
				t.Errorf("entry %q: want an identifier and the bare line as MESSAGE", got)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s=%q, want %q (entry %q)", k, got[k], v, got)
				}
			}
			if b, _ := os.ReadFile(stderr.Name()); len(b) != 0 {
				t.Errorf("stderr got %q as well", b)
			}
		})
	}

	// Not the stream (a child that inherited JOURNAL_STREAM), then journald
	// gone: the stream line, with its priority.
	for _, tc := range []struct {
		name   string
		stream bool
		before func()
	}{
		{"not-the-stream", false, func() {}},
		{"journald-gone", true, func() { ln.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stderr, err := os.Create(filepath.Join(dir, tc.name))
			if err != nil {
				t.Fatal(err)
			}
			defer stderr.Close()
			if tc.stream {
				journalStream(t, stderr)
			} else {
				t.Setenv("JOURNAL_STREAM", "8:1234")
			}
			l := slog.New(logHandler(stderr, slog.LevelDebug))
			tc.before()
			l.Warn("w", "if", "ib0")
			if b, _ := os.ReadFile(stderr.Name()); string(b) != "<4>level=WARN msg=w if=ib0\n" {
				t.Errorf("stderr got %q, want the line with <4>", b)
			}
		})
	}
}
